//! The judge: every reply a store gives is held to the record machine of `idem-core`, stepped
//! at the instant the store decided, and every grant's fence to `F1`.
//!
//! A store that decides at an instant it reports exactly ([`Timing::At`]) is judged exactly.
//! One placed in a window ([`Timing::Within`]) is accepted if the machine gives the same reply
//! at some instant in the window; the judge then keeps every state the machine could have left
//! (one per agreeing instant, distinct ones only), so a later reply is accepted if it agrees
//! with any of them. A divergence is reported only when no candidate agrees: the judge never
//! blames a store for the width of its window.

use std::collections::HashMap;

use idem_core::record::{
    Command, Record, Reply, Reservation, StoredResult, Write, apply, apply_fenced,
};
use idem_core::{Fence, Fingerprint, Key, Operation, OwnerToken, Timestamp};

use crate::timing::Timing;

/// The widest window the judge steps through, in milliseconds: a command that took longer
/// than this is not judged by instant but reported (a store that slow is not one a caller
/// can hold a lease on either).
pub const MAX_WINDOW_MS: u64 = 5_000;

/// A record the judge follows: its name and what the machine says it may hold.
#[derive(Debug, Default)]
struct Slot {
    /// Every state the record may be in, given the replies so far.
    candidates: Vec<Option<Record>>,
    /// The highest fence granted for the record so far (`F1`).
    last_fence: Option<Fence>,
}

/// One line of a history: a command, when it was decided, and what the store answered.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The record: `operation/key`.
    pub record: String,
    /// The command, its large bodies abbreviated.
    pub command: String,
    /// When the store decided.
    pub timing: Option<Timing>,
    /// The reply, abbreviated, or the error.
    pub reply: String,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.record, self.command)?;
        if let Some(timing) = self.timing {
            write!(f, " {timing}")?;
        }
        write!(f, " -> {}", self.reply)
    }
}

/// Follows records through the replies of a store and says at the first reply the record
/// machine could not have given.
#[derive(Debug, Default)]
pub struct Judge {
    slots: HashMap<(Operation, Key), Slot>,
    history: Vec<Entry>,
}

impl Judge {
    /// A judge that has seen nothing: every record starts absent.
    pub fn new() -> Self {
        Self::default()
    }

    /// Everything observed so far, in order.
    pub fn history(&self) -> &[Entry] {
        &self.history
    }

    /// Notes a command the store answered with an error: it is part of the history, and the
    /// record may or may not have changed, which the judge cannot follow, so the check that
    /// sent it treats the error as its verdict.
    pub fn note_error(&mut self, operation: &Operation, key: &Key, command: &Command, error: &str) {
        self.history.push(Entry {
            record: format!("{operation}/{key}"),
            command: describe_command(command),
            timing: None,
            reply: format!("error: {error}"),
        });
    }

    /// Holds `reply`, decided at `timing`, to the record machine; `Err` says how it diverged.
    pub fn observe(
        &mut self,
        operation: &Operation,
        key: &Key,
        command: &Command,
        reply: &Reply,
        timing: Timing,
    ) -> Result<(), String> {
        self.history.push(Entry {
            record: format!("{operation}/{key}"),
            command: describe_command(command),
            timing: Some(timing),
            reply: describe_reply(reply),
        });
        let slot = self
            .slots
            .entry((operation.clone(), key.clone()))
            .or_insert_with(|| Slot {
                candidates: vec![None],
                last_fence: None,
            });
        let (from, to) = timing.bounds();
        if to - from > MAX_WINDOW_MS {
            return Err(format!(
                "the command took {} ms on the store's clock, more than the {MAX_WINDOW_MS} ms \
                 the judge steps through",
                to - from
            ));
        }
        // A store that hands out fences grants under the one it says; the model grants under
        // the same (and one without, under none).
        let granted = match reply {
            Reply::Reserved(grant) => grant.fence,
            _ => None,
        };
        let mut next: Vec<Option<Record>> = Vec::new();
        let mut fresh_everywhere = true;
        for candidate in &slot.candidates {
            for now in from..=to {
                let now = Timestamp::from_millis(now);
                let transition = match granted {
                    Some(fence) => apply_fenced(candidate.as_ref(), command.clone(), now, || fence),
                    None => apply(candidate.as_ref(), command.clone(), now),
                };
                if !agrees(reply, &transition.reply) {
                    continue;
                }
                fresh_everywhere &= is_fresh_grant(candidate.as_ref(), &transition.write, now);
                let mut state = candidate.clone();
                let _ = transition.apply_to(&mut state);
                if !next.contains(&state) {
                    next.push(state);
                }
            }
        }
        if next.is_empty() {
            let expected = slot
                .candidates
                .iter()
                .map(|candidate| {
                    describe_reply(
                        &apply(
                            candidate.as_ref(),
                            command.clone(),
                            Timestamp::from_millis(from),
                        )
                        .reply,
                    )
                })
                .collect::<Vec<_>>()
                .join(" or ");
            return Err(format!(
                "{} on {operation}/{key} {timing}: the store answered {}, the record machine \
                 {expected}",
                describe_command(command),
                describe_reply(reply),
            ));
        }
        if let Some(fence) = granted {
            if let Some(last) = slot.last_fence
                && (fence < last || (fresh_everywhere && fence == last))
            {
                return Err(format!(
                    "F1: {} on {operation}/{key} granted {fence:?}, not above the earlier {last:?}",
                    describe_command(command)
                ));
            }
            slot.last_fence = slot.last_fence.max(Some(fence));
        }
        slot.candidates = next;
        Ok(())
    }

    /// The history as numbered lines, for a report.
    pub fn transcript(&self) -> Vec<String> {
        self.history
            .iter()
            .enumerate()
            .map(|(i, entry)| format!("#{i} {entry}"))
            .collect()
    }

    /// The history of one record as numbered lines (numbered in the whole history).
    pub fn transcript_of(&self, operation: &Operation, key: &Key) -> Vec<String> {
        let record = format!("{operation}/{key}");
        self.history
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.record == record)
            .map(|(i, entry)| format!("#{i} {entry}"))
            .collect()
    }
}

/// Whether `write`, made at `now` on `before`, is a new grant of the key rather than the
/// holder's own retry (`I11`), which keeps the holder's fence.
fn is_fresh_grant(before: Option<&Record>, write: &Write, now: Timestamp) -> bool {
    let Write::Put(Record::Pending { owner, .. }) = write else {
        return false;
    };
    !matches!(before, Some(record @ Record::Pending { .. })
        if record.owner() == *owner && !record.is_expired(now))
}

/// `got` is the machine's `expected`, except where a store may leave a time unsaid: a grant
/// or an "in flight" answered without the clock, and a replay's remaining time.
fn agrees(got: &Reply, expected: &Reply) -> bool {
    match (got, expected) {
        (Reply::Reserved(g), Reply::Reserved(e)) if g.lease_until.is_none() => {
            g.owner == e.owner && g.fence == e.fence
        }
        (Reply::InFlight { lease_until: None }, Reply::InFlight { .. }) => true,
        (
            Reply::Replay {
                result: g,
                remaining: None,
            },
            Reply::Replay { result: e, .. },
        ) => g == e,
        _ => got == expected,
    }
}

/// A body shown in a history: short ones in full, long ones by length and a digest of their
/// ends, so a 1 MiB result does not fill a report.
fn describe_body(result: &StoredResult) -> String {
    match result {
        StoredResult::Value(body) if body.len() > 24 => {
            let bytes = body.as_bytes();
            format!(
                "Value(<{} bytes {:02x?}..{:02x?}>)",
                bytes.len(),
                &bytes[..4],
                &bytes[bytes.len() - 4..]
            )
        }
        other => format!("{other:?}"),
    }
}

/// An owner in a history line: its number when it is small (the kit's own owners are 1, 2,
/// 3, …), else its first hex digits.
fn describe_owner(owner: OwnerToken) -> String {
    let bits = owner.as_u128();
    if bits < 1 << 20 {
        format!("owner {bits}")
    } else {
        format!("owner {:08x}…", bits >> 96)
    }
}

/// A fingerprint in a history line: its first hex digits, enough to tell two apart.
fn describe_fingerprint(fingerprint: Fingerprint) -> String {
    let hex = fingerprint.to_string();
    format!("fp {}", &hex[..hex.len().min(8)])
}

/// A command in a history line.
pub fn describe_command(command: &Command) -> String {
    match command {
        Command::Reserve {
            owner,
            fingerprint,
            lease,
        } => format!(
            "Reserve({}, {}, lease {lease:?})",
            describe_owner(*owner),
            describe_fingerprint(*fingerprint)
        ),
        Command::Complete {
            owner,
            fingerprint,
            result,
            retention,
        } => format!(
            "Complete({}, {}, {}, retention {retention:?})",
            describe_owner(*owner),
            describe_fingerprint(*fingerprint),
            describe_body(result)
        ),
        Command::Renew { owner, lease } => {
            format!("Renew({}, lease {lease:?})", describe_owner(*owner))
        }
        Command::Release { owner } => format!("Release({})", describe_owner(*owner)),
        Command::Read => "Read".to_owned(),
    }
}

fn describe_reservation(reservation: &Reservation) -> String {
    let until = reservation
        .lease_until
        .map_or_else(|| "unsaid".to_owned(), |until| format!("{until:?}"));
    let fence = reservation
        .fence
        .map_or_else(String::new, |fence| format!(", fence {}", fence.get()));
    format!(
        "{}, until {until}{fence}",
        describe_owner(reservation.owner)
    )
}

/// A record in a history line.
pub fn describe_record(record: &Record) -> String {
    match record {
        Record::Pending {
            owner,
            fingerprint,
            lease_until,
            fence,
        } => format!(
            "Pending({}, {}, until {lease_until:?}{})",
            describe_owner(*owner),
            describe_fingerprint(*fingerprint),
            fence.map_or_else(String::new, |fence| format!(", fence {}", fence.get()))
        ),
        Record::Completed {
            owner,
            fingerprint,
            result,
            expires_at,
        } => format!(
            "Completed({}, {}, {}, until {expires_at:?})",
            describe_owner(*owner),
            describe_fingerprint(*fingerprint),
            describe_body(result)
        ),
    }
}

/// A reply in a history line.
pub fn describe_reply(reply: &Reply) -> String {
    match reply {
        Reply::Reserved(reservation) => format!("Reserved({})", describe_reservation(reservation)),
        Reply::Renewed(reservation) => format!("Renewed({})", describe_reservation(reservation)),
        Reply::InFlight { lease_until } => match lease_until {
            Some(until) => format!("InFlight(until {until:?})"),
            None => "InFlight".to_owned(),
        },
        Reply::Replay { result, remaining } => match remaining {
            Some(left) => format!("Replay({}, {left:?} left)", describe_body(result)),
            None => format!("Replay({})", describe_body(result)),
        },
        Reply::KeyReuse { stored } => format!("KeyReuse(stored {})", describe_fingerprint(*stored)),
        Reply::Read(Some(record)) => format!("Read({})", describe_record(record)),
        Reply::Read(None) => "Read(absent)".to_owned(),
        other => format!("{other:?}"),
    }
}
