//! The record machine's transitions: [`apply`] decides every (state, command) pair (MODEL.md,
//! "The record machine: every (state, command) pair").

use std::time::Duration;

use super::live::reserve_live;
use super::{
    Command, Completion, Record, Refusal, Reply, Reservation, StoredResult, Transition, Write,
};
use crate::time::Timestamp;
use crate::{Fence, Fingerprint, OwnerToken};

/// Whether a store that applied a complete inside the action's own transaction commits that
/// transaction: only when the record machine recorded the result. Anything else (a refusal:
/// the key is another owner's, or nothing live is left) rolls it back, so the action's
/// writes and the record commit together or not at all (MODEL.md, "Effects that commit with
/// the record").
pub fn commits(reply: &Reply) -> bool {
    matches!(reply, Reply::Completed(_))
}

/// One step of the record machine: the reply to `command` on a key whose stored state is
/// `stored`, at the store's `now`, and the write that goes with it.
///
/// ```
/// use std::time::Duration;
/// use idem_core::record::{apply, Command, Reply};
/// use idem_core::{Fingerprint, OwnerToken, Timestamp};
///
/// let fp = Fingerprint::of_bytes(b"charge o-1 100");
/// let mut key = None;
/// let now = Timestamp::from_millis(1_000);
/// let reserve = |owner| Command::Reserve { owner, fingerprint: fp, lease: Duration::from_secs(30) };
///
/// let first = apply(key.as_ref(), reserve(OwnerToken::from_u128(1)), now).apply_to(&mut key);
/// assert!(matches!(first, Reply::Reserved(_)));
/// let second = apply(key.as_ref(), reserve(OwnerToken::from_u128(2)), now).apply_to(&mut key);
/// assert!(matches!(second, Reply::InFlight { .. }));
/// ```
pub fn apply(stored: Option<&Record>, command: Command, now: Timestamp) -> Transition {
    step(stored, command, now, || None)
}

/// [`apply`] on a store that hands out fences (MODEL.md `F1`): the same reply and write,
/// except that a grant of a free key carries the fence `next_fence` returns, which is called
/// for that grant and for nothing else. The store's promise, which the machine cannot keep for
/// it: every fence `next_fence` returns for a key is above every fence it returned for that
/// key before, whatever became of their records (released, expired, forgotten). A repeated
/// reserve by the holder (`I11`) and each renewal carry the holder's fence unchanged.
///
/// ```
/// use std::time::Duration;
/// use idem_core::record::{apply_fenced, Command, Reply};
/// use idem_core::{Fence, Fingerprint, OwnerToken, Timestamp};
///
/// let reserve = Command::Reserve {
///     owner: OwnerToken::from_u128(1),
///     fingerprint: Fingerprint::of_bytes(b"charge o-1 100"),
///     lease: Duration::from_secs(30),
/// };
/// let now = Timestamp::from_millis(1_000);
/// let grant = apply_fenced(None, reserve, now, || Fence::next_after(None, now)).reply;
/// let Reply::Reserved(reservation) = grant else { unreachable!() };
/// assert_eq!(reservation.fence, Fence::new(1_000_000));
/// ```
pub fn apply_fenced(
    stored: Option<&Record>,
    command: Command,
    now: Timestamp,
    next_fence: impl FnOnce() -> Fence,
) -> Transition {
    step(stored, command, now, || Some(next_fence()))
}

fn step(
    stored: Option<&Record>,
    command: Command,
    now: Timestamp,
    next_fence: impl FnOnce() -> Option<Fence>,
) -> Transition {
    // I9: an expired record is an absent one, for every command.
    let live = stored.filter(|record| !record.is_expired(now));
    let mut transition = match command {
        Command::Reserve {
            owner,
            fingerprint,
            lease,
        } => reserve(live, owner, fingerprint, lease, now, next_fence),
        Command::Complete {
            owner,
            fingerprint,
            result,
            retention,
        } => complete(live, owner, fingerprint, result, retention, now),
        Command::Renew { owner, lease } => renew(live, owner, lease, now),
        Command::Release { owner } => release(live, owner),
        Command::Read => Transition::unchanged(Reply::Read(live.cloned())),
    };
    if stored.is_some() && live.is_none() && transition.write == Write::Unchanged {
        // Forget the expired record, so a store that applies writes stays bounded.
        transition.write = Write::Delete;
    }
    transition
}

fn reserve(
    live: Option<&Record>,
    owner: OwnerToken,
    fingerprint: Fingerprint,
    lease: Duration,
    now: Timestamp,
    next_fence: impl FnOnce() -> Option<Fence>,
) -> Transition {
    let Some(record) = live else {
        // I1: the key is free, so this caller becomes its one live holder; F1: under a
        // fence above every earlier holder's.
        let lease_until = now.saturating_add(lease);
        let fence = next_fence();
        return Transition {
            reply: Reply::Reserved(Reservation {
                owner,
                lease_until: Some(lease_until),
                fence,
            }),
            write: Write::Put(Record::Pending {
                owner,
                fingerprint,
                lease_until,
                fence,
            }),
        };
    };
    // The machine's answer for a live record reads no clock; the record's deadline and `now`
    // then give its times.
    let reply = reserve_live(record.live(), owner, fingerprint).reply_at(record.expires_at(), now);
    Transition::unchanged(reply)
}

fn complete(
    live: Option<&Record>,
    owner: OwnerToken,
    fingerprint: Fingerprint,
    result: StoredResult,
    retention: Duration,
    now: Timestamp,
) -> Transition {
    let expires_at = now.saturating_add(retention);
    match live {
        // The lease ran out and nobody took the key: the effect happened, so record it
        // (MODEL.md, "Late complete").
        None => Transition {
            reply: Reply::Completed(Completion::AfterLeaseExpiry),
            write: Write::Put(Record::Completed {
                owner,
                fingerprint,
                result,
                expires_at,
            }),
        },
        // I2: only the owner's reservation becomes its result.
        Some(record) if record.owner() != owner => {
            Transition::unchanged(Reply::Refused(Refusal::NotOwner))
        }
        Some(Record::Pending {
            fingerprint: held, ..
        }) => Transition {
            reply: Reply::Completed(Completion::InTime),
            write: Write::Put(Record::Completed {
                owner,
                fingerprint: *held,
                result,
                expires_at,
            }),
        },
        // I3: a completed record is never changed before it expires.
        Some(Record::Completed { .. }) => {
            Transition::unchanged(Reply::Completed(Completion::Repeated))
        }
    }
}

fn renew(live: Option<&Record>, owner: OwnerToken, lease: Duration, now: Timestamp) -> Transition {
    match live {
        None => Transition::unchanged(Reply::Refused(Refusal::LeaseLost)),
        Some(record) if record.owner() != owner => {
            Transition::unchanged(Reply::Refused(Refusal::NotOwner))
        }
        Some(Record::Pending {
            fingerprint,
            lease_until,
            fence,
            ..
        }) => {
            // I10: a lease only ever grows; F1: under the same fence.
            let lease_until = (*lease_until).max(now.saturating_add(lease));
            Transition {
                reply: Reply::Renewed(Reservation {
                    owner,
                    lease_until: Some(lease_until),
                    fence: *fence,
                }),
                write: Write::Put(Record::Pending {
                    owner,
                    fingerprint: *fingerprint,
                    lease_until,
                    fence: *fence,
                }),
            }
        }
        Some(Record::Completed { .. }) => {
            Transition::unchanged(Reply::Refused(Refusal::AlreadyCompleted))
        }
    }
}

fn release(live: Option<&Record>, owner: OwnerToken) -> Transition {
    match live {
        None => Transition::unchanged(Reply::Refused(Refusal::LeaseLost)),
        Some(record) if record.owner() != owner => {
            Transition::unchanged(Reply::Refused(Refusal::NotOwner))
        }
        Some(Record::Pending { .. }) => Transition {
            reply: Reply::Released,
            write: Write::Delete,
        },
        Some(Record::Completed { .. }) => {
            Transition::unchanged(Reply::Refused(Refusal::AlreadyCompleted))
        }
    }
}
