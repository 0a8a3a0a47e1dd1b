//! The state every caller of a run shares, behind the checker's one lock: the records of the
//! keys (the store) and the run's history (`idem_check::History`, whose statement is the
//! provider's card statement).
//!
//! One lock for all of it makes each store command, each charge and each outcome one atomic
//! step whose order the model checker chooses; the store's clock is read inside the lock, so
//! the history's times are the store's. A key can be made to hold a corrupt value (not a
//! record): the store then answers "corrupt" to every command on it and changes nothing
//! (unless the store variant reads it as an absent key).

use idem_check::{Answer, AttemptSpec, EventKind, History, KeySpec, Received, Variant};
use idem_core::record::{Command, Record, Write};
use idem_core::{Outcome, Timestamp};

use crate::caller::CallerPlan;

/// One attempt: the caller that made it and its number among that caller's attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId {
    /// The caller (a thread of the model).
    pub caller: usize,
    /// The attempt's number, from zero; a client retry is the next number.
    pub attempt: u32,
}

impl AttemptId {
    /// The owner token of this attempt: unique per attempt, as the protocol requires.
    pub fn owner(self) -> idem_core::OwnerToken {
        idem_core::OwnerToken::from_u128(
            (u128::from(self.caller as u64) << 32) | u128::from(self.attempt + 1),
        )
    }

    /// The attempt that holds `owner`, if the token was made by [`AttemptId::owner`].
    pub fn of_owner(owner: idem_core::OwnerToken) -> Option<Self> {
        let bits = owner.as_u128();
        let caller = usize::try_from(bits >> 32).ok()?;
        let attempt = u32::try_from(bits & 0xffff_ffff).ok()?.checked_sub(1)?;
        Some(Self { caller, attempt })
    }

    /// The attempt behind attempt `who` of a history this harness wrote.
    pub fn in_history(history: &History, who: usize) -> Option<Self> {
        history
            .attempts
            .get(who)
            .and_then(|a| Self::of_owner(a.owner))
    }
}

impl std::fmt::Display for AttemptId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}.{}", self.caller, self.attempt)
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

    /// What the caller gets back for `answer`.
    fn received(self, answer: &Answer) -> Received {
        match (self, answer) {
            (Delivery::Normal, Answer::Reply(reply)) => Received::Reply(reply.clone()),
            (Delivery::Normal, Answer::Corrupt) => Received::Corrupt,
            (Delivery::Hung { .. }, _) => Received::GivenUp,
            _ => Received::Failed,
        }
    }
}

/// The shared state of one run.
#[derive(Debug, Clone)]
pub struct World {
    variant: Variant,
    records: Vec<Option<Record>>,
    /// Each key's fences (MODEL.md `F1`): the store counts them per key, from its clock.
    fences: Vec<idem_core::FenceCounter>,
    /// Keys that hold a corrupt value.
    corrupt: Vec<bool>,
    /// Where each caller's attempts start among the history's attempts.
    first_attempt: Vec<usize>,
    /// Each attempt's transactional writes not yet committed or rolled back (MODEL.md,
    /// "Effects that commit with the record"), by the history's index.
    written: Vec<Option<String>>,
    /// Transactional writes made so far (their ids are `tx_N`).
    writes: usize,
    history: History,
}

impl World {
    /// An empty store of `keys` keys, behaving as `variant`, in which the keys listed in
    /// `corrupt` hold a value that is not a record; every attempt `callers` may make is
    /// named in the history up front.
    pub fn new(variant: Variant, keys: usize, corrupt: &[usize], callers: &[CallerPlan]) -> Self {
        let mut history = History::default();
        for key in 0..keys {
            history.add_key(KeySpec {
                operation: crate::caller::OPERATION.into(),
                key: crate::caller::key_name(key),
                filed: None,
                corrupt: corrupt.contains(&key),
            });
        }
        let mut first_attempt = Vec::with_capacity(callers.len());
        for (caller, plan) in callers.iter().enumerate() {
            first_attempt.push(history.attempts.len());
            for attempt in 0..plan.attempts.max(1) {
                let id = AttemptId { caller, attempt };
                history.add_attempt(AttemptSpec {
                    label: id.to_string(),
                    key: plan.key,
                    fingerprint: plan.fingerprint(),
                    owner: id.owner(),
                });
            }
        }
        Self {
            variant,
            written: vec![None; history.attempts.len()],
            writes: 0,
            records: vec![None; keys],
            fences: vec![idem_core::FenceCounter::default(); keys],
            corrupt: (0..keys).map(|key| corrupt.contains(&key)).collect(),
            first_attempt,
            history,
        }
    }

    /// The history's index of attempt `who`.
    pub fn who(&self, who: AttemptId) -> usize {
        self.first_attempt.get(who.caller).copied().unwrap_or(0) + who.attempt as usize
    }

    /// Sends `command` of `who` to `key`'s store at the store's `store_now` (unless
    /// `delivery` says it never arrives), writes down the send, the store step and, when
    /// the driver takes it (`taken`), what the caller gets back. `sender_now` is the store's
    /// clock as the sender's reads it (only a variant that judges expiry by the caller's
    /// clock uses it).
    #[allow(clippy::too_many_arguments)]
    pub fn store(
        &mut self,
        who: AttemptId,
        key: usize,
        command: Command,
        store_now: u64,
        sender_now: u64,
        delivery: Delivery,
        taken: bool,
    ) -> Answer {
        let index = self.who(who);
        let complete = matches!(command, Command::Complete { .. });
        let before = self.records.get(key).cloned().flatten();
        let now = Timestamp::from_millis(if self.variant.judges_by_caller_clock() {
            sender_now
        } else {
            store_now
        });
        let answer = if !delivery.applied() {
            Answer::NotApplied
        } else if self.corrupt.get(key).copied().unwrap_or(false) {
            match self.variant.apply_to_garbage(command.clone(), now) {
                None => Answer::Corrupt,
                Some(transition) => {
                    if let (Write::Put(_), Some(corrupt)) =
                        (&transition.write, self.corrupt.get_mut(key))
                    {
                        *corrupt = false;
                    }
                    self.apply(key, transition)
                }
            }
        } else {
            let mut spare = idem_core::FenceCounter::default();
            let fences = self.fences.get_mut(key).unwrap_or(&mut spare);
            let transition =
                self.variant
                    .apply_fenced(before.as_ref(), command.clone(), now, || {
                        fences.next(Timestamp::from_millis(store_now))
                    });
            self.apply(key, transition)
        };
        let after = self.records.get(key).cloned().flatten();
        self.history
            .push(store_now, index, EventKind::Sent(command.kind()));
        self.history.push(
            store_now,
            index,
            EventKind::store(command, before, answer.clone(), after),
        );
        // A transactional action's writes commit with its complete, at this very step, if
        // the store recorded its result (or the variant says so); else they roll back.
        if let (true, Answer::Reply(reply)) = (complete, &answer)
            && self.variant.commits(reply)
            && let Some(id) = self.written.get_mut(index).and_then(Option::take)
        {
            self.history.commit(store_now, index, id);
        }
        if taken {
            let received = delivery.received(&answer);
            self.history
                .push(store_now, index, EventKind::Received(received));
        }
        answer
    }

    fn apply(&mut self, key: usize, transition: idem_core::record::Transition) -> Answer {
        match self.records.get_mut(key) {
            Some(slot) => Answer::Reply(transition.apply_to(slot)),
            None => Answer::NotApplied,
        }
    }

    /// The action of `who` charges the card at `now`; returns the provider's answer, the
    /// charge's id.
    pub fn charge(&mut self, who: AttemptId, now: u64) -> Vec<u8> {
        let index = self.who(who);
        self.history.charge(now, index).as_bytes().to_vec()
    }

    /// The transactional action of `who` makes its writes at `now`, uncommitted; returns
    /// their id, which is also the action's value.
    pub fn wrote(&mut self, who: AttemptId, now: u64) -> String {
        let index = self.who(who);
        self.writes += 1;
        let id = format!("tx_{}", self.writes);
        if let Some(slot) = self.written.get_mut(index) {
            *slot = Some(id.clone());
        }
        self.history
            .push(now, index, EventKind::Wrote { id: id.clone() });
        id
    }

    /// Records something that is not a store step or a charge.
    pub fn note(&mut self, who: AttemptId, now: u64, kind: EventKind) {
        let index = self.who(who);
        self.history.push(now, index, kind);
    }

    /// Records an attempt's outcome.
    pub fn finish(&mut self, who: AttemptId, now: u64, outcome: Outcome) {
        self.note(who, now, EventKind::Finished(outcome));
    }

    /// The history so far.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Takes the history out, leaving an empty one.
    pub fn take_history(&mut self) -> History {
        std::mem::take(&mut self.history)
    }
}
