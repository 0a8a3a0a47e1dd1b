//! The broken stores kept in memory: each a rewrite of `idem_core::record::apply` that
//! changes one decision and otherwise defers to it ([`Variant::apply`]), for the stores the
//! simulation and the model checkers keep; and how a store files a key (`I12`) or reads a
//! value that is not a record (rule 11), and whether a transactional store commits.

use idem_core::record::{self, Transition, Write};
use idem_core::{
    Body, Command, Completion, Fence, Fingerprint, OwnerToken, Record, Reply, Reservation,
    StoredResult, Timestamp,
};

use super::{TRUNCATED_KEY_LEN, Variant};

/// How long [`Variant::CachedFailure`] keeps a failure (a release carries no retention).
const CACHED_FAILURE_RETENTION: std::time::Duration = std::time::Duration::from_secs(60);

impl Variant {
    /// One step of this variant's store on a key that holds a value that is not a record:
    /// `None` when the store answers "corrupt" and changes nothing (the correct store, and
    /// every variant but [`Variant::CorruptReadAsAbsent`]), or the transition of a store
    /// that reads the value as an absent key.
    pub fn apply_to_garbage(self, command: Command, now: Timestamp) -> Option<Transition> {
        (self == Variant::CorruptReadAsAbsent).then(|| record::apply(None, command, now))
    }

    /// Whether this variant's store commits a transactional action's writes with a complete
    /// it answered `reply`: `record::commits` (only a recorded result commits), except
    /// [`Variant::CommitWithoutOwnerCheck`], which commits whatever it answered.
    pub fn commits(self, reply: &Reply) -> bool {
        self == Variant::CommitWithoutOwnerCheck || record::commits(reply)
    }

    /// Whether the store judges expiry by the sending caller's clock (the skewed-clock bug).
    pub fn judges_by_caller_clock(self) -> bool {
        self == Variant::CallerClockExpiry
    }

    /// What the store files the record of `(operation, key)` under: the two byte for byte,
    /// except in [`Variant::TruncatedKeys`] and [`Variant::IgnoresOperation`] (`I12`).
    pub fn files_as<'a>(self, operation: &'a str, key: &'a str) -> (&'a str, &'a str) {
        match self {
            Variant::TruncatedKeys => (operation, key.get(..TRUNCATED_KEY_LEN).unwrap_or(key)),
            Variant::IgnoresOperation => ("", key),
            _ => (operation, key),
        }
    }

    /// Whether the service answers an executed request with the stored result rather than
    /// its own (the result cache returns the winner of the write race).
    pub fn answers_from_store(self) -> bool {
        self == Variant::ResultCache
    }

    /// One step of this variant's store on a store that hands out fences: for
    /// [`Variant::Correct`] exactly `record::apply_fenced(stored, command, now, next_fence)`.
    /// Every variant's fresh grant (a reservation it writes for the owner it grants) gets
    /// the fence `next_fence` returns, except [`Variant::FenceReusedAfterTakeover`]'s
    /// takeover of a stored record that carries one, which gets that fence again.
    pub fn apply_fenced(
        self,
        stored: Option<&Record>,
        command: Command,
        now: Timestamp,
        next_fence: impl FnOnce() -> Fence,
    ) -> Transition {
        let mut transition = self.apply(stored, command, now);
        // `apply` writes a fresh grant's reservation without a fence; a renewal and the
        // holder's repeated reserve carry the stored one through.
        if let (
            Reply::Reserved(grant),
            Write::Put(Record::Pending {
                owner,
                fence: fence @ None,
                ..
            }),
        ) = (&mut transition.reply, &mut transition.write)
            && *owner == grant.owner
        {
            let granted = match (self, stored) {
                (
                    Variant::FenceReusedAfterTakeover,
                    Some(Record::Pending {
                        fence: Some(held), ..
                    }),
                ) => *held,
                _ => next_fence(),
            };
            *fence = Some(granted);
            grant.fence = Some(granted);
        }
        transition
    }

    /// One step of this variant's store: for [`Variant::Correct`] exactly
    /// `record::apply(stored, command, now)`.
    pub fn apply(self, stored: Option<&Record>, command: Command, now: Timestamp) -> Transition {
        let live = stored.filter(|record| !record.is_expired(now));
        match (self, command) {
            (Variant::ResultCache, command) => result_cache(live, command, now)
                .unwrap_or_else(|command| record::apply(stored, command, now)),
            (
                Variant::CompleteWithoutOwnerCheck,
                Command::Complete {
                    owner,
                    fingerprint,
                    result,
                    retention,
                },
            ) if live.is_some_and(|record| record.owner() != owner) => {
                record_result(owner, fingerprint, result, retention, now)
            }
            (Variant::ReleaseWithoutOwnerCheck, Command::Release { owner })
                if live.is_some_and(|record| record.owner() != owner) =>
            {
                Transition {
                    reply: Reply::Released,
                    write: Write::Delete,
                }
            }
            (Variant::RenewWithoutOwnerCheck, Command::Renew { owner, lease })
                if live.is_some_and(|record| record.owner() != owner) =>
            {
                let lease_until = now.saturating_add(lease);
                let extended = match live {
                    Some(Record::Pending {
                        owner: holder,
                        fingerprint,
                        ..
                    }) => Record::Pending {
                        owner: *holder,
                        fingerprint: *fingerprint,
                        lease_until,
                        fence: None,
                    },
                    Some(Record::Completed {
                        owner: holder,
                        fingerprint,
                        result,
                        ..
                    }) => Record::Completed {
                        owner: *holder,
                        fingerprint: *fingerprint,
                        result: result.clone(),
                        expires_at: lease_until,
                    },
                    None => return record::apply(stored, Command::Renew { owner, lease }, now),
                };
                Transition {
                    reply: Reply::Renewed(Reservation {
                        owner,
                        lease_until: Some(lease_until),
                        fence: None,
                    }),
                    write: Write::Put(extended),
                }
            }
            (Variant::CachedFailure, Command::Release { owner }) => match live {
                Some(Record::Pending {
                    owner: holder,
                    fingerprint,
                    ..
                }) if *holder == owner => Transition {
                    reply: Reply::Released,
                    write: Write::Put(Record::Completed {
                        owner,
                        fingerprint: *fingerprint,
                        result: StoredResult::Value(Body::new("error: provider timed out")),
                        expires_at: now.saturating_add(CACHED_FAILURE_RETENTION),
                    }),
                },
                _ => record::apply(stored, Command::Release { owner }, now),
            },
            (
                Variant::KeyOnlyLookup,
                Command::Reserve {
                    owner,
                    fingerprint,
                    lease,
                },
            ) => {
                // Look the key up as if the stored request were this one.
                let fingerprint = live.map_or(fingerprint, Record::fingerprint);
                record::apply(
                    stored,
                    Command::Reserve {
                        owner,
                        fingerprint,
                        lease,
                    },
                    now,
                )
            }
            (Variant::LateCompleteInTime, command @ Command::Complete { .. }) => {
                let mut transition = record::apply(stored, command, now);
                if transition.reply == Reply::Completed(Completion::AfterLeaseExpiry) {
                    transition.reply = Reply::Completed(Completion::InTime);
                }
                transition
            }
            (
                Variant::PendingWithoutLease,
                command @ (Command::Reserve { .. } | Command::Renew { .. }),
            ) => {
                let mut transition = record::apply(stored, command, now);
                if let Write::Put(Record::Pending { lease_until, .. }) = &mut transition.write {
                    *lease_until = Timestamp::from_millis(u64::MAX);
                }
                transition
            }
            (Variant::ReserveForgetsOwner, command @ Command::Reserve { owner, .. }) => {
                match live {
                    Some(Record::Pending {
                        owner: holder,
                        lease_until,
                        ..
                    }) if *holder == owner => Transition {
                        reply: Reply::InFlight {
                            lease_until: Some(*lease_until),
                        },
                        write: Write::Unchanged,
                    },
                    _ => record::apply(stored, command, now),
                }
            }
            (Variant::GrantsEveryReserve, Command::Reserve { owner, .. }) => Transition {
                reply: Reply::Reserved(Reservation {
                    owner,
                    lease_until: None,
                    fence: None,
                }),
                write: Write::Unchanged,
            },
            (Variant::IgnoresRenewals, Command::Renew { owner, lease }) => Transition {
                reply: Reply::Renewed(Reservation {
                    owner,
                    lease_until: Some(now.saturating_add(lease)),
                    fence: None,
                }),
                write: Write::Unchanged,
            },
            (Variant::PanicAsNotStored, command @ Command::Complete { .. }) => {
                record::apply(stored, not_stored_for_a_panic(command), now)
            }
            (_, command) => record::apply(stored, command, now),
        }
    }
}

/// A complete of a panicked action rewritten to record "result not stored".
pub(super) fn not_stored_for_a_panic(command: Command) -> Command {
    match command {
        Command::Complete {
            owner,
            fingerprint,
            result: StoredResult::Panicked,
            retention,
        } => Command::Complete {
            owner,
            fingerprint,
            result: StoredResult::NotStored,
            retention,
        },
        other => other,
    }
}

/// An unconditional write of a result, answered as if it were in time: what a store does
/// when it does not check who holds the key.
fn record_result(
    owner: OwnerToken,
    fingerprint: Fingerprint,
    result: StoredResult,
    retention: std::time::Duration,
    now: Timestamp,
) -> Transition {
    Transition {
        reply: Reply::Completed(Completion::InTime),
        write: Write::Put(Record::Completed {
            owner,
            fingerprint,
            result,
            expires_at: now.saturating_add(retention),
        }),
    }
}

/// The result cache's store: `Ok` with its own transition, or `Err` with the command
/// handed back when it behaves like the record machine (reads).
fn result_cache(
    live: Option<&Record>,
    command: Command,
    now: Timestamp,
) -> Result<Transition, Command> {
    let unchanged = |reply| Transition {
        reply,
        write: Write::Unchanged,
    };
    Ok(match command {
        Command::Reserve {
            owner,
            fingerprint,
            lease,
        } => match live {
            Some(Record::Completed {
                fingerprint: stored,
                result,
                ..
            }) => {
                if *stored == fingerprint {
                    unchanged(Reply::Replay {
                        result: result.clone(),
                        remaining: None,
                    })
                } else {
                    unchanged(Reply::KeyReuse { stored: *stored })
                }
            }
            // No result yet: go ahead, nothing is claimed.
            _ => unchanged(Reply::Reserved(Reservation {
                owner,
                lease_until: Some(now.saturating_add(lease)),
                fence: None,
            })),
        },
        Command::Complete {
            owner,
            fingerprint,
            result,
            retention,
        } => match live {
            // First writer wins; the loser's result is dropped, and it is told all is well.
            Some(Record::Completed { .. }) => unchanged(Reply::Completed(Completion::InTime)),
            _ => record_result(owner, fingerprint, result, retention, now),
        },
        Command::Renew { owner, lease } => unchanged(Reply::Renewed(Reservation {
            owner,
            lease_until: Some(now.saturating_add(lease)),
            fence: None,
        })),
        Command::Release { .. } => unchanged(Reply::Released),
        Command::Read => return Err(Command::Read),
    })
}
