//! What a run found: the violations the judge named, the causes of extra effects, the
//! answers clients got, and the run's history with its card statement.

use std::fmt;

use idem_check::{CauseCounts, Charge, History, Violation};
use idem_core::DeadLetterReason;

use crate::faults::ExercisedCounts;

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
    /// A transactional action's writes rolled back with its complete: nothing happened, and
    /// a retry runs it again.
    RolledBack,
    /// Whether a transactional action's writes committed could not be learned: they did
    /// with the record, or neither did.
    CommitUnknown,
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
            Response::RolledBack => f.write_str("RolledBackError"),
            Response::CommitUnknown => f.write_str("CommitUnknownError"),
        }
    }
}

/// Dead-lettered messages counted by reason (MODEL.md `C1`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadLetters([u64; DeadLetters::REASONS.len()]);

impl DeadLetters {
    /// Every reason a consumer dead-letters for, in the order summaries print them.
    pub const REASONS: [DeadLetterReason; 7] = [
        DeadLetterReason::NoKey,
        DeadLetterReason::InvalidKey,
        DeadLetterReason::KeyReuse,
        DeadLetterReason::CorruptRecord,
        DeadLetterReason::OutcomeUnknown,
        DeadLetterReason::Undecodable,
        DeadLetterReason::Exhausted,
    ];

    /// Counts one message dead-lettered for `reason` (a reason not listed is not counted).
    pub fn add(&mut self, reason: DeadLetterReason) {
        if let Some(i) = Self::REASONS.iter().position(|r| *r == reason) {
            self.0[i] += 1;
        }
    }

    /// How many were dead-lettered for `reason`.
    pub fn get(&self, reason: DeadLetterReason) -> u64 {
        Self::REASONS
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| self.0[i])
    }

    /// How many were dead-lettered.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }
}

/// Everything one run found.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// The seed (zero for scripted runs).
    pub seed: u64,
    /// Requests sent (attempts started, retries included).
    pub requests: u64,
    /// Effects (charges, and transactional writes committed) made.
    pub effects: u64,
    /// Of those, the transactional writes committed with their record.
    pub transactional_effects: u64,
    /// Extra effects, by the cause that allows each (transactional ones apart).
    pub extra: CauseCounts,
    /// Extra transactional effects, by cause: only `retention-expired` is allowed (`T1`).
    pub extra_transactional: CauseCounts,
    /// Extra effects at the run's provider, by cause (MODEL.md `D1`).
    pub extra_at_provider: CauseCounts,
    /// Extra calls the provider absorbed, by cause: answered with the effect of their
    /// downstream key (keyed), refused as stale or replaced by a newer holder's write (fenced).
    pub absorbed: CauseCounts,
    /// Stale writes at the run's provider: effects by a holder whose grant is older than
    /// that of a holder whose effect came before (MODEL.md `F1`).
    pub stale_at_provider: u64,
    /// What the broker and its consumers did (MODEL.md `C1`).
    pub broker: BrokerCounts,
    /// The rules of MODEL.md the run broke, as the judge found them.
    pub violations: Vec<Violation>,
    /// Fault and path classes reached.
    pub exercised: ExercisedCounts,
    /// Per client, the answer to each of its tries (`None`: none was given: the service
    /// crashed, or the caller of an attached try went away).
    pub responses: Vec<Vec<Option<Response>>>,
    /// Simulated events processed.
    pub events: u64,
    /// The event trace, when asked for.
    pub trace: Option<String>,
    /// The run as the judge read it (its times on the store's clock), with the card
    /// statement.
    pub history: History,
}

/// What a run's broker and its consumers did (MODEL.md `C1`), one run's or a summary's.
#[derive(Debug, Clone, Default)]
pub struct BrokerCounts {
    /// Messages the broker held (publications, duplicates included; MODEL.md `C1`).
    pub messages: u64,
    /// Deliveries of them (each a consumer's call).
    pub deliveries: u64,
    /// Effects under messages' keys (charges, and writes committed with the record).
    pub message_effects: u64,
    /// Of those, the writes committed with the record.
    pub transactional_message_effects: u64,
    /// Acks the consumers sent, lost ones included.
    pub acks: u64,
    /// Of those, acks lost on their way to the broker.
    pub acks_lost: u64,
    /// Redeliveries the consumers asked for (naks with the core's delay).
    pub redeliveries: u64,
    /// Deliveries the broker made again after an ack-wait ran out.
    pub ack_wait_redeliveries: u64,
    /// Messages dead-lettered, by reason.
    pub dead_letters: DeadLetters,
    /// Of [`extra`](RunReport::extra), the extra effects under messages' keys, by cause.
    pub extra_messages: CauseCounts,
    /// Of [`extra_transactional`](RunReport::extra_transactional), those under messages' keys.
    pub extra_transactional_messages: CauseCounts,
}

impl BrokerCounts {
    /// Adds another run's counts.
    pub fn merge(&mut self, other: &Self) {
        self.messages += other.messages;
        self.deliveries += other.deliveries;
        self.message_effects += other.message_effects;
        self.transactional_message_effects += other.transactional_message_effects;
        self.acks += other.acks;
        self.acks_lost += other.acks_lost;
        self.redeliveries += other.redeliveries;
        self.ack_wait_redeliveries += other.ack_wait_redeliveries;
        self.dead_letters.merge(&other.dead_letters);
        self.extra_messages.merge(&other.extra_messages);
        self.extra_transactional_messages
            .merge(&other.extra_transactional_messages);
    }
}

impl RunReport {
    /// The card statement: every charge, in order (`at` on the store's clock, `by` the
    /// worker).
    pub fn charges(&self) -> &[Charge<usize>] {
        self.history.statement.lines()
    }
}
