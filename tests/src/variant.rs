//! The store and driver under test: the real record machine driven as a driver must drive
//! the real attempt machine, or one of the known bugs of other implementations (and of
//! earlier versions of idem's own driver) built around them.
//!
//! The bugs live here, in the test harness, and never in the library. A store bug is the
//! real [`apply`] with the stored state or the clock rewritten the way the buggy
//! implementation effectively sees it, so the rest of the machine is the one that ships. A
//! driver bug is the caller feeding the real `Attempt` the wrong input at an abnormal end
//! (see `caller`), so the machine itself is the one that ships.

use idem_core::record::{Command, Record, Transition, Write, apply};
use idem_core::{OwnerToken, Timestamp};

/// Which store and which driver behaviour a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `idem_core::record::apply` as it is, with `idem_core::Attempt` callers.
    Correct,
    /// No reservation: each caller reads the key and, if nothing is there, runs the action
    /// and stores its result. Passes every sequential test; charges twice when two
    /// requests overlap (`I7`).
    ResultCache,
    /// Complete writes the result whoever holds the key: a holder whose lease ran out
    /// overwrites the record of the holder that took over (`I2`, `I3`).
    CompleteWithoutOwnerCheck,
    /// Release deletes the key whoever holds it: a stale holder whose action failed frees
    /// the live holder's key for a third caller (`I2`, then `I1`).
    ReleaseWithoutOwnerCheck,
    /// Renew extends the key's lease whoever holds it: a stale holder keeps the new
    /// holder's reservation alive and is told it still holds the key (`I2`).
    RenewWithoutOwnerCheck,
    /// Expiry judged by the clock of the caller that sends the command instead of the
    /// store's: a caller whose clock runs ahead sees a live lease as expired (`I1`).
    SkewedClock,
    /// The driver releases the key when its caller goes away while the action runs (what
    /// idem's driver did before `Attempt::abandon`): the action may already have had its
    /// effect, and a retry that gets the key before the lease would have ended runs it
    /// again (`I7`, rule 11).
    ReleaseOnAbandon,
    /// The driver feeds a panic as `ActionResult::Failed`: the key is released although the
    /// effect may have happened, and a retry runs the action again (rule 11).
    PanicReleases,
    /// The driver feeds a corrupt answer as a store failure (`handle_store_error`): the
    /// attempt retries and, failing open, runs the action on a key that holds a foreign
    /// value, on every call (rule 11).
    CorruptFailsOpen,
}

impl Variant {
    /// Every variant that carries a known bug.
    pub const BROKEN: [Variant; 8] = [
        Variant::ResultCache,
        Variant::CompleteWithoutOwnerCheck,
        Variant::ReleaseWithoutOwnerCheck,
        Variant::RenewWithoutOwnerCheck,
        Variant::SkewedClock,
        Variant::ReleaseOnAbandon,
        Variant::PanicReleases,
        Variant::CorruptFailsOpen,
    ];

    /// Whether callers use the naive read-run-store protocol instead of `Attempt`.
    pub fn naive_callers(self) -> bool {
        self == Variant::ResultCache
    }

    /// Whether the driver sends a release of its own after abandoning an attempt whose
    /// action was dropped mid-run.
    pub fn releases_on_abandon(self) -> bool {
        self == Variant::ReleaseOnAbandon
    }

    /// Whether the driver feeds a panicked action as failed.
    pub fn panic_as_failure(self) -> bool {
        self == Variant::PanicReleases
    }

    /// Whether the driver feeds a corrupt answer as a store failure.
    pub fn corrupt_as_store_error(self) -> bool {
        self == Variant::CorruptFailsOpen
    }

    /// One store step: the reply to `command` on `stored`. `store_now` is the store's clock,
    /// `skewed_now` the store's clock as the sending caller's skewed clock reads it (only
    /// [`Variant::SkewedClock`] looks at it).
    pub fn step(
        self,
        stored: Option<&Record>,
        command: Command,
        store_now: Timestamp,
        skewed_now: Timestamp,
    ) -> Transition {
        match (self, &command) {
            (Variant::SkewedClock, _) => apply(stored, command, skewed_now),
            (Variant::CompleteWithoutOwnerCheck, Command::Complete { owner, .. })
            | (Variant::ReleaseWithoutOwnerCheck, Command::Release { owner }) => {
                let seen = stored.map(|record| as_reservation_of(record, *owner));
                apply(seen.as_ref(), command, store_now)
            }
            (Variant::RenewWithoutOwnerCheck, Command::Renew { owner, .. }) => match stored {
                Some(record @ Record::Pending { owner: holder, .. }) if holder != owner => {
                    let holder = *holder;
                    let seen = as_reservation_of(record, *owner);
                    let mut transition = apply(Some(&seen), command, store_now);
                    // The lease is extended, but the key stays the holder's.
                    if let Write::Put(Record::Pending {
                        fingerprint,
                        lease_until,
                        ..
                    }) = transition.write
                    {
                        transition.write = Write::Put(Record::Pending {
                            owner: holder,
                            fingerprint,
                            lease_until,
                        });
                    }
                    transition
                }
                _ => apply(stored, command, store_now),
            },
            _ => apply(stored, command, store_now),
        }
    }
}

/// The record as an implementation without an owner check sees it: whatever holds the key
/// is taken for `owner`'s own reservation.
fn as_reservation_of(record: &Record, owner: OwnerToken) -> Record {
    if record.owner() == owner {
        return record.clone();
    }
    Record::Pending {
        owner,
        fingerprint: record.fingerprint(),
        lease_until: record.expires_at(),
    }
}
