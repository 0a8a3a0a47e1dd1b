//! What a message consumer does with a delivery once the message's call has ended (MODEL.md,
//! "Consumers"): acknowledge it, have the broker deliver it again after a delay, or
//! dead-letter it with a reason.
//!
//! Brokers deliver at least once: a consumer that crashed before its ack, an ack lost with its
//! connection, an ack deadline that ran out under a slow handler, a producer that published
//! twice. Under idem each delivery of a message is a call under the message's key, and the
//! broker is told only what the record says: a message is acknowledged once its effect is
//! recorded (`C1`), never before, so a delivery whose call did not end in a record is
//! delivered again, and a redelivery of a recorded message is acknowledged without running.
//!
//! This is the decision alone, broker-neutral and without a clock: the consumer names how
//! the call ended ([`CallEnd`]) and which delivery of the message this was, and
//! [`Redelivery::dispose`] answers. The delay before a redelivery is the attempt's own
//! backoff (doubling, capped, with seeded jitter), so every timer stays the core's.

use std::time::Duration;

use crate::attempt::backoff::{self, SplitMix64};
use crate::attempt::{Abandonment, Outcome};
use crate::record::StoredResult;

/// How a delivery's call ended, as a consumer classifies the driver's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallEnd {
    /// The message's effect is recorded: its action ran now and completed, or it ran before
    /// and this delivery was a replay, or it completed with a result too large to keep.
    Recorded,
    /// Nothing ran to completion and nothing is recorded, and another delivery may succeed:
    /// the action failed and its key was released, the store could not be reached, the
    /// consumer is stopping or full, a transaction rolled back, a commit's outcome is
    /// unknown (its retry replays or runs, never twice).
    Retryable,
    /// Another delivery of the same message holds its key and is running: this one must not
    /// run beside it, and is not a failure.
    InProgress,
    /// The message can never succeed as it is delivered.
    Refused(DeadLetterReason),
}

impl CallEnd {
    /// How a delivery's call ended, from the attempt machine's own [`Outcome`]: for a
    /// consumer that drives the attempt itself (the simulation does) rather than through the
    /// driver, whose answer `idem_consumer::call_end` classifies the same way.
    ///
    /// An execution is recorded, whatever became of its complete: its effect happened, and
    /// delivering it again would run it again (a complete refused after a lapsed lease, or
    /// a run that failed open, is `I7`'s to report, not the broker's to repeat). A replay of
    /// a result, or of a result not stored, is recorded; a replay of a panic, or a panic
    /// now, or an action dropped while it ran, is refused as "outcome unknown" (rule 11). A
    /// call that ran nothing to a record (a failure, the store down under `FailClosed`, a
    /// rollback, a commit whose outcome is unknown, a call abandoned before or after its
    /// action ran) is retryable: the record decides the next delivery.
    pub fn of_outcome(outcome: &Outcome) -> CallEnd {
        match outcome {
            Outcome::Executed(_) => CallEnd::Recorded,
            Outcome::Replayed {
                result: StoredResult::Value(_) | StoredResult::NotStored,
            } => CallEnd::Recorded,
            Outcome::Replayed {
                result: StoredResult::Panicked,
            }
            | Outcome::Panicked(_)
            // Dropped while it ran: its effect may have happened, and the key is left to its
            // lease (`I7`'s abandoned mid-action). Delivering it again would run it again
            // once the lease ends, so it is an unknown outcome, as a panic is (rule 11).
            | Outcome::Abandoned(Abandonment::ActionDropped) => {
                CallEnd::Refused(DeadLetterReason::OutcomeUnknown)
            }
            Outcome::InProgress => CallEnd::InProgress,
            Outcome::KeyReuse { .. } => CallEnd::Refused(DeadLetterReason::KeyReuse),
            Outcome::CorruptRecord => CallEnd::Refused(DeadLetterReason::CorruptRecord),
            Outcome::ActionFailed { .. }
            | Outcome::StoreUnavailable
            | Outcome::RolledBack { .. }
            | Outcome::CommitUnknown
            | Outcome::Abandoned(Abandonment::Settled | Abandonment::LeftToLease) => {
                CallEnd::Retryable
            }
        }
    }
}

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// The message carries no key (no message id, and the key function found none): it is
    /// never run unprotected by accident.
    NoKey,
    /// Its key is not a valid idempotency key (`I12`: never trimmed or rewritten).
    InvalidKey,
    /// Its key was used by a message with another body (`I4`).
    KeyReuse,
    /// The key's record is not one idem wrote: left for a person to look at.
    CorruptRecord,
    /// An earlier delivery's action panicked or ended with its effect unknown: whether the
    /// effect happened is unknown, so it is not run again (rule 11).
    OutcomeUnknown,
    /// The recorded result of the message does not decode into the consumer's type.
    Undecodable,
    /// Every delivery the policy allows ended [`CallEnd::Retryable`].
    Exhausted,
}

impl DeadLetterReason {
    /// The reason's name, as a header value on the dead-lettered message and in logs.
    pub fn name(self) -> &'static str {
        match self {
            DeadLetterReason::NoKey => "no-key",
            DeadLetterReason::InvalidKey => "invalid-key",
            DeadLetterReason::KeyReuse => "key-reuse",
            DeadLetterReason::CorruptRecord => "corrupt-record",
            DeadLetterReason::OutcomeUnknown => "outcome-unknown",
            DeadLetterReason::Undecodable => "undecodable",
            DeadLetterReason::Exhausted => "exhausted",
        }
    }
}

/// What to tell the broker about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Acknowledge: the message's effect is recorded.
    Ack,
    /// Deliver it again, not before `after` (AMQP: `nack` with requeue once the delay has
    /// passed; JetStream: `nak` with this delay).
    Redeliver {
        /// How long to wait before the next delivery.
        after: Duration,
    },
    /// Take it out of the queue with a reason (AMQP: `reject` without requeue, to the
    /// queue's dead-letter exchange; JetStream: `term`).
    DeadLetter(DeadLetterReason),
}

/// The policy for messages whose call did not end in a record: how many deliveries a message
/// gets, and how long each waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redelivery {
    max_deliveries: u32,
    initial: Duration,
    cap: Duration,
}

/// A redelivery policy that was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RedeliveryError {
    /// A message must be delivered at least once.
    #[error("max_deliveries must be at least 1")]
    NoDelivery,
    /// The first delay is above the largest.
    #[error("the first redelivery delay {initial:?} is above the largest {cap:?}")]
    InitialAboveCap {
        /// The first delay.
        initial: Duration,
        /// The largest delay.
        cap: Duration,
    },
}

impl Default for Redelivery {
    /// Five deliveries, the delays doubling from 1 s to at most 30 s.
    fn default() -> Self {
        Self {
            max_deliveries: 5,
            initial: Duration::from_secs(1),
            cap: Duration::from_secs(30),
        }
    }
}

impl Redelivery {
    /// At most `max_deliveries` deliveries of a message whose calls end
    /// [`CallEnd::Retryable`], the delay before each redelivery doubling from `initial` up to
    /// `cap`, with half of it drawn as jitter.
    pub fn new(
        max_deliveries: u32,
        initial: Duration,
        cap: Duration,
    ) -> Result<Self, RedeliveryError> {
        if max_deliveries == 0 {
            return Err(RedeliveryError::NoDelivery);
        }
        if initial > cap {
            return Err(RedeliveryError::InitialAboveCap { initial, cap });
        }
        Ok(Self {
            max_deliveries,
            initial,
            cap,
        })
    }

    /// The most deliveries a message gets.
    pub fn max_deliveries(&self) -> u32 {
        self.max_deliveries
    }

    /// What to do with delivery number `delivery` (1 for the first) of a message whose call
    /// ended `end`. `jitter_seed` draws the delay's jitter (the same seed, the same delay).
    ///
    /// A recorded message is acknowledged (`C1`); a refused one is dead-lettered at once; one
    /// in progress elsewhere is delivered again after a delay, whatever its count, since its
    /// holder is not failing (its lease bounds the wait); a retryable one is delivered again
    /// until its `max_deliveries`-th delivery, then dead-lettered as
    /// [`Exhausted`](DeadLetterReason::Exhausted).
    pub fn dispose(&self, end: CallEnd, delivery: u32, jitter_seed: u64) -> Disposition {
        let retry = delivery.saturating_sub(1);
        match end {
            CallEnd::Recorded => Disposition::Ack,
            CallEnd::Refused(reason) => Disposition::DeadLetter(reason),
            CallEnd::InProgress => Disposition::Redeliver {
                after: self.delay(retry, jitter_seed),
            },
            CallEnd::Retryable if delivery >= self.max_deliveries => {
                Disposition::DeadLetter(DeadLetterReason::Exhausted)
            }
            CallEnd::Retryable => Disposition::Redeliver {
                after: self.delay(retry, jitter_seed),
            },
        }
    }

    fn delay(&self, retry: u32, jitter_seed: u64) -> Duration {
        backoff::delay(self.initial, self.cap, retry, &mut SplitMix64(jitter_seed))
    }
}
