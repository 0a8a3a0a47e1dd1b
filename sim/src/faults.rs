//! Which faults a run may inject, and the classes of fault and protocol path a run
//! exercised (counted, so a summary shows that every class was really reached).

use std::str::FromStr;

use idem_check::{Class, Tally, UnknownName, parse_name};

/// A kind of fault that can be switched on or off for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// Store requests lost before they are applied, replies lost after, replies delayed
    /// past the attempt's reply deadline, transactional inserts that commit after it.
    Network,
    /// Windows in which the store refuses every command, or answers none.
    Outage,
    /// Holders that crash in the middle of their action.
    Crash,
    /// Holders that pause (GC, stopped VM) for longer than their lease.
    Pause,
    /// Actions slower than the lease, kept alive by renewals.
    Slow,
    /// Actions that fail (the provider times out without charging).
    Failure,
    /// Requests that reuse a key with another amount (another fingerprint).
    KeyReuse,
    /// Clients that retry after the record's retention has run out.
    Retention,
    /// Clients that time out and retry with the same key while the first try still runs.
    Retries,
    /// Callers whose clocks are skewed from each other and from the store's.
    Skew,
    /// Callers that go away at a chosen point of their try (mid-reserve, while waiting,
    /// mid-action, mid-complete, mid-release). An attached call is abandoned with its
    /// action; a detached one runs on. Either way the client retries with the same key.
    Abandon,
    /// Actions that panic, before or after their effect.
    Panic,
    /// Keys that hold a value that is not a record from the start.
    Corrupt,
    /// Keys whose actions are transactional: their effect commits with the record, or rolls
    /// back (not a fault: the mode every fault above then meets).
    Transactional,
    /// A broker (MODEL.md `C1`): some keys are messages, each published one to three times,
    /// delivered at least once to consumers that run every delivery as a call under the
    /// message's key and tell the broker what the core's decision says; acks lost on their
    /// way, ack-waits that run out under a slow or crashed consumer (a second delivery while
    /// the first still runs), redelivery delays honoured.
    Broker,
}

impl FaultKind {
    /// Every kind, in the order the flags are listed.
    pub const ALL: [FaultKind; 15] = [
        FaultKind::Network,
        FaultKind::Outage,
        FaultKind::Crash,
        FaultKind::Pause,
        FaultKind::Slow,
        FaultKind::Failure,
        FaultKind::KeyReuse,
        FaultKind::Retention,
        FaultKind::Retries,
        FaultKind::Skew,
        FaultKind::Abandon,
        FaultKind::Panic,
        FaultKind::Corrupt,
        FaultKind::Transactional,
        FaultKind::Broker,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Network => "network",
            FaultKind::Outage => "outage",
            FaultKind::Crash => "crash",
            FaultKind::Pause => "pause",
            FaultKind::Slow => "slow",
            FaultKind::Failure => "failure",
            FaultKind::KeyReuse => "key-reuse",
            FaultKind::Retention => "retention",
            FaultKind::Retries => "retries",
            FaultKind::Skew => "skew",
            FaultKind::Abandon => "abandon",
            FaultKind::Panic => "panic",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Transactional => "transactional",
            FaultKind::Broker => "broker",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl Class for FaultKind {
    const ALL: &'static [Self] = &FaultKind::ALL;
    const KIND: &'static str = "fault";
    fn name(self) -> &'static str {
        FaultKind::name(self)
    }
    fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for FaultKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_name(s)
    }
}

/// The set of fault kinds switched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Faults(u16);

impl Faults {
    /// Every fault on: the default for exploring.
    pub fn all() -> Self {
        Self(
            FaultKind::ALL
                .iter()
                .fold(0, |bits, kind| bits | kind.bit()),
        )
    }

    /// No fault: many callers and network delay only.
    pub fn none() -> Self {
        Self(0)
    }

    /// Whether `kind` is on.
    pub fn has(self, kind: FaultKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The set with `kind` on.
    #[must_use]
    pub fn with(self, kind: FaultKind) -> Self {
        Self(self.0 | kind.bit())
    }

    /// The set with `kind` off.
    #[must_use]
    pub fn without(self, kind: FaultKind) -> Self {
        Self(self.0 & !kind.bit())
    }

    /// Parses a comma-separated list of fault names (`all` and `none` also accepted).
    pub fn parse_list(list: &str) -> Result<Self, UnknownName> {
        let mut faults = Faults::none();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            faults = match name {
                "all" => Faults::all(),
                "none" => Faults::none(),
                other => faults.with(other.parse()?),
            };
        }
        Ok(faults)
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::all()
    }
}

/// A class of fault or protocol path that a run reached. The summary counts each, and a
/// test asserts that a modest exploration reaches every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exercised {
    /// A client timed out and retried with the same key while its first try still ran.
    ClientRetry,
    /// The caller of a detached try went away while the try still ran: the client retried,
    /// and the service ran the try on to its end and recorded it.
    DetachedCallerGone,
    /// The caller of an attached try went away while its reserve was out (or due): the
    /// attempt was abandoned before any action ran.
    AbandonMidReserve,
    /// The caller of an attached try went away while the try waited for another holder.
    AbandonWhileWaiting,
    /// An attached action was dropped before its effect, its provider request not yet
    /// sent: nothing was charged.
    AbandonBeforeEffect,
    /// An attached action was dropped before its effect with its provider request already
    /// in flight: the charge landed anyway.
    AbandonChargeInFlight,
    /// An attached action was dropped after its effect.
    AbandonAfterEffect,
    /// The caller of an attached try went away while its result was being recorded.
    AbandonMidComplete,
    /// The caller of an attached try went away while its failure's release was out (or
    /// due).
    AbandonMidRelease,
    /// A client retried after its record's retention had run out.
    LateRetry,
    /// A store request was lost before the store applied it.
    RequestLost,
    /// A store reply was lost after the store applied the command.
    ReplyLost,
    /// A store reply arrived after the caller had given up on it.
    ReplyLate,
    /// The store refused a command during an outage.
    StoreDown,
    /// The store swallowed a command during an outage: no reply at all, and the attempt
    /// gave the command up at its reply deadline.
    StoreSilent,
    /// The store answered that the key holds a value that is not a record.
    CorruptRecord,
    /// A holder crashed before its action had its effect.
    CrashBeforeEffect,
    /// A holder crashed after its action had its effect, before recording it.
    CrashAfterEffect,
    /// A holder paused for longer than its lease.
    PausePastLease,
    /// An action panicked before its effect.
    PanicBeforeEffect,
    /// An action panicked after its effect.
    PanicAfterEffect,
    /// A request was answered "outcome unknown": the replay of a panicked action.
    PanicReplayed,
    /// An action ran longer than its lease (renewals kept it).
    SlowAction,
    /// An action failed and its reservation was released.
    ActionFailed,
    /// A reserve met a record of another fingerprint (`KeyReuse`).
    KeyReuse,
    /// An action ran unprotected because the store was unreachable (fail-open).
    FailOpen,
    /// A caller got `StoreUnavailable` and ran nothing (fail-closed).
    FailClosed,
    /// After a fail-closed `StoreUnavailable`, the attempt was settled: the reservation one
    /// of its failed reserves may have left was released.
    FailClosedRelease,
    /// A reserve met an identical request in flight.
    InFlight,
    /// A caller was answered `InProgress`.
    InProgress,
    /// A reserve took over the expired reservation of another owner.
    LeaseTakeover,
    /// A complete was recorded after its lease had run out (`AfterLeaseExpiry`).
    LateComplete,
    /// A complete, renew or release was refused (`NotOwner`, `LeaseLost`).
    Refused,
    /// A complete whose reply was lost was retried and recognised (`Repeated`).
    RepeatedComplete,
    /// A request was answered with the recorded result.
    Replay,
    /// A complete failed every retry (`Recording::Unknown`).
    CompleteUnknown,
    /// A reserve met a completed record whose retention had run out.
    RetentionExpired,
    /// An action's result could not be recorded; the key was completed without a body.
    Unrecordable,
    /// A waiter was woken by the store's notice that the record changed.
    ChangeNotice,
    /// A transactional action's writes committed with its complete.
    TransactionCommitted,
    /// A transactional complete was refused (another holder took the key over): its writes
    /// rolled back.
    CommitRefused,
    /// A transactional attempt read the record to learn whether its commit landed (its
    /// reply was lost, or its caller went away while it was out).
    CommitRead,
    /// A transactional attempt could not learn whether its commit landed (`CommitUnknown`).
    CommitUnknown,
    /// A transactional complete that inserted its record committed after its attempt's
    /// reply deadline.
    CommitLate,
    /// A late commit landed after its attempt had read the record and found none: the
    /// attempt could not tell, and said `CommitUnknown`.
    CommitLandedAfterRead,
    /// A transactional holder crashed mid-action: its transaction died, nothing committed.
    TransactionCrashed,
    /// A transactional action panicked: its writes rolled back and its key was released.
    TransactionPanicked,
    /// An attached transactional action was dropped mid-run: its writes went with it.
    TransactionDropped,
    /// A message was published more than once (a producer's retry): two messages, one key.
    DuplicatePublish,
    /// A delivery was acknowledged as a replay: its message's effect was recorded by an
    /// earlier delivery (of it, or of a duplicate publish).
    AckedReplay,
    /// A consumer's ack was lost on its way to the broker.
    AckLost,
    /// The broker delivered a message again after its ack-wait, the earlier delivery
    /// unacknowledged (its consumer crashed, or its ack was lost).
    AckWaitRedelivery,
    /// The broker delivered a message again after its ack-wait while the earlier delivery
    /// still ran (a slow handler): the two never ran the action side by side.
    AckWaitWhileRunning,
    /// A consumer asked for a message to be delivered again after a delay (its call
    /// recorded nothing, or another delivery held the key).
    Redelivered,
    /// A consumer dead-lettered a message.
    DeadLettered,
}

impl Exercised {
    /// Every class, in the order the summary prints them.
    pub const ALL: [Exercised; 55] = [
        Exercised::ClientRetry,
        Exercised::DetachedCallerGone,
        Exercised::AbandonMidReserve,
        Exercised::AbandonWhileWaiting,
        Exercised::AbandonBeforeEffect,
        Exercised::AbandonChargeInFlight,
        Exercised::AbandonAfterEffect,
        Exercised::AbandonMidComplete,
        Exercised::AbandonMidRelease,
        Exercised::LateRetry,
        Exercised::RequestLost,
        Exercised::ReplyLost,
        Exercised::ReplyLate,
        Exercised::StoreDown,
        Exercised::StoreSilent,
        Exercised::CorruptRecord,
        Exercised::CrashBeforeEffect,
        Exercised::CrashAfterEffect,
        Exercised::PausePastLease,
        Exercised::PanicBeforeEffect,
        Exercised::PanicAfterEffect,
        Exercised::PanicReplayed,
        Exercised::SlowAction,
        Exercised::ActionFailed,
        Exercised::KeyReuse,
        Exercised::FailOpen,
        Exercised::FailClosed,
        Exercised::FailClosedRelease,
        Exercised::InFlight,
        Exercised::InProgress,
        Exercised::LeaseTakeover,
        Exercised::LateComplete,
        Exercised::Refused,
        Exercised::RepeatedComplete,
        Exercised::Replay,
        Exercised::CompleteUnknown,
        Exercised::RetentionExpired,
        Exercised::Unrecordable,
        Exercised::ChangeNotice,
        Exercised::TransactionCommitted,
        Exercised::CommitRefused,
        Exercised::CommitRead,
        Exercised::CommitUnknown,
        Exercised::CommitLate,
        Exercised::CommitLandedAfterRead,
        Exercised::TransactionCrashed,
        Exercised::TransactionPanicked,
        Exercised::TransactionDropped,
        Exercised::DuplicatePublish,
        Exercised::AckedReplay,
        Exercised::AckLost,
        Exercised::AckWaitRedelivery,
        Exercised::AckWaitWhileRunning,
        Exercised::Redelivered,
        Exercised::DeadLettered,
    ];

    /// The class's name in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Exercised::ClientRetry => "client-retry",
            Exercised::DetachedCallerGone => "detached-caller-gone",
            Exercised::AbandonMidReserve => "abandon-mid-reserve",
            Exercised::AbandonWhileWaiting => "abandon-while-waiting",
            Exercised::AbandonBeforeEffect => "abandon-before-effect",
            Exercised::AbandonChargeInFlight => "abandon-charge-in-flight",
            Exercised::AbandonAfterEffect => "abandon-after-effect",
            Exercised::AbandonMidComplete => "abandon-mid-complete",
            Exercised::AbandonMidRelease => "abandon-mid-release",
            Exercised::LateRetry => "late-retry",
            Exercised::RequestLost => "request-lost",
            Exercised::ReplyLost => "reply-lost",
            Exercised::ReplyLate => "reply-late",
            Exercised::StoreDown => "store-down",
            Exercised::StoreSilent => "store-silent",
            Exercised::CorruptRecord => "corrupt-record",
            Exercised::CrashBeforeEffect => "crash-before-effect",
            Exercised::CrashAfterEffect => "crash-after-effect",
            Exercised::PausePastLease => "pause-past-lease",
            Exercised::PanicBeforeEffect => "panic-before-effect",
            Exercised::PanicAfterEffect => "panic-after-effect",
            Exercised::PanicReplayed => "panic-replayed",
            Exercised::SlowAction => "slow-action",
            Exercised::ActionFailed => "action-failed",
            Exercised::KeyReuse => "key-reuse",
            Exercised::FailOpen => "fail-open",
            Exercised::FailClosed => "fail-closed",
            Exercised::FailClosedRelease => "fail-closed-release",
            Exercised::InFlight => "in-flight",
            Exercised::InProgress => "in-progress",
            Exercised::LeaseTakeover => "lease-takeover",
            Exercised::LateComplete => "late-complete",
            Exercised::Refused => "refused",
            Exercised::RepeatedComplete => "repeated-complete",
            Exercised::Replay => "replay",
            Exercised::CompleteUnknown => "complete-unknown",
            Exercised::RetentionExpired => "retention-expired",
            Exercised::Unrecordable => "unrecordable-result",
            Exercised::ChangeNotice => "change-notice",
            Exercised::TransactionCommitted => "transaction-committed",
            Exercised::CommitRefused => "commit-refused",
            Exercised::CommitRead => "commit-read",
            Exercised::CommitUnknown => "commit-unknown",
            Exercised::CommitLate => "commit-late",
            Exercised::CommitLandedAfterRead => "commit-landed-after-read",
            Exercised::TransactionCrashed => "transaction-crashed",
            Exercised::TransactionPanicked => "transaction-panicked",
            Exercised::TransactionDropped => "transaction-dropped",
            Exercised::DuplicatePublish => "duplicate-publish",
            Exercised::AckedReplay => "acked-replay",
            Exercised::AckLost => "ack-lost",
            Exercised::AckWaitRedelivery => "ack-wait-redelivery",
            Exercised::AckWaitWhileRunning => "ack-wait-while-running",
            Exercised::Redelivered => "redelivered",
            Exercised::DeadLettered => "dead-lettered",
        }
    }
}

impl Class for Exercised {
    const ALL: &'static [Self] = &Exercised::ALL;
    const KIND: &'static str = "fault class";
    fn name(self) -> &'static str {
        Exercised::name(self)
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// How many times each [`Exercised`] class was reached.
pub type ExercisedCounts = Tally<Exercised>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_lists_parse_and_refuse_unknown_names() {
        let faults = Faults::parse_list("network,pause").unwrap();
        assert!(faults.has(FaultKind::Network) && faults.has(FaultKind::Pause));
        assert!(!faults.has(FaultKind::Crash));
        assert_eq!(Faults::parse_list("all").unwrap(), Faults::all());
        assert_eq!(Faults::parse_list("none").unwrap(), Faults::none());
        let err = Faults::parse_list("network,gremlins").unwrap_err();
        assert_eq!(err.given, "gremlins");
        assert!(err.to_string().contains("key-reuse"));
        assert!(!Faults::all().without(FaultKind::Skew).has(FaultKind::Skew));
        let abnormal = Faults::parse_list("abandon,panic,corrupt").unwrap();
        assert!(abnormal.has(FaultKind::Abandon) && abnormal.has(FaultKind::Corrupt));
        assert!(abnormal.has(FaultKind::Panic) && !abnormal.has(FaultKind::Outage));
        for kind in FaultKind::ALL {
            assert_eq!(kind.name().parse::<FaultKind>(), Ok(kind));
        }
    }
}
