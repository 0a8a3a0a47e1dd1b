//! The one error a call to the coordinator can end in, and its HTTP mapping.

use idem_core::{Fingerprint, KeyError, OperationError, OptionsError, ProtocolError};
use thiserror::Error;

use crate::store::StoreError;

/// Why [`Coordinator::execute`](crate::Coordinator::execute) returned no value.
///
/// Every case a caller must handle is one variant, and [`http_status`](Self::http_status)
/// says what an HTTP service answers for it:
///
/// | variant | status | meaning for the client |
/// |---|---|---|
/// | [`InvalidKey`](Self::InvalidKey), [`InvalidOperation`](Self::InvalidOperation) | 400 | fix the request; nothing was stored or run |
/// | [`InProgress`](Self::InProgress) | 409 | an identical request is running; retry later |
/// | [`KeyReuse`](Self::KeyReuse) | 422 | the key belongs to another request (`I4`); use a new key |
/// | [`StoreUnavailable`](Self::StoreUnavailable) | 503 | nothing ran (`FailClosed`); retry later |
/// | [`ResultNotStored`](Self::ResultNotStored), [`Decode`](Self::Decode), [`InvalidOptions`](Self::InvalidOptions), [`Protocol`](Self::Protocol) | 500 | the request ran once, or the service is misconfigured; a retry will not run it again |
/// | [`Action`](Self::Action) | the caller's | the action's own error, unchanged; the reservation was released (`I5`) |
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error<E> {
    /// The idempotency key was refused (never trimmed or rewritten, `I12`).
    #[error("invalid idempotency key: {0}")]
    InvalidKey(#[from] KeyError),
    /// The operation name was refused (`I12`).
    #[error("invalid operation: {0}")]
    InvalidOperation(#[from] OperationError),
    /// Options broke one of their rules. Returned when building a coordinator from an
    /// [`OptionsBuilder`](idem_core::OptionsBuilder), never by a call.
    #[error("invalid options: {0}")]
    InvalidOptions(#[from] OptionsError),
    /// An identical request holds the key: at once under policy `Raise`, or when the
    /// waiter's deadline passed under `Wait`.
    #[error("an identical request with this idempotency key is in progress")]
    InProgress,
    /// The key is held or completed under another fingerprint (`I4`).
    #[error("idempotency key reused for another request (stored {stored}, given {given})")]
    KeyReuse {
        /// The fingerprint the key belongs to.
        stored: Fingerprint,
        /// This request's fingerprint.
        given: Fingerprint,
    },
    /// The store could not be reached and the policy is `FailClosed`: nothing ran.
    #[error("idempotency store unavailable: {0}")]
    StoreUnavailable(#[source] StoreError),
    /// An identical request completed, but its result was not stored (over the body limit,
    /// or a value the serializer refused): it is not run again, and there is nothing to
    /// replay.
    #[error("an identical request completed, but its result was not stored")]
    ResultNotStored,
    /// The stored result does not decode into the type asked for (the type changed since
    /// it was stored, or the operation name is shared by two result types).
    #[error("the stored result does not decode into the requested type: {0}")]
    Decode(#[source] serde_json::Error),
    /// The driver fed the attempt machine an input it was not waiting for: a bug in this
    /// crate, reported instead of a panic.
    #[error("internal protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// The action's own error, unchanged. The reservation was released so that a retry
    /// runs the action again (`I5`).
    #[error("the action failed: {0}")]
    Action(#[source] E),
}

impl<E> Error<E> {
    /// The HTTP status a service answers with, per the table above; `None` for
    /// [`Action`](Self::Action), whose mapping is the caller's.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Error::InvalidKey(_) | Error::InvalidOperation(_) => Some(400),
            Error::InProgress => Some(409),
            Error::KeyReuse { .. } => Some(422),
            Error::StoreUnavailable(_) => Some(503),
            Error::ResultNotStored
            | Error::Decode(_)
            | Error::InvalidOptions(_)
            | Error::Protocol(_) => Some(500),
            Error::Action(_) => None,
        }
    }

    /// Whether the same request may succeed if retried later with the same key: the
    /// holder may have finished ([`InProgress`](Self::InProgress)), the store may be back
    /// ([`StoreUnavailable`](Self::StoreUnavailable)), or the action may succeed this time
    /// ([`Action`](Self::Action): failures are not cached).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::InProgress | Error::StoreUnavailable(_) | Error::Action(_)
        )
    }

    /// The action's error, if that is what this is.
    pub fn into_action(self) -> Option<E> {
        match self {
            Error::Action(error) => Some(error),
            _ => None,
        }
    }
}
