//! The state every caller of a run shares, behind the checker's one lock: the records of the
//! keys (the store), the provider (the card statement) and the history being written.
//!
//! One lock for all of it makes each store command, each charge and each outcome one atomic
//! step whose order the model checker chooses; the store's clock is read inside the lock, so
//! the history's times are the store's. A key can be made to hold a corrupt value (not a
//! record): the store then answers "corrupt" to every command on it and changes nothing.

use idem_core::record::{Command, Record, Reply};
use idem_core::{Fingerprint, Outcome, OwnerToken, Timestamp};

use crate::history::{AttemptId, Event, EventKind, History};
use crate::variant::Variant;

/// One line of the card statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    /// The key the charge was made under.
    pub key: usize,
    /// The charge id: the owner token of the attempt that ran the action.
    pub charge_id: OwnerToken,
    /// What the provider answered.
    pub body: Vec<u8>,
}

/// The downstream provider: it counts every effect, per key, with the charge id that made
/// it. It does not deduplicate: that is idem's job.
#[derive(Debug, Clone, Default)]
pub struct Provider {
    statement: Vec<Charge>,
}

impl Provider {
    /// Charges the card and returns the provider's answer.
    pub fn charge(&mut self, key: usize, charge_id: OwnerToken) -> Vec<u8> {
        let by = AttemptId::of_owner(charge_id)
            .map_or_else(|| charge_id.to_string(), |who| who.to_string());
        let body = format!("ch_{}_{by}", self.statement.len()).into_bytes();
        self.statement.push(Charge {
            key,
            charge_id,
            body: body.clone(),
        });
        body
    }

    /// How many times `key` was charged.
    pub fn count(&self, key: usize) -> usize {
        self.statement.iter().filter(|c| c.key == key).count()
    }

    /// Every charge, in order.
    pub fn statement(&self) -> &[Charge] {
        &self.statement
    }
}

/// How a store command is to fail, if it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// Applied and answered.
    Normal,
    /// Applied, but the reply is lost: the caller sees a store error at once (a connection
    /// that dropped after the server ran the command).
    ReplyLost,
    /// Not applied: the store could not be reached, and the caller sees an error at once.
    Unreachable,
    /// The store never answers: the caller waits until the attempt's reply deadline and the
    /// attempt gives the command up itself. When `applied`, the command reaches the store at
    /// the moment the caller stops waiting for it (the latest it can land before the attempt
    /// acts on its loss); otherwise it never arrives.
    Hung {
        /// Whether the command is applied.
        applied: bool,
    },
}

impl Delivery {
    /// Whether the command reaches the store.
    pub fn applied(self) -> bool {
        match self {
            Delivery::Normal | Delivery::ReplyLost => true,
            Delivery::Unreachable => false,
            Delivery::Hung { applied } => applied,
        }
    }
}

/// What the store made of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The record machine's reply.
    Reply(Reply),
    /// The key holds a value that is not a record: the store said so and changed nothing.
    Corrupt,
    /// The command never reached the store: nothing was applied.
    NotApplied,
}

impl Answer {
    /// The record machine's reply, if the command was applied to a record.
    pub fn reply(&self) -> Option<&Reply> {
        match self {
            Answer::Reply(reply) => Some(reply),
            Answer::Corrupt | Answer::NotApplied => None,
        }
    }
}

/// The shared state of one run.
#[derive(Debug)]
pub struct World {
    variant: Variant,
    records: Vec<Option<Record>>,
    /// Keys that hold a corrupt value.
    corrupt: Vec<bool>,
    provider: Provider,
    history: History,
}

impl World {
    /// An empty store of `keys` keys, behaving as `variant`, in which the keys listed in
    /// `corrupt` hold a value that is not a record.
    pub fn new(variant: Variant, keys: usize, corrupt: &[usize]) -> Self {
        Self {
            variant,
            records: vec![None; keys],
            corrupt: (0..keys).map(|key| corrupt.contains(&key)).collect(),
            provider: Provider::default(),
            history: History::default(),
        }
    }

    /// Applies `command` to `key` at the store's `store_now` (unless `delivery` says it
    /// never arrives) and records the step. `skew_ms` is how far the sender's clock is off
    /// the store's; only [`Variant::SkewedClock`] uses it.
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        who: AttemptId,
        key: usize,
        fingerprint: Fingerprint,
        command: Command,
        store_now: u64,
        skew_ms: i64,
        delivery: Delivery,
    ) -> Answer {
        let before = self.records.get(key).cloned().flatten();
        let answer = if !delivery.applied() {
            Answer::NotApplied
        } else if self.corrupt.get(key).copied().unwrap_or(false) {
            Answer::Corrupt
        } else {
            let transition = self.variant.step(
                before.as_ref(),
                command.clone(),
                Timestamp::from_millis(store_now),
                Timestamp::from_millis(store_now.saturating_add_signed(skew_ms)),
            );
            match self.records.get_mut(key) {
                Some(slot) => Answer::Reply(transition.apply_to(slot)),
                None => Answer::NotApplied,
            }
        };
        let after = self.records.get(key).cloned().flatten();
        self.push(
            who,
            key,
            fingerprint,
            store_now,
            EventKind::Store {
                command,
                before,
                answer: answer.clone(),
                after,
                delivery,
            },
        );
        answer
    }

    /// The action charges the card; returns the provider's answer.
    pub fn charge(
        &mut self,
        who: AttemptId,
        key: usize,
        fingerprint: Fingerprint,
        now: u64,
    ) -> Vec<u8> {
        let body = self.provider.charge(key, who.owner());
        self.push(
            who,
            key,
            fingerprint,
            now,
            EventKind::Charged { body: body.clone() },
        );
        body
    }

    /// Records something that is not a store step or a charge.
    pub fn note(
        &mut self,
        who: AttemptId,
        key: usize,
        fingerprint: Fingerprint,
        now: u64,
        kind: EventKind,
    ) {
        self.push(who, key, fingerprint, now, kind);
    }

    /// Records an attempt's outcome.
    pub fn finish(
        &mut self,
        who: AttemptId,
        key: usize,
        fingerprint: Fingerprint,
        now: u64,
        outcome: Outcome,
    ) {
        self.push(who, key, fingerprint, now, EventKind::Finished(outcome));
    }

    /// The provider's statement so far.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// Takes the history out, leaving an empty one.
    pub fn take_history(&mut self) -> History {
        std::mem::take(&mut self.history)
    }

    fn push(
        &mut self,
        who: AttemptId,
        key: usize,
        fingerprint: Fingerprint,
        at: u64,
        kind: EventKind,
    ) {
        self.history.events.push(Event {
            at,
            who,
            key,
            fingerprint,
            kind,
        });
    }
}
