//! The record machine in Lua: one script per command, each one atomic step on one key.
//!
//! Each script is a second implementation of `idem_core::record::apply` (the tests compare
//! the two step for step). The Lua lives in `src/scripts/`: `prelude.lua`, which every
//! command's script starts with (its helpers, the server's clock as `now`, the record under
//! `KEYS[1]` as `rec`), then one file per command, `reserve.lua`, `complete.lua`,
//! `renew.lua`, `release.lua` and `read.lua`; [`source`] gives a script whole. Every script:
//!
//! - reads the server's clock with `TIME` (`I9` and rule 10: leases and retention are judged
//!   by the server, never by a client);
//! - touches exactly one key, `KEYS[1]`, so it runs unchanged on a Cluster;
//! - decodes the record ([`crate::codec`], version 2, or 3 for a fenced reservation) and, if the value is not one this
//!   adapter wrote (another Redis type, layout 1, an unknown version), changes nothing and
//!   answers `{'!', now, detail}`;
//! - judges liveness by one rule, the one the fast reserve uses: **a record is live exactly
//!   while its key exists**, and its deadline is the key's expiry plus one millisecond
//!   (`PEXPIRETIME + 1`; a key without an expiry never ends). No script reads a deadline from
//!   the value, which holds none. Redis keeps a key for a whole script by the clock of the
//!   script's start, which can lag `TIME` across a millisecond boundary, so a script also
//!   treats a key whose deadline is at or before its own `now` as absent: every answer is the
//!   record machine's at the `now` it reports;
//! - writes with `SET … PXAT deadline-1`, so Redis drops a record by itself exactly when the
//!   record machine treats it as gone (Redis keeps a key while its clock is at or before the
//!   expiry);
//! - checks the owner token itself for complete, renew and release (`I2`);
//! - when given a publish command (`PUBLISH` on a standalone server, `SPUBLISH` on a
//!   Cluster), publishes an empty notice on the channel named like the record's key after a
//!   complete or a release of a pending record that a waiter was told about (the reserve
//!   that answers "in flight" marks the record, state 4), which wakes the waiters of that
//!   key ([`crate::notices`]); an uncontended call publishes nothing.
//!
//! Replies are arrays `{tag, now, …}`, with `now` the server's clock in milliseconds.
//!
//! | script   | tags |
//! |----------|------|
//! | reserve  | `R` lease_until, then the fence (8 bytes) if the record carries one (reserved) · `F` lease_until (in flight) · `P` deadline, then the body or nothing (replay) · `U` deadline (replay: the action panicked, outcome unknown) · `K` fingerprint (key reuse) |
//! | complete | `C` 1 in time, 2 after lease expiry, 3 repeated · `X` refusal |
//! | renew    | `N` lease_until, then the fence if the record carries one · `X` refusal |
//! | release  | `D` · `X` refusal |
//! | read     | `E` (absent) · `V` raw record, deadline |
//!
//! Refusal codes: 1 not the owner, 2 lease lost, 3 already completed. A value this adapter did
//! not write: `!` detail.
//!
//! One more script has no prelude and reads no clock: the **fast complete**
//! (`complete_own.lua`), the owner's complete of its own unmarked pending record, the end of
//! every uncontended call. It compares the key's value with the pending record the owner
//! wrote, byte for byte, and only if they are equal writes the completed record with a
//! relative expiry (`PX retention-1`) and answers 1; on anything else it changes nothing,
//! answers 0, and the store sends the complete script. It is the record machine's complete
//! of a live pending record held by its caller: `Completed(InTime)`, the result kept for the
//! retention from the server's instant.
//!
//! And one more without a prelude: the **fenced fast reserve** (`reserve_fenced.lua`), a store
//! with fences' single-command reserve ([`crate::fast_reserve`]). It reads `TIME` and sends
//! `SET … NX … PX … GET` of the caller's version-3 reservation with the clock in microseconds
//! as its fence; on a grant it waits for `TIME` to read anything else (so every later grant on
//! the server is fenced above, MODEL.md `F1`) and answers `{1, fence}`; on a key that held a
//! value it answers `{0, value}` (and the key's `PTTL` when asked), which the store decides as
//! the single-command reserve's answer, handing the reserve script what the bytes do not
//! settle; on a `SET` the server refused, `{2}`, and the reserve script decides.
//!
//! The store runs each script with `EVALSHA`, and with `EVAL` and the source when the
//! server's script cache does not hold it (a restart, `SCRIPT FLUSH`, a new Cluster node):
//! `EVAL` goes to the key's node and caches the script there. Those fallbacks are counted
//! (`StoreStats::script_fallbacks`).

/// Shared helpers and the record's load, before every command's script: the server's clock
/// as `now`, and the record under `KEYS[1]` as `rec` (absent is `nil`).
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// ARGV: owner (16 bytes), fingerprint (32 bytes), lease (ms), "1" if this store announces
/// changes (a waiter told "in flight" marks the record, so its end is announced) else "0",
/// "1" if every grant carries a fence (MODEL.md `F1`) else "0".
const RESERVE: &str = include_str!("scripts/reserve.lua");

/// ARGV: owner, fingerprint, "1" if a body follows, "0" for none, "2" for "outcome unknown"
/// (the action panicked), the body, retention (ms), the command that publishes a notice on
/// the key's own channel (`PUBLISH`, `SPUBLISH` on a Cluster; '' for none).
const COMPLETE: &str = include_str!("scripts/complete.lua");

/// ARGV: owner, lease (ms).
const RENEW: &str = include_str!("scripts/renew.lua");

/// ARGV: owner, the command that publishes a notice ('' for none), as for the complete.
const RELEASE: &str = include_str!("scripts/release.lua");

/// No ARGV.
const READ: &str = include_str!("scripts/read.lua");

/// An operator's delete of a completed record (not a record-machine command).
const FORGET: &str = include_str!("scripts/forget.lua");

/// ARGV: the owner's unmarked pending record, the completed record, retention - 1 (ms). No
/// prelude.
const COMPLETE_OWN: &str = include_str!("scripts/complete_own.lua");

/// ARGV: the fenced pending record's first 52 bytes, lease - 1 (ms), "1" to answer a found
/// record's `PTTL`. No prelude.
const RESERVE_FENCED: &str = include_str!("scripts/reserve_fenced.lua");

/// The Lua source of the script for `command` (`reserve`, `complete`, `renew`, `release`
/// or `read`, as [`idem_core::record::Command::name`] names them, or `complete_own`, the
/// fast complete), exactly as the store sends it: for auditing, and for tools that drive a
/// server with the scripts directly.
pub fn source(command: &str) -> Option<String> {
    let body = match command {
        "reserve" => RESERVE,
        "complete" => COMPLETE,
        "renew" => RENEW,
        "release" => RELEASE,
        "read" => READ,
        "forget" => FORGET,
        "complete_own" => return Some(COMPLETE_OWN.to_owned()),
        "reserve_fenced" => return Some(RESERVE_FENCED.to_owned()),
        _ => return None,
    };
    // Each part after a line break of its own: the same bytes, and so the same SHA1, as the
    // scripts a running server may already hold in its script cache.
    Some(format!("\n{PRELUDE}\n{body}"))
}

/// One script as the store sends it: its source and its SHA1.
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) source: String,
    pub(crate) sha1: String,
}

impl Script {
    fn named(name: &str) -> Self {
        let source = source(name).unwrap_or_default();
        let sha1 = redis::Script::new(&source).get_hash().to_owned();
        Self { source, sha1 }
    }
}

/// The seven scripts, each with its SHA1 computed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) reserve: Script,
    pub(crate) complete: Script,
    pub(crate) complete_own: Script,
    pub(crate) reserve_fenced: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) read: Script,
    pub(crate) forget: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            reserve: Script::named("reserve"),
            complete: Script::named("complete"),
            complete_own: Script::named("complete_own"),
            reserve_fenced: Script::named("reserve_fenced"),
            renew: Script::named("renew"),
            release: Script::named("release"),
            read: Script::named("read"),
            forget: Script::named("forget"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use idem_core::record::{Command, StoredResult};
    use idem_core::{Fingerprint, OwnerToken};

    use super::source;

    #[test]
    fn every_command_has_its_script_under_its_own_name() {
        let owner = OwnerToken::from_u128(1);
        let fingerprint = Fingerprint::of_bytes(b"x");
        let commands = [
            Command::Reserve {
                owner,
                fingerprint,
                lease: Duration::from_secs(1),
            },
            Command::Complete {
                owner,
                fingerprint,
                result: StoredResult::NotStored,
                retention: Duration::from_secs(1),
            },
            Command::Renew {
                owner,
                lease: Duration::from_secs(1),
            },
            Command::Release { owner },
            Command::Read,
        ];
        let sources: HashSet<String> = commands
            .iter()
            .map(|command| source(command.name()).expect("a script"))
            .collect();
        assert!(sources.iter().all(|lua| lua.contains("redis.call('TIME')")));
        assert_eq!(sources.len(), 5, "five different scripts");
        assert_eq!(source("publish"), None);
        // The fast complete reads no clock and no deadline.
        let own = source("complete_own").expect("the fast complete");
        assert!(!own.contains("TIME") && !own.contains("PEXPIRETIME"));
        // The fenced fast reserve reads the clock for its fence only, no record and no
        // deadline: one `SET` that writes only a free key.
        let fenced = source("reserve_fenced").expect("the fenced fast reserve");
        assert!(fenced.contains("redis.call('TIME')") && !fenced.contains("PEXPIRETIME"));
        assert_eq!(fenced.matches("'SET'").count(), 1);
        assert!(fenced.contains("'NX'"));
    }
}
