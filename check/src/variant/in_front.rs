//! The store variants played in front of a real store, for the driver's and the Redis
//! tests: one command rewritten, or answered locally ([`Variant::in_front`]).

use idem_core::{Command, Completion, OwnerToken, Record, Reply, Reservation};

use super::Variant;
use super::store::not_stored_for_a_panic;

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

impl Variant {
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
                        fence: None,
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
                    fence: None,
                }))
            }
            (Variant::ResultCache, Command::Release { .. }) => InFront::Answer(Reply::Released),
            (Variant::GrantsEveryReserve, Command::Reserve { owner, .. }) => {
                InFront::Answer(Reply::Reserved(Reservation {
                    owner,
                    lease_until: None,
                    fence: None,
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
                | Variant::CorruptFailsOpen
                | Variant::CommitWithoutOwnerCheck
                | Variant::AbsentCommitRolledBack
                | Variant::DownstreamKeyPerAttempt
                | Variant::FenceReusedAfterTakeover
                | Variant::AckBeforeRecord,
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
