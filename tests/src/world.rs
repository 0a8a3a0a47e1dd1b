//! The state every caller of a run shares, behind the checker's one lock: the records of the
//! keys (the store), the provider (the card statement) and the history being written.
//!
//! One lock for all of it makes each store command, each charge and each outcome one atomic
//! step whose order the model checker chooses; the store's clock is read inside the lock, so
//! the history's times are the store's.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Applied and answered.
    Normal,
    /// Applied, but the reply is lost (a timeout after the server ran the command).
    ReplyLost,
    /// Not applied: the store could not be reached.
    Unreachable,
}

/// The shared state of one run.
#[derive(Debug)]
pub struct World {
    variant: Variant,
    records: Vec<Option<Record>>,
    provider: Provider,
    history: History,
}

impl World {
    /// An empty store of `keys` keys, behaving as `variant`.
    pub fn new(variant: Variant, keys: usize) -> Self {
        Self {
            variant,
            records: vec![None; keys],
            provider: Provider::default(),
            history: History::default(),
        }
    }

    /// Applies `command` to `key` at the store's `store_now` and records the step.
    /// `skew_ms` is how far the sender's clock is off the store's; only
    /// [`Variant::SkewedClock`] uses it.
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
    ) -> Option<Reply> {
        let before = self.records.get(key).cloned().flatten();
        let reply = if delivery == Delivery::Unreachable {
            None
        } else {
            let transition = self.variant.step(
                before.as_ref(),
                command.clone(),
                Timestamp::from_millis(store_now),
                Timestamp::from_millis(store_now.saturating_add_signed(skew_ms)),
            );
            self.records
                .get_mut(key)
                .map(|slot| transition.apply_to(slot))
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
                reply: reply.clone(),
                after,
                delivered: delivery == Delivery::Normal,
            },
        );
        reply
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
