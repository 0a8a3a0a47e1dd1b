//! What the attempt machine hands its driver: the next [`Step`], and how the attempt ended.

use thiserror::Error;

use crate::Fingerprint;
use crate::record::{Body, Command, Refusal, StoredResult};
use crate::time::Timestamp;

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Step {
    /// Issue `command` to the store, for the attempt's operation and key. Feed the reply to
    /// [`Attempt::handle_reply`](super::Attempt::handle_reply), a failure whose effect is
    /// unknown (timeout, dropped connection) to
    /// [`handle_store_error`](super::Attempt::handle_store_error), and a value the store
    /// cannot decode to [`handle_corrupt_record`](super::Attempt::handle_corrupt_record).
    ///
    /// A reply that has not come by `reply_by` (caller's clock) will not be waited for: the
    /// machine counts the command as failed with its effect unknown at the first
    /// [`poll`](super::Attempt::poll) at or after that instant. A driver enforces the
    /// deadline by giving up on the command then; it never chooses a deadline of its own
    /// (rule 12).
    Send {
        /// The command.
        command: Command,
        /// The instant after which its reply is no longer awaited.
        reply_by: Timestamp,
    },
    /// Start the action. Feed its result to
    /// [`handle_action_result`](super::Attempt::handle_action_result); keep polling while it
    /// runs, for renewals.
    Run,
    /// Nothing to do until `until` (on the caller's clock), or until an awaited reply or
    /// action result arrives; `None` means only an input can move the machine.
    Wait {
        /// The next instant at which the machine has work of its own.
        until: Option<Timestamp>,
    },
    /// The attempt is over.
    Done(Outcome),
}

/// How the action ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionResult {
    /// The action succeeded; this is its encoded result.
    Succeeded(Body),
    /// The action failed; the failure is the driver's to return, and is never recorded
    /// (`I5`).
    Failed,
    /// The action succeeded, but its result cannot be encoded for the store (a value the
    /// driver's serializer refuses). The effect happened, so the key is not given back: the
    /// record is completed without a body, as for an oversized result (rule 9), and a retry
    /// gets "result not stored" instead of a second effect.
    Unrecordable,
    /// The action panicked, before or after its effect (or its value panicked while being
    /// encoded). Whether the effect happened is unknown, so the key is never given back: the
    /// record is completed as [`StoredResult::Panicked`], and a retry gets "outcome unknown"
    /// instead of a second effect (rule 11).
    Panicked,
}

/// How the attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The action ran in this attempt and succeeded.
    Executed(Execution),
    /// The action ran in this attempt and failed; the reservation was given up so that a
    /// retry may run it again (`I5`).
    ActionFailed {
        /// Whether nothing of this attempt's is left under the key: the store confirmed the
        /// release, or the key was no longer this attempt's. When not, the key frees itself
        /// when the lease runs out (`I6`).
        released: bool,
    },
    /// The action ran in this attempt and panicked. Its effect is unknown, so the record was
    /// completed as [`StoredResult::Panicked`] (see the execution's `record` for whether
    /// that landed); a retry is answered "outcome unknown", never run again.
    Panicked(Execution),
    /// An identical request completed earlier: what its record holds, not run again.
    Replayed {
        /// The stored result.
        result: StoredResult,
    },
    /// The key belongs to a request with another fingerprint (HTTP 422).
    KeyReuse {
        /// The fingerprint the key is held or completed under.
        stored: Fingerprint,
        /// This request's fingerprint.
        given: Fingerprint,
    },
    /// An identical request holds the key (HTTP 409): at once under `Raise`, or after the
    /// waiter deadline under `Wait`.
    InProgress,
    /// The store could not be reached and the policy is `FailClosed` (HTTP 503); nothing ran.
    StoreUnavailable,
    /// The key holds a value that is not a record (the store said so): nothing ran, under
    /// either store-failure policy, and nothing was retried or written. The store answered;
    /// it was not unavailable (rule 11).
    CorruptRecord,
    /// The driver abandoned the attempt ([`Attempt::abandon`](super::Attempt::abandon)) and
    /// settled what it could.
    Abandoned(Abandonment),
    /// A transactional action ([`Attempt::in_transaction`](super::Attempt::in_transaction)):
    /// its writes were rolled back, definitely: its complete was refused inside the
    /// transaction (its lease ran out and another caller took the key over), a read after
    /// its commit's reply was lost found the key still this attempt's own reservation, or
    /// the transaction went with a panic or a dropped action. Nothing happened; a retry runs
    /// the action again. A commit whose fate is not known for certain is
    /// [`Outcome::CommitUnknown`], never this.
    RolledBack {
        /// Whether nothing of this attempt's is left under the key (see
        /// [`Outcome::ActionFailed`]).
        released: bool,
    },
    /// A transactional action whose commit's outcome could not be learned: its reply was
    /// lost and the record could not be read, or the read found no record or another
    /// owner's (a commit still in progress may land after such a read). Its writes and its
    /// record committed together, or neither did. Either way there is one effect at most: a
    /// retry replays the result, or runs the action for the first time.
    CommitUnknown,
}

/// What an abandoned attempt left in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Abandonment {
    /// Nothing of this attempt's is left: it had sent no reserve, its reserve was answered
    /// without a grant, or the reservation it held before its action started was released.
    /// The action never ran.
    Settled,
    /// A reservation that may have landed could not be released (every release failed, or
    /// went unanswered): the key frees itself when its lease ends (`I6`). The action never
    /// ran.
    LeftToLease,
    /// The action was dropped while it ran: its effect may have happened, so the key is
    /// left held until its lease ends, exactly as after a crash, and a later request then
    /// takes it over and may run the action again (`I7`'s "abandoned mid-action"). Drivers
    /// count and log it; a driver that can keep the action running (the tokio driver's
    /// default, detached mode) never abandons it.
    ActionDropped,
}

/// What is known about an action that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// Whether the action ran under a reservation or unprotected.
    pub protection: Protection,
    /// Whether its result is recorded.
    pub record: Recording,
    /// Whether the reservation lapsed while the action ran (a renewal was refused, or the
    /// complete found the lease run out). Another caller may then have run the action too:
    /// that is the one exception to `I7` besides fail-open.
    pub lease_lost: bool,
}

/// Whether the action ran under a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// The key was reserved before the action ran.
    Reserved,
    /// The store could not be reached and the policy is `FailOpen`: the action ran without
    /// a reservation.
    FailedOpen,
}

/// Whether an executed result was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// The result is recorded and identical requests replay it (for a panicked action: the
    /// record says "outcome unknown").
    Stored,
    /// The result was over the size limit, or could not be encoded: the record is completed
    /// without a body, so identical requests get "result not stored" instead of a second
    /// effect.
    StoredWithoutBody,
    /// The store refused the complete: the key belongs to another owner now.
    Refused(Refusal),
    /// The complete failed every retry: the result may or may not be recorded.
    Unknown,
    /// The key holds a value that is not a record: nothing was recorded, and the value was
    /// left as it is. Identical requests are answered "corrupt record", never run.
    CorruptRecord,
}

/// The state of the attempt's reservation, as the machine knows it at an instant of the
/// caller's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseState {
    /// No action runs under this attempt (before the reserve, or after the action).
    NotRunning,
    /// The lease is confirmed to last past now.
    Held,
    /// The last confirmed lease has run out on the caller's clock and no renewal has been
    /// confirmed since (the store is slow or unreachable): the key may have been taken over.
    Unconfirmed,
    /// The store refused a renewal: the key is lost, and another caller may run the action
    /// too (`I7`'s exception). An action that can still stop its effect should.
    Lost,
    /// The store could not be reached and the policy is `FailOpen`: the action runs without
    /// a reservation.
    Unprotected,
}

/// An input arrived that the machine was not waiting for; it was ignored. A driver bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A reply or store error arrived with no command outstanding (or after the command's
    /// reply deadline, when the machine had stopped waiting for it).
    #[error("a store reply arrived, but no command is outstanding")]
    NoCommandOutstanding,
    /// An action result arrived, but the action was not running.
    #[error("an action result arrived, but no action is running")]
    ActionNotRunning,
}
