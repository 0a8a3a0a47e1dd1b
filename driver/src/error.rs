//! The one error a call to the coordinator can end in, and its HTTP mapping.

use idem_core::{Fingerprint, Key, KeyError, Operation, OperationError, ProtocolError};
use thiserror::Error;

use crate::store::{BoxError, StoreError};

/// Why a call to the [`Coordinator`](crate::Coordinator) returned no value.
///
/// Every case a caller must handle is one variant, and [`http_status`](Self::http_status)
/// says what an HTTP service answers for it:
///
/// | variant | status | retry with the same key? | meaning for the client |
/// |---|---|---|---|
/// | [`InvalidKey`](Self::InvalidKey), [`InvalidOperation`](Self::InvalidOperation) | 400 | no | fix the request; nothing was stored or run |
/// | [`InProgress`](Self::InProgress) | 409 | yes, later | an identical request is running |
/// | [`KeyReuse`](Self::KeyReuse) | 422 | no | the key belongs to another request (`I4`); use a new key |
/// | [`StoreUnavailable`](Self::StoreUnavailable), [`RuntimeShutdown`](Self::RuntimeShutdown), [`ShuttingDown`](Self::ShuttingDown), [`Overloaded`](Self::Overloaded) | 503 | yes, later | nothing ran (`FailClosed`, a stop, too many actions), or the action was cut by a stop and its key left to its lease |
/// | [`RolledBack`](Self::RolledBack), [`CommitUnknown`](Self::CommitUnknown) | 503 | yes | a transactional call committed nothing, or committed everything with its record |
/// | [`ResultNotStored`](Self::ResultNotStored), [`OutcomeUnknown`](Self::OutcomeUnknown), [`CorruptRecord`](Self::CorruptRecord), [`Decode`](Self::Decode), [`Protocol`](Self::Protocol) | 500 | no | the request ran once, or may have, or the key's record is damaged; a retry will not run it again |
/// | [`Action`](Self::Action) | the caller's | yes | the action's own error, unchanged; the reservation was released (`I5`) |
/// | [`ActionUnknown`](Self::ActionUnknown) | the caller's | no | the action's own error, unchanged; its effect is unknown, so the key is recorded as such (rule 11) |
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error<E> {
    /// The idempotency key was refused (never trimmed or rewritten, `I12`).
    #[error("invalid idempotency key: {0}")]
    InvalidKey(#[from] KeyError),
    /// The operation name was refused (`I12`).
    #[error("invalid operation: {0}")]
    InvalidOperation(#[from] OperationError),
    /// An identical request holds the key: at once under policy `Raise`, or when the
    /// waiter's deadline passed under `Wait`.
    #[error("an identical request with this idempotency key is in progress")]
    InProgress,
    /// The key is held or completed under another fingerprint (`I4`). Both fingerprints are
    /// kept for the service's own logs; neither is printed, so that showing the error to a
    /// client never reveals what another request was.
    #[error("the idempotency key was already used for another request")]
    KeyReuse {
        /// The fingerprint the key belongs to.
        stored: Fingerprint,
        /// This request's fingerprint.
        given: Fingerprint,
    },
    /// The store could not be reached and the policy is `FailClosed`: nothing ran.
    #[error("idempotency store unavailable: {0}")]
    StoreUnavailable(#[source] StoreError),
    /// The key holds a value that is not a record this store wrote (another type, garbage
    /// bytes, an unknown encoding): nothing ran under either store-failure policy, nothing
    /// was retried, and the value was left as it is for a person to look at (rule 11).
    #[error("the record of {operation} {key} is not one idem wrote: {detail}")]
    CorruptRecord {
        /// The operation.
        operation: Operation,
        /// The idempotency key.
        key: Key,
        /// What the store found wrong with the value.
        detail: String,
    },
    /// An identical request completed, but its result was not stored (over the body limit,
    /// or a value the serializer refused): it is not run again, and there is nothing to
    /// replay.
    #[error("an identical request completed, but its result was not stored")]
    ResultNotStored,
    /// An identical request's action panicked: whether its effect happened is unknown, so it
    /// is not run again under this key (rule 11).
    #[error("an identical request ended abnormally; whether its effect happened is unknown")]
    OutcomeUnknown,
    /// The stored result does not decode into the type asked for (the type changed since
    /// it was stored, or the operation name is shared by two result types).
    #[error("the stored result does not decode into the requested type: {0}")]
    Decode(#[source] BoxError),
    /// A transactional call's writes were rolled back, definitely: its complete was refused
    /// inside its transaction (its lease ran out and another request took the key over), a
    /// read after its commit's reply was lost found the key still this call's own
    /// reservation, or the transaction went with a panic or a dropped action. Nothing
    /// happened; a retry replays the other request's result or runs the action. A commit
    /// whose fate is not certain is [`CommitUnknown`](Self::CommitUnknown), never this.
    #[error("the action's writes were rolled back; nothing was committed")]
    RolledBack,
    /// A transactional call whose commit's outcome could not be learned: its reply was lost
    /// and the record could not be read, or the read found no record or another request's
    /// (an insert of a record the sweeper had removed may still be committing). Its writes
    /// and its record committed together, or neither did. A retry replays or runs, never
    /// twice; do not compensate or re-issue under a new key on this answer.
    #[error("the commit's outcome is unknown; a retry is safe")]
    CommitUnknown,
    /// The call's detached action was cut mid-run, by the tokio runtime's end or by
    /// [`Coordinator::shutdown`](crate::Coordinator::shutdown)'s deadline: its effect may have
    /// begun, so its key is left to its lease (never released); a retry after the lease
    /// replays or runs it. Also a detached call polled outside any tokio runtime, whose
    /// action is then never started (it could not outlive its caller): nothing ran, and its
    /// reservation is released, or left to its lease where no runtime can send the release.
    #[error("the runtime shut down before the call ended")]
    RuntimeShutdown,
    /// The coordinator is stopping ([`Coordinator::shutdown`](crate::Coordinator::shutdown)):
    /// the call was refused before its action started; nothing ran.
    #[error("the service is shutting down; nothing ran")]
    ShuttingDown,
    /// As many detached actions as the coordinator allows were running
    /// ([`Coordinator::with_max_detached`](crate::Coordinator::with_max_detached)): the
    /// action was not started and its reservation was released; nothing ran.
    #[error("too many actions running; nothing ran")]
    Overloaded,
    /// The driver fed the attempt machine an input it was not waiting for: a bug in this
    /// crate, reported instead of a panic.
    #[error("internal protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// The action's own error, unchanged. The reservation was released so that a retry
    /// runs the action again (`I5`).
    #[error("the action failed: {0}")]
    Action(#[source] E),
    /// The action's own error, unchanged, from an action that ended
    /// [`Ending::Unknown`](crate::Ending::Unknown): it failed with its effect unknown, so
    /// the key is recorded as "outcome unknown", as for a panic (rule 11), and an identical
    /// retry gets [`OutcomeUnknown`](Self::OutcomeUnknown) rather than a second run.
    #[error("the action failed, its effect unknown: {0}")]
    ActionUnknown(#[source] E),
}

impl<E> Error<E> {
    /// The HTTP status a service answers with, per the table above; `None` for
    /// [`Action`](Self::Action), whose mapping is the caller's.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Error::InvalidKey(_) | Error::InvalidOperation(_) => Some(400),
            Error::InProgress => Some(409),
            Error::KeyReuse { .. } => Some(422),
            Error::StoreUnavailable(_)
            | Error::RuntimeShutdown
            | Error::ShuttingDown
            | Error::Overloaded
            | Error::RolledBack
            | Error::CommitUnknown => Some(503),
            Error::ResultNotStored
            | Error::OutcomeUnknown
            | Error::CorruptRecord { .. }
            | Error::Decode(_)
            | Error::Protocol(_) => Some(500),
            Error::Action(_) | Error::ActionUnknown(_) => None,
        }
    }

    /// Whether the same request may succeed if retried later with the same key: the
    /// holder may have finished ([`InProgress`](Self::InProgress)), the store may be back
    /// ([`StoreUnavailable`](Self::StoreUnavailable),
    /// [`RuntimeShutdown`](Self::RuntimeShutdown)), or the action may succeed this time
    /// ([`Action`](Self::Action): failures are not cached). Never for a corrupt record or an
    /// unknown outcome: a retry gets the same answer.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::InProgress
                | Error::StoreUnavailable(_)
                | Error::RuntimeShutdown
                | Error::ShuttingDown
                | Error::Overloaded
                | Error::RolledBack
                | Error::CommitUnknown
                | Error::Action(_)
        )
    }

    /// The action's own error, if that is what this is: [`Action`](Self::Action) or
    /// [`ActionUnknown`](Self::ActionUnknown).
    pub fn into_action(self) -> Option<E> {
        match self {
            Error::Action(error) | Error::ActionUnknown(error) => Some(error),
            _ => None,
        }
    }
}
