//! The record machine in Lua: one script per command, each one atomic step on one key.
//!
//! Each script is a second implementation of `idem_core::record::apply` (the tests compare
//! the two step for step). Every script:
//!
//! - reads the server's clock with `TIME` (`I9` and rule 10: leases and retention are judged
//!   by the server, never by a client);
//! - touches exactly one key, `KEYS[1]`, so it runs unchanged on a Cluster;
//! - decodes the record ([`crate::codec`], version 1) and, if the value is not one this
//!   adapter wrote (another Redis type, another layout, an unknown version), changes
//!   nothing and answers `{'!', now, detail}`;
//! - treats a record whose deadline is at or before `now` as absent, exactly like the core;
//! - writes with `SET … PXAT deadline-1`, so Redis drops a record by itself exactly when the
//!   record machine would treat it as gone (Redis keeps a key while its clock is at or
//!   before the expiry; see [`crate::codec`]);
//! - reads the lease end of a claim (state 5, written by the single-command reserve) from
//!   the key's expiry: `PEXPIRETIME + 1`;
//! - checks the owner token itself for complete, renew and release (`I2`);
//! - when given a change channel (standalone servers), publishes the record's Redis key on it
//!   after a complete or a release of a pending record that a waiter was told about (the
//!   reserve that answers "in flight" marks the record, state 4), which wakes waiters
//!   ([`crate::watch`]); an uncontended call publishes nothing.
//!
//! Replies are arrays `{tag, now, …}`, with `now` the server's clock in milliseconds.
//!
//! | script   | tags |
//! |----------|------|
//! | reserve  | `R` lease_until (reserved) · `F` lease_until (in flight) · `P` body or nothing (replay) · `U` (replay: the action panicked, outcome unknown) · `K` fingerprint (key reuse) |
//! | complete | `C` 1 in time, 2 after lease expiry, 3 repeated · `X` refusal |
//! | renew    | `N` lease_until · `X` refusal |
//! | release  | `D` · `X` refusal |
//! | read     | `E` (absent) · `V` raw record |
//!
//! Refusal codes: 1 not the owner, 2 lease lost, 3 already completed. A value this adapter did
//! not write: `!` detail.

use redis::Script;

/// Shared helpers, prepended to every script.
const PRELUDE: &str = r#"
local HEADER = 60
local MAX_MS = 9007199254740991
local TWO_32 = 4294967296

-- Eight big-endian bytes of n (below 2^53): two 32-bit halves, packed in C.
local function u64be(n)
  local low = n % TWO_32
  return struct.pack('>I4I4', (n - low) / TWO_32, low)
end

local function later(now, ms)
  return math.min(now + tonumber(ms), MAX_MS)
end

-- The record under KEYS[1]: nil if absent, false and a reason if it is not ours.
local function load(key)
  -- One GET: absent is false, another type an error (named, on that rare path, by TYPE).
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    return false, 'a Redis ' .. redis.call('TYPE', key)['ok'] .. ', not a string'
  end
  if not raw then return nil end
  if #raw < HEADER then return false, #raw .. ' bytes, shorter than the record header' end
  if string.sub(raw, 1, 2) ~= 'id' then return false, 'no record magic' end
  local version = string.byte(raw, 3)
  if version ~= 1 then return false, 'unknown record version ' .. version end
  local state = string.byte(raw, 4)
  if state < 1 or state > 6 then
    return false, 'unknown record state ' .. state
  end
  -- State 4 is a pending record that a waiter was told about: its complete or release is
  -- announced. State 5 is a claim: pending, its lease end the key's expiry. Both are
  -- pending (state 1) below. States 2, 3 and 6 are completed (6: the action panicked,
  -- replayed as 'U'); every script but reserve treats them alike (state ~= 1), and only
  -- state 3 carries a body.
  local watched = state == 4
  local claim = state == 5
  if watched or claim then state = 1 end
  if state ~= 3 and #raw ~= HEADER then
    return false, 'a record without a body is ' .. #raw .. ' bytes'
  end
  local high, low = struct.unpack('>I4I4', raw, 53)
  local deadline = high * TWO_32 + low
  if claim then
    if deadline ~= 0 then return false, 'a claim with a deadline' end
    local expiry = redis.call('PEXPIRETIME', key)
    if expiry < 0 then return false, 'a claim without an expiry' end
    deadline = expiry + 1
  end
  if deadline > MAX_MS then return false, 'deadline out of range' end
  local rec = {
    state = state,
    owner = string.sub(raw, 5, 20),
    fp = string.sub(raw, 21, 52),
    deadline = deadline,
    watched = watched,
    claim = claim,
    raw = raw,
  }
  if state == 3 then rec.body = string.sub(raw, HEADER + 1) end
  return rec
end

local function put(key, state, owner, fp, deadline, body)
  local value = 'id' .. string.char(1, state) .. owner .. fp .. u64be(deadline) .. (body or '')
  -- Formatted as an integer here: Redis would print a Lua number with '%.17g'.
  redis.call('SET', key, value, 'PXAT', string.format('%d', deadline - 1))
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local rec, why = load(KEYS[1])
if rec == false then return {'!', now, why} end
if rec and now >= rec.deadline then rec = nil end
"#;

/// ARGV: owner (16 bytes), fingerprint (32 bytes), lease (ms), "1" if this store announces
/// changes (a waiter told "in flight" marks the record, so its end is announced) else "0".
const RESERVE: &str = r#"
if not rec then
  local lease_until = later(now, ARGV[3])
  put(KEYS[1], 1, ARGV[1], ARGV[2], lease_until)
  return {'R', now, lease_until}
end
if rec.fp ~= ARGV[2] then return {'K', now, rec.fp} end
if rec.state == 1 then
  if rec.owner == ARGV[1] then return {'R', now, rec.deadline} end
  if ARGV[4] == '1' and not rec.watched then
    put(KEYS[1], 4, rec.owner, rec.fp, rec.deadline)
  end
  return {'F', now, rec.deadline}
end
if rec.state == 3 then return {'P', now, rec.body} end
if rec.state == 6 then return {'U', now} end
return {'P', now}
"#;

/// ARGV: owner, fingerprint, "1" if a body follows, "0" for none, "2" for "outcome unknown"
/// (the action panicked), the body, retention (ms), the change channel ('' for none).
const COMPLETE: &str = r#"
-- Announced only when a waiter marked the pending record: an uncontended call publishes
-- nothing.
local function changed()
  if ARGV[6] ~= '' and rec and rec.watched then redis.call('PUBLISH', ARGV[6], KEYS[1]) end
end
local state = 2
local body = nil
if ARGV[3] == '1' then
  state = 3
  body = ARGV[4]
elseif ARGV[3] == '2' then
  state = 6
end
local expires_at = later(now, ARGV[5])
if not rec then
  put(KEYS[1], state, ARGV[1], ARGV[2], expires_at, body)
  changed()
  return {'C', now, 2}
end
if rec.owner ~= ARGV[1] then return {'X', now, 1} end
if rec.state == 1 then
  put(KEYS[1], state, ARGV[1], rec.fp, expires_at, body)
  changed()
  return {'C', now, 1}
end
return {'C', now, 3}
"#;

/// ARGV: owner, lease (ms).
const RENEW: &str = r#"
if not rec then return {'X', now, 2} end
if rec.owner ~= ARGV[1] then return {'X', now, 1} end
if rec.state ~= 1 then return {'X', now, 3} end
local lease_until = math.max(rec.deadline, later(now, ARGV[2]))
put(KEYS[1], rec.watched and 4 or 1, ARGV[1], rec.fp, lease_until)
return {'N', now, lease_until}
"#;

/// ARGV: owner, the change channel ('' for none).
const RELEASE: &str = r#"
if not rec then return {'X', now, 2} end
if rec.owner ~= ARGV[1] then return {'X', now, 1} end
if rec.state ~= 1 then return {'X', now, 3} end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' and rec.watched then redis.call('PUBLISH', ARGV[2], KEYS[1]) end
return {'D', now}
"#;

/// No ARGV. A claim is returned as the pending record it is, its lease end filled in.
const READ: &str = r#"
if not rec then return {'E', now} end
if rec.claim then
  return {'V', now, 'id' .. string.char(1, 1) .. rec.owner .. rec.fp .. u64be(rec.deadline)}
end
return {'V', now, rec.raw}
"#;

/// The Lua source of the script for `command` (`reserve`, `complete`, `renew`, `release`
/// or `read`, as [`idem_core::record::Command::name`] names them), exactly as the store
/// loads it: for auditing, and for tools that drive a server with the scripts directly.
pub fn source(command: &str) -> Option<String> {
    let body = match command {
        "reserve" => RESERVE,
        "complete" => COMPLETE,
        "renew" => RENEW,
        "release" => RELEASE,
        "read" => READ,
        _ => return None,
    };
    Some(format!("{PRELUDE}{body}"))
}

/// The five scripts, each with its SHA1 computed once. `redis::Script` runs `EVALSHA` and,
/// when the server's script cache does not hold it (a restart, `SCRIPT FLUSH`, a new
/// Cluster node), loads it and runs `EVALSHA` again.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) reserve: Script,
    pub(crate) complete: Script,
    pub(crate) renew: Script,
    pub(crate) release: Script,
    pub(crate) read: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let build = |name: &str| Script::new(&source(name).unwrap_or_default());
        Self {
            reserve: build("reserve"),
            complete: build("complete"),
            renew: build("renew"),
            release: build("release"),
            read: build("read"),
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
    }
}
