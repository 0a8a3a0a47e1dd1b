//! How a delivery's call ended, from the driver's answer: the input of the core's decision
//! ([`idem_core::Redelivery::dispose`]).

use idem::{Answer, Error, Provenance};
use idem_core::{CallEnd, DeadLetterReason};

/// The [`CallEnd`] of a delivery whose call answered `result`.
pub fn call_end<T, E>(result: &Result<Answer<T>, Error<E>>) -> CallEnd {
    match result {
        Ok(_) => CallEnd::Recorded,
        Err(error) => match error {
            // Completed, its result too large to keep: the effect is recorded as done.
            Error::ResultNotStored => CallEnd::Recorded,
            Error::InProgress => CallEnd::InProgress,
            Error::Action(_)
            | Error::StoreUnavailable(_)
            | Error::RolledBack
            | Error::CommitUnknown
            | Error::RuntimeShutdown
            | Error::ShuttingDown
            | Error::Overloaded => CallEnd::Retryable,
            Error::InvalidKey(_) | Error::InvalidOperation(_) => {
                CallEnd::Refused(DeadLetterReason::InvalidKey)
            }
            Error::KeyReuse { .. } => CallEnd::Refused(DeadLetterReason::KeyReuse),
            Error::CorruptRecord { .. } => CallEnd::Refused(DeadLetterReason::CorruptRecord),
            Error::OutcomeUnknown | Error::ActionUnknown(_) => {
                CallEnd::Refused(DeadLetterReason::OutcomeUnknown)
            }
            Error::Decode(_) => CallEnd::Refused(DeadLetterReason::Undecodable),
            // A bug of the driver's, reported rather than panicked: the action may have run,
            // and a person should look.
            Error::Protocol(_) => CallEnd::Refused(DeadLetterReason::OutcomeUnknown),
            // An answer this crate does not know yet: delivered again, where the record
            // decides (a replay, or a run under the key), until the deliveries are spent.
            _ => CallEnd::Retryable,
        },
    }
}

/// Whether the call ran the action now (rather than replaying an earlier delivery's result).
pub(crate) fn executed<T, E>(result: &Result<Answer<T>, Error<E>>) -> bool {
    matches!(result, Ok(answer) if !matches!(answer.provenance, Provenance::Replayed))
}
