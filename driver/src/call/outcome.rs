//! The end of a call: the attempt's outcome turned into the typed result (the value, the
//! action's error, a refusal, the panic to resume), each counted and logged; an
//! execution's provenance; a replay decoded from the stored result.

use idem_core::record::{CommandKind, StoredResult};
use idem_core::{Execution, Outcome, Protection, ProtocolError, Timestamp};

use super::{Call, Ended};
use crate::answer::{Answer, Provenance};
use crate::codec::Codec;
use crate::error::Error;
use crate::metrics::Counter;
use crate::store::{Store, StoreError};

impl<S: Store, C: Codec<T>, T, E> Call<S, C, T, E> {
    /// Turns the attempt's outcome into the call's result.
    pub(super) fn conclude(&mut self, outcome: Outcome, now: Timestamp) -> Ended<T, E> {
        if let Outcome::Executed(execution) | Outcome::Panicked(execution) = &outcome {
            self.completed(execution, now);
        }
        let metrics = &self.metrics;
        let (operation, key) = (&self.operation, &self.key);
        let answer = match outcome {
            Outcome::Executed(execution) => {
                metrics.count(Counter::Executed);
                let provenance = self.provenance(execution);
                tracing::debug!(%operation, %key, ?provenance, "executed");
                match self.value.take() {
                    Some(value) => Ok(Answer {
                        value,
                        provenance,
                        waited: self.waited,
                    }),
                    None => Err(ProtocolError::ActionNotRunning.into()),
                }
            }
            Outcome::Panicked(execution) if self.unknown.is_some() => {
                metrics.count(Counter::ActionUnknown);
                let _ = self.provenance(execution);
                tracing::warn!(%operation, %key, record = ?execution.record, "the action's effect is unknown; recorded as such");
                match self.unknown.take() {
                    Some(error) => Err(Error::ActionUnknown(error)),
                    None => Err(ProtocolError::ActionNotRunning.into()),
                }
            }
            Outcome::Panicked(execution) => {
                metrics.count(Counter::Panicked);
                let _ = self.provenance(execution);
                tracing::warn!(%operation, %key, record = ?execution.record, "the panic is recorded; resuming it");
                match self.panic.take() {
                    Some(payload) => return Ended::Panic(payload),
                    None => Err(ProtocolError::ActionNotRunning.into()),
                }
            }
            Outcome::ActionFailed { released } => {
                if let Some(payload) = self.panic.take() {
                    // A transactional action's panic rolled its writes back: released.
                    metrics.count(Counter::Panicked);
                    return Ended::Panic(payload);
                }
                metrics.count(Counter::ActionFailed);
                tracing::debug!(%operation, %key, released, "the action failed; key given back");
                match self.failure.take() {
                    Some(failure) => Err(Error::Action(failure)),
                    None => Err(ProtocolError::ActionNotRunning.into()),
                }
            }
            Outcome::RolledBack { released } => {
                metrics.count(Counter::RolledBack);
                tracing::warn!(
                    %operation,
                    %key,
                    released,
                    "the action's writes were rolled back with its record: the key was no \
                     longer this call's, or the commit failed"
                );
                Err(Error::RolledBack)
            }
            Outcome::CommitUnknown => {
                metrics.count(Counter::CommitUnknown);
                tracing::warn!(%operation, %key, "the commit's outcome is unknown");
                Err(Error::CommitUnknown)
            }
            Outcome::Replayed { result } => self.replay(result),
            Outcome::KeyReuse { stored, given } => {
                metrics.count(Counter::KeyReuse);
                tracing::debug!(%operation, %key, %stored, %given, "refused: key reuse");
                Err(Error::KeyReuse { stored, given })
            }
            Outcome::InProgress => {
                metrics.count(Counter::InProgress);
                tracing::debug!(%operation, %key, "refused: in progress");
                Err(Error::InProgress)
            }
            Outcome::StoreUnavailable => {
                metrics.count(Counter::StoreUnavailable);
                tracing::warn!(%operation, %key, "refused: store unavailable (fail closed)");
                let error = self
                    .store_error
                    .take()
                    .unwrap_or_else(|| StoreError::Unavailable {
                        command: CommandKind::Reserve,
                        source: "no reply by the attempt's deadline".into(),
                    });
                Err(Error::StoreUnavailable(error))
            }
            Outcome::CorruptRecord => {
                metrics.count(Counter::CorruptRecord);
                Err(Error::CorruptRecord {
                    operation: operation.clone(),
                    key: key.clone(),
                    detail: self.corrupt.take().unwrap_or_default(),
                })
            }
            // Only a driver abandons; this one does so in its guard, after the call.
            Outcome::Abandoned(_) => Err(ProtocolError::ActionNotRunning.into()),
        };
        Ended::Answer(answer)
    }

    /// The provenance of an execution, counted.
    fn provenance(&self, execution: Execution) -> Provenance {
        let Execution {
            protection,
            record,
            lease_lost,
        } = execution;
        let (operation, key) = (&self.operation, &self.key);
        if record == idem_core::Recording::CorruptRecord {
            self.metrics.count(Counter::CorruptRecord);
        }
        if lease_lost {
            self.metrics.count(Counter::LeaseLost);
            tracing::warn!(%operation, %key, ?record, "executed, but the lease lapsed meanwhile");
        }
        match protection {
            Protection::Reserved => Provenance::Executed {
                lease_lost,
                recording: record,
            },
            Protection::FailedOpen => {
                self.metrics.count(Counter::FailedOpen);
                tracing::warn!(%operation, %key, ?record, "executed unprotected: the store failed open");
                Provenance::ExecutedUnprotected { recording: record }
            }
        }
    }

    /// The answer to a replay of what an identical request's record holds.
    fn replay(&self, result: StoredResult) -> Result<Answer<T>, Error<E>> {
        let (metrics, operation, key) = (&self.metrics, &self.operation, &self.key);
        match result {
            StoredResult::Value(body) => match self.codec.decode(body.as_bytes()) {
                Ok(value) => {
                    metrics.count(Counter::Replayed);
                    tracing::debug!(%operation, %key, "replayed");
                    Ok(Answer {
                        value,
                        provenance: Provenance::Replayed,
                        waited: self.waited,
                    })
                }
                Err(error) => {
                    metrics.count(Counter::DecodeFailed);
                    tracing::warn!(%operation, %key, %error, "stored result does not decode");
                    Err(Error::Decode(error))
                }
            },
            StoredResult::NotStored => {
                metrics.count(Counter::ResultNotStored);
                tracing::debug!(%operation, %key, "completed earlier without a stored result");
                Err(Error::ResultNotStored)
            }
            StoredResult::Panicked => {
                metrics.count(Counter::OutcomeUnknown);
                tracing::warn!(%operation, %key, "an identical request panicked; not run again");
                Err(Error::OutcomeUnknown)
            }
        }
    }
}
