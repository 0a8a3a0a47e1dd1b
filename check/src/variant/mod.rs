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
//!
//! The catalogue is here: every variant and its one name. What
//! each does lives by where its bug is:
//!
//! - `store`: the broken stores kept in memory ([`Variant::apply`], and
//!   [`Variant::apply_fenced`] for one that hands out fences), and how a store files a key or
//!   reads a value that is not a record;
//! - `in_front`: the store variants played in front of a real store ([`Variant::in_front`]);
//! - `driver`: what a broken driver does at an abnormal end (rule 11), and what a broken
//!   message consumer tells its broker (`C1`).

mod driver;
mod in_front;
mod store;

use std::str::FromStr;

use crate::tally::{Class, UnknownName, parse_name};

pub use in_front::InFront;

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
    /// BROKEN transactional store: the complete is applied inside the action's transaction
    /// as the record machine says, but the transaction commits whatever it answered, so a
    /// holder whose key was taken over (its complete refused, `NotOwner`) commits its writes
    /// too ([`Variant::commits`]; `T1`).
    CommitWithoutOwnerCheck,
    /// BROKEN driver: a read after a lost commit reply that finds no record of the attempt's
    /// own (none at all, or another owner's) is fed to the attempt as its own reservation
    /// read back, so the attempt gives the key back and says `RolledBack`, as the attempt
    /// machine once concluded by itself. A commit still in progress (an insert, invisible to
    /// the read) then lands: `RolledBack` said of writes that committed (`T1`;
    /// [`Variant::fed_commit_read`]).
    AbsentCommitRolledBack,
    /// BROKEN driver: the downstream key an action passes to its provider is derived from
    /// the attempt (its owner token) instead of the call's (operation, key), so the caller
    /// that takes a key over, or retries after a fail-open run, sends the provider a new
    /// key, and a provider that deduplicates by it charges again (`D1`;
    /// [`Variant::downstream_key`]).
    DownstreamKeyPerAttempt,
    /// BROKEN store: a takeover of a key whose earlier holder's record is still stored
    /// (expired, not yet forgotten) is granted that holder's fence again, not a greater one,
    /// as a store that kept the fence in the record and forgot to advance it would. A
    /// provider that honours fences then takes the stale holder's write after the new
    /// holder's (`F1`; [`Variant::apply_fenced`]).
    FenceReusedAfterTakeover,
    /// BROKEN consumer: a delivery is acknowledged as soon as its handler returns a value,
    /// before the complete that records it is applied ([`Variant::acks_before_record`]). A
    /// complete lost in an outage, or a consumer that dies before recording, leaves the
    /// message acknowledged with nothing recorded: its key is left to its lease, and a
    /// duplicate publish runs it again (`C1`).
    AckBeforeRecord,
}

/// How many characters of a key [`Variant::TruncatedKeys`] keeps.
pub const TRUNCATED_KEY_LEN: usize = 250;

impl Variant {
    /// Every variant, the correct one first.
    pub const ALL: [Variant; 25] = [
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
        Variant::CommitWithoutOwnerCheck,
        Variant::AbsentCommitRolledBack,
        Variant::DownstreamKeyPerAttempt,
        Variant::FenceReusedAfterTakeover,
        Variant::AckBeforeRecord,
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
            Variant::CommitWithoutOwnerCheck => "commit-without-owner-check",
            Variant::AbsentCommitRolledBack => "absent-commit-rolled-back",
            Variant::DownstreamKeyPerAttempt => "downstream-key-per-attempt",
            Variant::FenceReusedAfterTakeover => "fence-reused-after-takeover",
            Variant::AckBeforeRecord => "ack-before-record",
        }
    }
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
