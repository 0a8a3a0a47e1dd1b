//! The one catalogue of DELIBERATELY BROKEN store and driver behaviours, for checking the
//! checkers.
//!
//! Nothing here is how idem works. Each [`Variant`] other than [`Variant::Correct`] is a
//! bug that real idempotency libraries have shipped, or one that idem's own driver had or
//! could have. Every checker of the workspace runs with them (the simulation, loom and
//! shuttle, the driver's tests and the Redis tests), so that each can show it catches the
//! bugs it is meant to catch: a checker that never fails checks nothing. A variant has one
//! name everywhere ([`Variant::name`]); adding one here makes it available to all of them.
//!
//! Store variants are rewrites of `idem_core::record::apply`: the correct store is `apply`
//! itself, and every broken one changes one decision and otherwise defers to it
//! ([`Variant::apply`], for the stores the simulation and the model checkers keep in
//! memory). Many of them can also be played in front of a real store, by rewriting the
//! command or answering it locally ([`Variant::in_front`], for the driver's and the Redis
//! tests). Driver variants ([`Variant::is_driver`]) keep the correct store and change what
//! the driver feeds the attempt machine, or sends on its own, at an abnormal end.

use std::str::FromStr;

use idem_core::record::{self, Transition, Write};
use idem_core::{
    Body, Command, Completion, Fingerprint, OwnerToken, Record, Reply, Reservation, StoredResult,
    Timestamp,
};

use crate::tally::{Class, UnknownName, parse_name};

/// What a store variant does in front of a real store with one command ([`Variant::in_front`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InFront {
    /// Send this command to the store and hand its answer back.
    Forward(Command),
    /// Answer this, without sending anything.
    Answer(Reply),
    /// Send this command to the store, then answer this whatever the store said (an error
    /// is still handed back).
    ForwardThenAnswer(Command, Reply),
}

/// How long [`Variant::CachedFailure`] keeps a failure (a release carries no retention).
const CACHED_FAILURE_RETENTION: std::time::Duration = std::time::Duration::from_secs(60);

/// Which store behaviour a run uses: the real record machine, or one deliberately broken
/// variant of it (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Variant {
    /// `idem_core::record::apply`, unchanged.
    #[default]
    Correct,
    /// BROKEN: a result cache (look the key up, else run and store the result). Reserve
    /// never claims the key (it grants every caller that finds no result, and writes
    /// nothing), renewals and releases are acknowledged without effect, complete stores the
    /// first result and keeps it, and every complete is answered as in time, so nothing
    /// looks amiss to the caller; a service built on it answers with whatever result is
    /// stored ([`Variant::answers_from_store`]). Charges twice when a retry arrives while
    /// the first attempt runs (`I7`).
    ResultCache,
    /// BROKEN: complete without the owner check. A stale holder overwrites the record of
    /// the holder that took over (`I2`, `I3`).
    CompleteWithoutOwnerCheck,
    /// BROKEN: release without the owner check. A stale holder whose action failed deletes
    /// the live record of another holder (`I2`).
    ReleaseWithoutOwnerCheck,
    /// BROKEN: renew without the owner check. A stale holder extends (or, on a completed
    /// record, shortens) another holder's record, and believes it still holds the key
    /// (`I2`, `I3`).
    RenewWithoutOwnerCheck,
    /// BROKEN: expiry judged by the caller's clock instead of the store's. A caller whose
    /// clock runs ahead takes over a live reservation (`I1`); one whose clock runs behind
    /// is answered from an expired record (`I9`).
    CallerClockExpiry,
    /// BROKEN: failures are cached. A release records the failure as the key's result, so
    /// every retry replays the error instead of running the action (`I5`, `I8`).
    CachedFailure,
    /// BROKEN: the record is looked up by key alone. A request with another fingerprint
    /// waits for, or is answered with, another request's result (`I4`, `I8`).
    KeyOnlyLookup,
    /// BROKEN: a late complete is answered as if in time. The holder whose lease ran out
    /// never learns that another caller may have run the action too (`I7`).
    LateCompleteInTime,
    /// BROKEN: a pending marker without a lease (the article's warning). A holder that
    /// crashes mid-action blocks its key for good (`I6`).
    PendingWithoutLease,
    /// BROKEN: reserve does not recognise the holder's own token. A holder whose reserve
    /// reply was lost retries and is told its own reservation is in flight (`I11`).
    ReserveForgetsOwner,
    /// BROKEN: keys are shortened to [`TRUNCATED_KEY_LEN`] characters when stored, as
    /// libraries that trim or cap keys do. Two requests with different keys share one
    /// record (`I12`), and one is answered with the other's result (`I4`, `I8`).
    TruncatedKeys,
    /// BROKEN store: a value that is not a record reads as an absent key, so the first
    /// reserve is granted and writes a record over it (rule 11).
    CorruptReadAsAbsent,
    /// BROKEN: no reservations. Every reserve is granted, as if the key were always free,
    /// and nothing is written; a completed key is never replayed (`I1`).
    GrantsEveryReserve,
    /// BROKEN: renewals are acknowledged but never applied, so the lease is never extended
    /// and a slow holder's key is taken over while it still believes it holds it (the lease
    /// view, `I10`).
    IgnoresRenewals,
    /// BROKEN: records are filed under the key alone, whatever the operation, so two
    /// operations that use one key share a record (`I12`).
    IgnoresOperation,
    /// BROKEN: a panicked action's complete records a result not stored instead of "outcome
    /// unknown", so a replay says "result not stored" (rule 11).
    PanicAsNotStored,
    /// BROKEN driver: an attached call dropped while its action ran is abandoned (the
    /// attempt ends `Abandoned(ActionDropped)` and keeps the key), and the driver then
    /// releases the key itself, as its old drop guard did, although the effect may have
    /// happened: a retry runs the action again long before the lease would have ended
    /// (rule 11; `I7`, whose "abandoned mid-action" cause holds only after the lease end).
    ReleaseOnAbandon,
    /// BROKEN driver: a panic is fed as `ActionResult::Failed`, so the key is released and
    /// a retry runs an action that may already have had its effect (rule 11, `I7`).
    PanicReleases,
    /// BROKEN driver: a "corrupt record" answer is fed as a store failure, so the command
    /// is retried and, under fail-open, the action runs unprotected (rule 11).
    CorruptFailsOpen,
}

/// How many characters of a key [`Variant::TruncatedKeys`] keeps.
pub const TRUNCATED_KEY_LEN: usize = 250;

impl Variant {
    /// Every variant, the correct one first.
    pub const ALL: [Variant; 20] = [
        Variant::Correct,
        Variant::ResultCache,
        Variant::CompleteWithoutOwnerCheck,
        Variant::ReleaseWithoutOwnerCheck,
        Variant::RenewWithoutOwnerCheck,
        Variant::CallerClockExpiry,
        Variant::CachedFailure,
        Variant::KeyOnlyLookup,
        Variant::LateCompleteInTime,
        Variant::PendingWithoutLease,
        Variant::ReserveForgetsOwner,
        Variant::TruncatedKeys,
        Variant::CorruptReadAsAbsent,
        Variant::GrantsEveryReserve,
        Variant::IgnoresRenewals,
        Variant::IgnoresOperation,
        Variant::PanicAsNotStored,
        Variant::ReleaseOnAbandon,
        Variant::PanicReleases,
        Variant::CorruptFailsOpen,
    ];

    /// Every broken variant: [`Variant::ALL`] without [`Variant::Correct`].
    pub fn broken() -> impl Iterator<Item = Variant> {
        Variant::ALL.into_iter().filter(|v| *v != Variant::Correct)
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Correct => "correct",
            Variant::ResultCache => "result-cache",
            Variant::CompleteWithoutOwnerCheck => "complete-without-owner-check",
            Variant::ReleaseWithoutOwnerCheck => "release-without-owner-check",
            Variant::RenewWithoutOwnerCheck => "renew-without-owner-check",
            Variant::CallerClockExpiry => "caller-clock-expiry",
            Variant::CachedFailure => "cached-failure",
            Variant::KeyOnlyLookup => "key-only-lookup",
            Variant::LateCompleteInTime => "late-complete-in-time",
            Variant::PendingWithoutLease => "pending-without-lease",
            Variant::ReserveForgetsOwner => "reserve-forgets-owner",
            Variant::TruncatedKeys => "truncated-keys",
            Variant::CorruptReadAsAbsent => "corrupt-read-as-absent",
            Variant::GrantsEveryReserve => "grants-every-reserve",
            Variant::IgnoresRenewals => "ignores-renewals",
            Variant::IgnoresOperation => "ignores-operation",
            Variant::PanicAsNotStored => "panic-as-not-stored",
            Variant::ReleaseOnAbandon => "release-on-abandon",
            Variant::PanicReleases => "panic-releases",
            Variant::CorruptFailsOpen => "corrupt-fails-open",
        }
    }

    /// Whether the variant is the driver's (the store is then the correct one).
    pub fn is_driver(self) -> bool {
        matches!(
            self,
            Variant::ReleaseOnAbandon | Variant::PanicReleases | Variant::CorruptFailsOpen
        )
    }

    /// Whether the driver, when an attached call is dropped while its action runs, releases
    /// the key itself after abandoning the attempt ([`Variant::ReleaseOnAbandon`]).
    pub fn releases_on_abandon(self) -> bool {
        self == Variant::ReleaseOnAbandon
    }

    /// Whether the driver feeds a panic as a failure ([`Variant::PanicReleases`]).
    pub fn feeds_panic_as_failure(self) -> bool {
        self == Variant::PanicReleases
    }

    /// Whether the driver feeds a "corrupt record" answer as a store failure
    /// ([`Variant::CorruptFailsOpen`]).
    pub fn feeds_corrupt_as_store_error(self) -> bool {
        self == Variant::CorruptFailsOpen
    }

    /// One step of this variant's store on a key that holds a value that is not a record:
    /// `None` when the store answers "corrupt" and changes nothing (the correct store, and
    /// every variant but [`Variant::CorruptReadAsAbsent`]), or the transition of a store
    /// that reads the value as an absent key.
    pub fn apply_to_garbage(self, command: Command, now: Timestamp) -> Option<Transition> {
        (self == Variant::CorruptReadAsAbsent).then(|| record::apply(None, command, now))
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
                            lease_until: *lease_until,
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
                }),
                write: Write::Unchanged,
            },
            (Variant::IgnoresRenewals, Command::Renew { owner, lease }) => Transition {
                reply: Reply::Renewed(Reservation {
                    owner,
                    lease_until: Some(now.saturating_add(lease)),
                }),
                write: Write::Unchanged,
            },
            (Variant::PanicAsNotStored, command @ Command::Complete { .. }) => {
                record::apply(stored, not_stored_for_a_panic(command), now)
            }
            (_, command) => record::apply(stored, command, now),
        }
    }

    /// This variant played in front of a real store, for one command: `live` is the record
    /// the key holds now, as the store answers a read (needed only where
    /// [`Variant::reads_in_front`] says so). `None` when the variant cannot be played so (its
    /// bug is inside the store's own step, or in the store's clock), or is a driver's. The
    /// variants that file keys otherwise forward every command; the player files it as
    /// [`Variant::files_as`] says.
    ///
    /// The owner-check variants are played by sending the command in the name of the
    /// record's holder, which a store that checks owners then carries out; the result cache
    /// and the variants that acknowledge without applying answer locally.
    pub fn in_front(self, live: Option<&Record>, command: Command) -> Option<InFront> {
        let holder = live.map(Record::owner);
        let other_holder = |owner: OwnerToken| holder.filter(|h| *h != owner);
        Some(match (self, command) {
            (Variant::Correct, command) => InFront::Forward(command),
            (Variant::ResultCache, command @ Command::Reserve { .. }) => match (live, &command) {
                (Some(Record::Completed { .. }), _) => InFront::Forward(command),
                (_, Command::Reserve { owner, .. }) => {
                    InFront::Answer(Reply::Reserved(Reservation {
                        owner: *owner,
                        lease_until: None,
                    }))
                }
                _ => InFront::Forward(command),
            },
            (Variant::ResultCache, command @ Command::Complete { .. }) => {
                InFront::ForwardThenAnswer(command, Reply::Completed(Completion::InTime))
            }
            (Variant::ResultCache | Variant::IgnoresRenewals, Command::Renew { owner, .. }) => {
                InFront::Answer(Reply::Renewed(Reservation {
                    owner,
                    lease_until: None,
                }))
            }
            (Variant::ResultCache, Command::Release { .. }) => InFront::Answer(Reply::Released),
            (Variant::GrantsEveryReserve, Command::Reserve { owner, .. }) => {
                InFront::Answer(Reply::Reserved(Reservation {
                    owner,
                    lease_until: None,
                }))
            }
            (
                Variant::CompleteWithoutOwnerCheck,
                Command::Complete {
                    owner,
                    fingerprint,
                    result,
                    retention,
                },
            ) => InFront::Forward(Command::Complete {
                owner: other_holder(owner).unwrap_or(owner),
                fingerprint,
                result,
                retention,
            }),
            (Variant::ReleaseWithoutOwnerCheck, Command::Release { owner }) => {
                InFront::Forward(Command::Release {
                    owner: other_holder(owner).unwrap_or(owner),
                })
            }
            (Variant::RenewWithoutOwnerCheck, Command::Renew { owner, lease }) => {
                InFront::Forward(Command::Renew {
                    owner: other_holder(owner).unwrap_or(owner),
                    lease,
                })
            }
            (
                Variant::KeyOnlyLookup,
                Command::Reserve {
                    owner,
                    fingerprint,
                    lease,
                },
            ) => InFront::Forward(Command::Reserve {
                owner,
                fingerprint: live.map_or(fingerprint, Record::fingerprint),
                lease,
            }),
            (Variant::PanicAsNotStored, command) => {
                InFront::Forward(not_stored_for_a_panic(command))
            }
            // Their bug is where the record is filed ([`Variant::files_as`]): the store
            // in front of which they play files it there.
            (
                Variant::ResultCache
                | Variant::GrantsEveryReserve
                | Variant::IgnoresRenewals
                | Variant::CompleteWithoutOwnerCheck
                | Variant::ReleaseWithoutOwnerCheck
                | Variant::RenewWithoutOwnerCheck
                | Variant::KeyOnlyLookup
                | Variant::TruncatedKeys
                | Variant::IgnoresOperation,
                command,
            ) => InFront::Forward(command),
            (
                Variant::CallerClockExpiry
                | Variant::CachedFailure
                | Variant::LateCompleteInTime
                | Variant::PendingWithoutLease
                | Variant::ReserveForgetsOwner
                | Variant::CorruptReadAsAbsent
                | Variant::ReleaseOnAbandon
                | Variant::PanicReleases
                | Variant::CorruptFailsOpen,
                _,
            ) => return None,
        })
    }

    /// Whether [`Variant::in_front`] needs the key's live record (the store is read first).
    pub fn reads_in_front(self, command: &Command) -> bool {
        matches!(
            (self, command),
            (
                Variant::ResultCache | Variant::KeyOnlyLookup,
                Command::Reserve { .. }
            ) | (Variant::CompleteWithoutOwnerCheck, Command::Complete { .. })
                | (Variant::ReleaseWithoutOwnerCheck, Command::Release { .. })
                | (Variant::RenewWithoutOwnerCheck, Command::Renew { .. })
        )
    }
}

/// A complete of a panicked action rewritten to record "result not stored".
fn not_stored_for_a_panic(command: Command) -> Command {
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
        })),
        Command::Release { .. } => unchanged(Reply::Released),
        Command::Read => return Err(Command::Read),
    })
}

impl Class for Variant {
    const ALL: &'static [Self] = &Variant::ALL;
    const KIND: &'static str = "variant";
    fn name(self) -> &'static str {
        Variant::name(self)
    }
    fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for Variant {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_name(s)
    }
}
