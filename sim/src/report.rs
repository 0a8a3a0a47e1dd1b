//! What a run found: the checks (named for MODEL.md's invariants), the violations, the
//! causes of extra effects, the answers clients got and the card statement.

use std::fmt;

use crate::faults::ExercisedCounts;
use crate::tally::{Class, Tally};

/// One check the simulation makes, named for the MODEL.md invariant it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Check {
    /// `I1`: a reserve never replaces a live reservation of another owner (judged by the
    /// store's true clock, whatever clock the store used).
    OneLiveHolder,
    /// `I2`: complete, renew and release by a non-owner change nothing.
    OwnerOnly,
    /// `I3`: a live completed record is never changed or removed.
    CompletedUnchanged,
    /// `I4`: a reserve under another fingerprint is answered `KeyReuse`, and a `KeyReuse`
    /// outcome carries two different fingerprints.
    KeyReuseRefused,
    /// `I5`: every recorded result is the result of its owner's successful action.
    FailuresNotRecorded,
    /// `I6`: a crashed holder's reservation is never reported in flight past its lease.
    DeadHolderFreesKey,
    /// `I7`: one effect per key, unless an allowed cause explains each extra one.
    OneEffectPerKey,
    /// `I7`, the reporting half: an attempt whose reservation the store found gone (a late
    /// or refused complete, a refused renewal) reports `lease_lost`.
    LeaseLossReported,
    /// `I8`: every replay is the result of an execution of the same request.
    ReplayIsTheResult,
    /// `I9`: a reserve on an expired record is granted, as on an absent one.
    ExpiredIsAbsent,
    /// `I10`: a renewal never shortens the lease.
    LeaseNeverShrinks,
    /// `I11`: the holder's repeated reserve returns its reservation unchanged.
    ReserveIdempotent,
    /// `I12`: the store files a record under the caller's operation and key, byte for
    /// byte.
    KeysVerbatim,
    /// Rule 11 (DESIGN.md), a value that is not a record: the store never replaces it, an
    /// attempt the store answered "corrupt" before its action ran never runs it and ends
    /// `CorruptRecord`, and nothing is charged under the key but by an attempt that failed
    /// open without ever being answered.
    CorruptRecordRunsNothing,
    /// Rule 11, a panic: the record of a panicked action is `StoredResult::Panicked` (and
    /// only a panicked action's is), a replay of it answers a request whose own execution
    /// panicked, and the panicking owner never releases the key.
    PanicIsOutcomeUnknown,
    /// Rule 11, an attached call dropped while its action ran: its owner never releases the
    /// key, which stays held until its lease ends (`I6`, `I7`'s "abandoned mid-action").
    DroppedActionKeepsKey,
    /// The attempt's promise: while `Attempt::lease` says `Held`, the store really holds
    /// the caller's live reservation.
    HeldLeaseIsLive,
    /// Every attempt that did not crash finishes, within the run's event budget; an
    /// abandoned one ends `Abandoned`, or in its normal outcome when it was already
    /// recording its result or releasing its key.
    EveryAttemptFinishes,
    /// The driver fed the attempt machine only inputs it awaited (a `ProtocolError` is a
    /// simulation bug).
    DriverProtocol,
}

impl Check {
    /// The check's name, prefixed with its invariant.
    pub fn name(self) -> &'static str {
        match self {
            Check::OneLiveHolder => "I1 one-live-holder",
            Check::OwnerOnly => "I2 owner-only",
            Check::CompletedUnchanged => "I3 completed-unchanged",
            Check::KeyReuseRefused => "I4 key-reuse-refused",
            Check::FailuresNotRecorded => "I5 failures-not-recorded",
            Check::DeadHolderFreesKey => "I6 dead-holder-frees-key",
            Check::OneEffectPerKey => "I7 one-effect-per-key",
            Check::LeaseLossReported => "I7 lease-loss-reported",
            Check::ReplayIsTheResult => "I8 replay-is-the-result",
            Check::ExpiredIsAbsent => "I9 expired-is-absent",
            Check::LeaseNeverShrinks => "I10 lease-never-shrinks",
            Check::ReserveIdempotent => "I11 reserve-idempotent",
            Check::KeysVerbatim => "I12 keys-verbatim",
            Check::CorruptRecordRunsNothing => "R11 corrupt-record-runs-nothing",
            Check::PanicIsOutcomeUnknown => "R11 panic-is-outcome-unknown",
            Check::DroppedActionKeepsKey => "R11 dropped-action-keeps-key",
            Check::HeldLeaseIsLive => "held-lease-is-live",
            Check::EveryAttemptFinishes => "every-attempt-finishes",
            Check::DriverProtocol => "driver-protocol",
        }
    }
}

/// A check that failed, when (simulated ms), and the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which check.
    pub check: Check,
    /// Simulated time of the failure.
    pub at: u64,
    /// What was seen.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}ms: {}", self.check.name(), self.at, self.detail)
    }
}

/// Why an extra effect (a second charge for one key) was allowed (MODEL.md,
/// "Non-guarantees").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// An attempt that charged ran unprotected because the store was unreachable.
    FailOpen,
    /// An attempt that charged reported `lease_lost`: its lease ran out during the action.
    LeaseExpired,
    /// A holder crashed after charging, before recording; its lease ran out before the
    /// holder of the other charge got the key.
    HolderCrashed,
    /// An attached call was dropped while its action ran (`Abandoned(ActionDropped)`) and
    /// the action charged; its lease ran out before the holder of the other charge got
    /// the key, exactly as after a crash.
    AbandonedMidAction,
    /// An attempt that charged could not record its result (`Recording::Unknown`).
    CompleteUnknown,
    /// The charge came after the earlier result's retention had run out.
    RetentionExpired,
}

impl Cause {
    /// Every cause, in the order the summary prints them.
    pub const ALL: [Cause; 6] = [
        Cause::FailOpen,
        Cause::LeaseExpired,
        Cause::HolderCrashed,
        Cause::AbandonedMidAction,
        Cause::CompleteUnknown,
        Cause::RetentionExpired,
    ];

    /// The cause's name in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Cause::FailOpen => "fail-open",
            Cause::LeaseExpired => "lease-expired",
            Cause::HolderCrashed => "holder-crashed",
            Cause::AbandonedMidAction => "abandoned-mid-action",
            Cause::CompleteUnknown => "complete-unknown",
            Cause::RetentionExpired => "retention-expired",
        }
    }
}

impl Class for Cause {
    const ALL: &'static [Self] = &Cause::ALL;
    const KIND: &'static str = "cause";
    fn name(self) -> &'static str {
        Cause::name(self)
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Extra effects counted by cause.
pub type CauseCounts = Tally<Cause>;

/// What a client was answered, as the service would put it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// A result: the charge id (`ch_1`), executed or replayed.
    Result(String),
    /// The result was recorded without a body (over the size limit).
    NoBody,
    /// The action failed (the provider timed out); nothing is recorded.
    ActionFailed,
    /// An identical request holds the key (HTTP 409).
    InProgress,
    /// The key belongs to another request (HTTP 422).
    KeyReuse,
    /// The store is unreachable and the policy is fail-closed (HTTP 503).
    StoreUnavailable,
    /// The action panicked in this try (the driver resumes the panic; a service answers
    /// 500).
    Panicked,
    /// The replay of a panicked action: whether its effect happened is unknown, and the
    /// action is not run again.
    OutcomeUnknown,
    /// The key holds a value that is not a record: nothing ran.
    CorruptRecord,
}

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Response::Result(id) => f.write_str(id),
            Response::NoBody => f.write_str("NoBody"),
            Response::ActionFailed => f.write_str("ActionFailed"),
            Response::InProgress => f.write_str("InProgressError"),
            Response::KeyReuse => f.write_str("KeyReuseError"),
            Response::StoreUnavailable => f.write_str("StoreUnavailableError"),
            Response::Panicked => f.write_str("Panicked"),
            Response::OutcomeUnknown => f.write_str("OutcomeUnknownError"),
            Response::CorruptRecord => f.write_str("CorruptRecordError"),
        }
    }
}

/// One line of the provider's card statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// The charge's number: its id is `ch_{number}`.
    pub number: u32,
    /// The key's slot in the plan.
    pub slot: usize,
    /// The attempt (worker) that made it.
    pub worker: u32,
    /// Simulated ms.
    pub at: u64,
}

impl Charge {
    /// The charge id the provider returns, `ch_1`, `ch_2`, ...
    pub fn id(&self) -> String {
        format!("ch_{}", self.number)
    }
}

/// Everything one run found.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// The seed (zero for scripted runs).
    pub seed: u64,
    /// Requests sent (attempts started, retries included).
    pub requests: u64,
    /// Effects (charges) made.
    pub effects: u64,
    /// Extra effects with an allowed cause.
    pub extra: CauseCounts,
    /// Failed checks.
    pub violations: Vec<Violation>,
    /// Fault and path classes reached.
    pub exercised: ExercisedCounts,
    /// Per client, the answer to each of its tries (`None`: none was given: the service
    /// crashed, or the caller of an attached try went away).
    pub responses: Vec<Vec<Option<Response>>>,
    /// The card statement.
    pub charges: Vec<Charge>,
    /// Simulated events processed.
    pub events: u64,
    /// The event trace, when asked for.
    pub trace: Option<String>,
}
