//! A reserve of a **live** record: the one answer the record machine gives without reading a
//! clock (MODEL.md, "The record machine", reserve rows on a live record).
//!
//! A store that knows a key is live without knowing when it ends (the Redis fast reserve:
//! `SET … NX … GET` returns the value of a key that exists, and a key exists exactly while
//! its record is live) asks [`reserve_live`] with the record's [`LiveRecord`], which has no
//! deadline to make up. The record machine asks the same function and then fills in the
//! times with [`LiveReserve::reply_at`], so the two answers cannot drift apart.

use std::time::Duration;

use super::{Record, Reply, Reservation, StoredResult};
use crate::time::Timestamp;
use crate::{Fence, Fingerprint, OwnerToken};

/// A live record as a reserve sees it: who holds or completed it, for which request, and
/// the result of a completed one. No deadline: a reserve of a live record does not need it to
/// decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveRecord<'a> {
    /// Held by `owner` for `fingerprint`.
    Pending {
        /// The holder.
        owner: OwnerToken,
        /// The request it holds the key for.
        fingerprint: Fingerprint,
        /// The holder's fence, if the store keeps one (`F1`).
        fence: Option<Fence>,
    },
    /// Completed for `fingerprint` with `result`.
    Completed {
        /// The request it answers.
        fingerprint: Fingerprint,
        /// What identical requests are answered with.
        result: &'a StoredResult,
    },
}

impl LiveRecord<'_> {
    /// The fingerprint the key is held or completed under.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            LiveRecord::Pending { fingerprint, .. } | LiveRecord::Completed { fingerprint, .. } => {
                *fingerprint
            }
        }
    }
}

impl Record {
    /// The record as a reserve of it sees it while it is live (its deadline left out).
    pub fn live(&self) -> LiveRecord<'_> {
        match self {
            Record::Pending {
                owner,
                fingerprint,
                fence,
                ..
            } => LiveRecord::Pending {
                owner: *owner,
                fingerprint: *fingerprint,
                fence: *fence,
            },
            Record::Completed {
                fingerprint,
                result,
                ..
            } => LiveRecord::Completed {
                fingerprint: *fingerprint,
                result,
            },
        }
    }
}

/// The record machine's answer to a reserve of a live record, decided without a clock; its
/// times (a lease end, how long a result has left) are filled in by [`reply_at`] when the
/// record's deadline and the store's clock are known.
///
/// [`reply_at`]: LiveReserve::reply_at
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveReserve {
    /// `I11`: the owner's own reservation, back unchanged.
    Reserved {
        /// The owner, who already holds the key.
        owner: OwnerToken,
        /// Its fence, unchanged (`F1`).
        fence: Option<Fence>,
    },
    /// Another attempt holds the key for the same request.
    InFlight,
    /// The same request completed: its stored result.
    Replay(StoredResult),
    /// `I4`: the key belongs to a request with another fingerprint.
    KeyReuse {
        /// The fingerprint the key is held or completed under.
        stored: Fingerprint,
    },
}

impl LiveReserve {
    /// The machine's full reply, for a record live until `deadline` (its lease end or
    /// retention end) asked at the store's `now`.
    pub fn reply_at(self, deadline: Timestamp, now: Timestamp) -> Reply {
        match self {
            LiveReserve::Reserved { owner, fence } => Reply::Reserved(Reservation {
                owner,
                lease_until: Some(deadline),
                fence,
            }),
            LiveReserve::InFlight => Reply::InFlight {
                lease_until: Some(deadline),
            },
            LiveReserve::Replay(result) => Reply::Replay {
                result,
                remaining: Some(deadline.saturating_duration_since(now)),
            },
            LiveReserve::KeyReuse { stored } => Reply::KeyReuse { stored },
        }
    }

    /// The reply where the record's deadline is not known: a grant or "in flight" without the
    /// lease end, a replay that does not say how long it has left, key reuse as it is.
    pub fn reply_without_clock(self) -> Reply {
        match self {
            LiveReserve::Reserved { owner, fence } => Reply::Reserved(Reservation {
                owner,
                lease_until: None,
                fence,
            }),
            LiveReserve::InFlight => Reply::InFlight { lease_until: None },
            LiveReserve::Replay(result) => Reply::Replay {
                result,
                remaining: None::<Duration>,
            },
            LiveReserve::KeyReuse { stored } => Reply::KeyReuse { stored },
        }
    }
}

/// The answer to `owner`'s reserve of `fingerprint` on a **live** record, which changes
/// nothing and reads no clock: key reuse for another fingerprint (`I4`), the owner's own
/// reservation back (`I11`), "in flight" for another owner's, or the completed result.
pub fn reserve_live(
    record: LiveRecord<'_>,
    owner: OwnerToken,
    fingerprint: Fingerprint,
) -> LiveReserve {
    if record.fingerprint() != fingerprint {
        // I4: another request's record; never replayed, never waited for.
        return LiveReserve::KeyReuse {
            stored: record.fingerprint(),
        };
    }
    match record {
        LiveRecord::Pending {
            owner: holder,
            fence,
            ..
        } if holder == owner => LiveReserve::Reserved { owner, fence },
        LiveRecord::Pending { .. } => LiveReserve::InFlight,
        LiveRecord::Completed { result, .. } => LiveReserve::Replay(result.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Command, apply};

    /// Every record kind, owner and fingerprint: the machine's reply to a reserve of a live
    /// record is `reserve_live`'s, with the times filled in at the machine's `now`.
    #[test]
    fn the_machine_answers_a_live_record_as_reserve_live_does() {
        let now = Timestamp::from_millis(1_000);
        let deadline = Timestamp::from_millis(4_000);
        let fp = |n: u8| Fingerprint::from_bytes([n; 32]);
        let holder = OwnerToken::from_u128(1);
        let records = [
            Record::Pending {
                owner: holder,
                fingerprint: fp(1),
                lease_until: deadline,
                fence: Fence::new(9),
            },
            Record::Completed {
                owner: holder,
                fingerprint: fp(1),
                result: StoredResult::Value(crate::record::Body::new(b"ok")),
                expires_at: deadline,
            },
            Record::Completed {
                owner: holder,
                fingerprint: fp(1),
                result: StoredResult::Panicked,
                expires_at: deadline,
            },
        ];
        let mut kinds = std::collections::HashSet::new();
        for record in &records {
            for caller in [holder, OwnerToken::from_u128(2)] {
                for print in [fp(1), fp(2)] {
                    let command = Command::Reserve {
                        owner: caller,
                        fingerprint: print,
                        lease: Duration::from_secs(30),
                    };
                    let machine = apply(Some(record), command, now).reply;
                    let live = reserve_live(record.live(), caller, print);
                    kinds.insert(std::mem::discriminant(&live));
                    assert_eq!(live.clone().reply_at(deadline, now), machine);
                    // Without a clock: the same answer, its times unsaid.
                    let unclocked = live.reply_without_clock();
                    let dated = match (&unclocked, &machine) {
                        (Reply::Reserved(u), Reply::Reserved(r)) if u.lease_until.is_none() => {
                            Reply::Reserved(Reservation {
                                lease_until: r.lease_until,
                                ..*u
                            })
                        }
                        (Reply::InFlight { lease_until: None }, Reply::InFlight { .. }) => {
                            machine.clone()
                        }
                        (
                            Reply::Replay {
                                result,
                                remaining: None,
                            },
                            Reply::Replay { remaining, .. },
                        ) => Reply::Replay {
                            result: result.clone(),
                            remaining: *remaining,
                        },
                        _ => unclocked.clone(),
                    };
                    assert_eq!(dated, machine);
                    assert_eq!(
                        std::mem::discriminant(&unclocked),
                        std::mem::discriminant(&machine)
                    );
                }
            }
        }
        assert_eq!(kinds.len(), 4, "every answer is reached");
    }
}
