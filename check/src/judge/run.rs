//! The facts the rules read, gathered once: what each attempt did ([`Facts`]), which
//! record each key is filed under (`I12`), each record's store steps, and when each
//! owner's reservation was granted and held and its result recorded (for `I7` and its
//! causes); and, from the same pass, where the events every rule reads where it happens
//! are (`notable`, `outcomes`, `told_corrupt`), so that no rule walks the whole history
//! again to find the few it judges, and each key's charges.

use idem_core::record::{CommandKind, Record, Reply};
use idem_core::{Abandonment, Outcome};

use super::grouped::Grouped;
use super::{Cause, Rule, Violation};
use crate::history::{ActionEnd, EventKind, History, Received, StoreStep};
use crate::statement::Charge;

/// What one attempt did, gathered in one pass over the history.
#[derive(Debug, Clone, Default)]
pub(super) struct Facts {
    /// The record its key is filed under.
    pub(super) record: usize,
    /// Whether anything happened to it.
    pub(super) seen: bool,
    /// The event at which its action was handed out.
    pub(super) run: Option<usize>,
    /// Whether the action ran without a reservation.
    pub(super) unprotected: bool,
    /// How its action ended, and where.
    pub(super) ended: Option<(usize, ActionEnd)>,
    /// Its first charge: the event, and the statement line.
    pub(super) charge: Option<(usize, usize)>,
    /// Whether it crashed.
    pub(super) crashed: bool,
    /// Where its driver abandoned it.
    pub(super) abandoned: Option<usize>,
    /// Whether it was abandoned while its action ran (the action dropped mid-run).
    pub(super) dropped: bool,
    /// Its first outcome given to its caller, and how many it was given.
    pub(super) finished: Option<usize>,
    pub(super) finishes: u32,
    /// How its settlement ended.
    pub(super) settled: Option<usize>,
    /// It got stuck, or its driver broke the protocol.
    pub(super) stopped: bool,
    /// Its action is transactional: its effect commits with its record, or not at all.
    pub(super) transactional: bool,
    /// Where its transactional action made its writes, uncommitted.
    pub(super) wrote: Option<usize>,
    /// It received "corrupt" before its action ran: where it first did.
    pub(super) corrupt_before_run: Option<usize>,
    /// When (store's clock) the store last wrote its own reservation for its reserve.
    last_grant: Option<u64>,
    /// When the store wrote the reservation its action ran under (the last grant before it
    /// ran).
    pub(super) run_grant: Option<u64>,
    /// The latest end of a reservation of its that the store wrote (store's clock).
    pub(super) lease_end: Option<u64>,
    /// When the last result recorded under its token expires (store's clock).
    pub(super) recorded_until: Option<u64>,
    /// The store found its reservation gone when its complete or renewal arrived.
    pub(super) lapsed: bool,
    /// The last store step of its that was answered with a replay.
    pub(super) replayed_from: Option<usize>,
}

/// A history with what the rules need looked up once.
pub(super) struct Run<'h> {
    pub(super) history: &'h History,
    pub(super) facts: Vec<Facts>,
    /// Owner tokens, sorted, with their attempts.
    owners: Vec<(u128, usize)>,
    /// For each key, the record it is filed under (keys filed alike share one).
    pub(super) record_of_key: Vec<usize>,
    /// For each record, its store steps that applied a command, in order.
    pub(super) steps_of_record: Grouped<usize>,
    /// In order, every event a rule judges where it happens: every store step (applied or
    /// not), lease view, stuck attempt, protocol error, commit, delivery, disposition and
    /// outcome given to a caller ([`EventKind::Finished`]). The events of the kinds left out
    /// (a command sent, an answer received, the action's run, charge and end, a crash, a
    /// pause, an abandonment, a transactional action's start and writes, a settlement) are
    /// read through [`Facts`] or the lists below.
    pub(super) notable: Vec<usize>,
    /// In order, every outcome: given to a caller ([`EventKind::Finished`]) or a
    /// settlement's ([`EventKind::Settled`]).
    pub(super) outcomes: Vec<usize>,
    /// In order, every event at which an attempt received "corrupt", with the kind of the
    /// command the attempt last sent before it.
    pub(super) told_corrupt: Vec<(usize, Option<CommandKind>)>,
    /// Each key's charges (lines of the statement), in order.
    pub(super) charges: Grouped<&'h Charge<usize>>,
}

impl<'h> Run<'h> {
    pub(super) fn new(history: &'h History) -> Self {
        let filed = |k: usize| {
            let key = &history.keys[k];
            key.filed
                .as_ref()
                .map_or((key.operation.as_str(), key.key.as_str()), |(o, k)| {
                    (o.as_str(), k.as_str())
                })
        };
        let record_of_key: Vec<usize> = (0..history.keys.len())
            .map(|k| (0..k).find(|&j| filed(j) == filed(k)).unwrap_or(k))
            .collect();
        let mut owners: Vec<(u128, usize)> = history
            .attempts
            .iter()
            .enumerate()
            .map(|(who, a)| (a.owner.as_u128(), who))
            .collect();
        owners.sort_unstable();
        let mut run = Run {
            history,
            facts: history
                .attempts
                .iter()
                .map(|a| Facts {
                    record: record_of_key.get(a.key).copied().unwrap_or(a.key),
                    ..Facts::default()
                })
                .collect(),
            owners,
            steps_of_record: Grouped::new(history.keys.len().max(1), std::iter::empty()),
            record_of_key,
            notable: Vec::with_capacity(history.events.len() / 2),
            outcomes: Vec::with_capacity(history.attempts.len() + history.attempts.len() / 2),
            told_corrupt: Vec::new(),
            charges: Grouped::new(
                history.keys.len(),
                history
                    .statement
                    .lines()
                    .iter()
                    .map(|charge| (charge.key, charge)),
            ),
        };
        run.gather();
        run
    }

    /// The attempt holding `owner`, if any.
    pub(super) fn attempt_of(&self, owner: idem_core::OwnerToken) -> Option<usize> {
        let bits = owner.as_u128();
        self.owners
            .binary_search_by(|(o, _)| o.cmp(&bits))
            .ok()
            .map(|i| self.owners[i].1)
    }

    /// Whether `key` is the key of a message a broker delivered (MODEL.md `C1`).
    pub(super) fn is_message_key(&self, key: usize) -> bool {
        self.history.messages.iter().any(|m| m.key == key)
    }

    pub(super) fn label(&self, who: usize) -> &str {
        self.history
            .attempts
            .get(who)
            .map_or("?", |a| a.label.as_str())
    }

    pub(super) fn owner_label(&self, owner: idem_core::OwnerToken) -> String {
        self.attempt_of(owner)
            .map_or_else(|| owner.to_string(), |who| self.label(who).to_owned())
    }

    /// The attempt's last outcome: its settlement's if it settled, else its caller's.
    pub(super) fn outcome(&self, who: usize) -> Option<&'h Outcome> {
        let facts = self.facts.get(who)?;
        let event = facts.settled.or(facts.finished)?;
        match &self.history.events[event].kind {
            EventKind::Settled(outcome) | EventKind::Finished(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// The outcome given to the attempt's caller, if any.
    pub(super) fn finished(&self, who: usize) -> Option<&'h Outcome> {
        let event = self.facts.get(who)?.finished?;
        match &self.history.events[event].kind {
            EventKind::Finished(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// Whether the attempt's action panicked, its effect unknown: a transactional action's
    /// panic takes its writes with it, so it is a failure instead (`T1`).
    pub(super) fn panicked(&self, who: usize) -> bool {
        self.facts
            .get(who)
            .is_some_and(|f| !f.transactional && matches!(f.ended, Some((_, ActionEnd::Panicked))))
    }

    /// Whether the attempt's action is transactional.
    pub(super) fn transactional(&self, who: usize) -> bool {
        self.facts.get(who).is_some_and(|f| f.transactional)
    }

    /// The id of the attempt's effect: its charge's, or the one its transactional action
    /// gave its writes (committed or not).
    pub(super) fn effect_id(&self, who: usize) -> Option<&'h str> {
        let facts = self.facts.get(who)?;
        if let Some((_, line)) = facts.charge {
            return self
                .history
                .statement
                .lines()
                .get(line)
                .map(|c| c.id.as_str());
        }
        match &self.history.events.get(facts.wrote?)?.kind {
            EventKind::Wrote { id } => Some(id.as_str()),
            _ => None,
        }
    }

    pub(super) fn violation(&self, rule: Rule, event: Option<usize>, detail: String) -> Violation {
        Violation {
            rule,
            event,
            at: event.and_then(|e| self.history.events.get(e)).map(|e| e.at),
            detail,
        }
    }

    /// One pass over the history: the facts of every attempt, each record's steps, and
    /// where the events the rules judge one by one are.
    fn gather(&mut self) {
        let history = self.history;
        // The kind of the command each attempt last sent.
        let mut last_sent: Vec<Option<CommandKind>> = vec![None; self.facts.len()];
        // Each applied store step of an attempt, with the record it applied to.
        let mut applied: Vec<(usize, usize)> = Vec::with_capacity(history.events.len() / 4);
        for (index, event) in history.events.iter().enumerate() {
            let who = event.who;
            let mut facts = self.facts.get_mut(who);
            if let Some(facts) = facts.as_deref_mut() {
                facts.seen = true;
            }
            match &event.kind {
                EventKind::Sent(kind) => {
                    if let Some(slot) = last_sent.get_mut(who) {
                        *slot = Some(*kind);
                    }
                }
                EventKind::Received(Received::Corrupt) => {
                    self.told_corrupt
                        .push((index, last_sent.get(who).copied().flatten()));
                    if let Some(facts) = facts
                        && facts.run.is_none()
                    {
                        facts.corrupt_before_run.get_or_insert(index);
                    }
                }
                EventKind::Received(_) | EventKind::Paused { .. } => {}
                EventKind::LeaseView { .. }
                | EventKind::Delivered { .. }
                | EventKind::Disposed { .. } => self.notable.push(index),
                EventKind::Run { unprotected } => {
                    if let Some(facts) = facts {
                        if facts.run.is_none() {
                            facts.run = Some(index);
                            facts.run_grant = facts.last_grant;
                        }
                        facts.unprotected |= *unprotected;
                    }
                }
                EventKind::Charged { charge } => {
                    if let Some(facts) = facts {
                        facts.charge.get_or_insert((index, *charge));
                    }
                }
                EventKind::Committed { charge } => {
                    self.notable.push(index);
                    if let Some(facts) = facts {
                        facts.charge.get_or_insert((index, *charge));
                    }
                }
                EventKind::Transactional => {
                    if let Some(facts) = facts {
                        facts.transactional = true;
                    }
                }
                EventKind::Wrote { .. } => {
                    if let Some(facts) = facts {
                        facts.wrote.get_or_insert(index);
                    }
                }
                EventKind::ActionEnded(end) => {
                    if let Some(facts) = facts {
                        facts.ended.get_or_insert((index, *end));
                    }
                }
                EventKind::Crashed => {
                    if let Some(facts) = facts {
                        facts.crashed = true;
                    }
                }
                EventKind::Abandoned => {
                    if let Some(facts) = facts
                        && facts.abandoned.is_none()
                    {
                        facts.abandoned = Some(index);
                        facts.dropped = facts.run.is_some() && facts.ended.is_none();
                    }
                }
                EventKind::Finished(_) => {
                    self.notable.push(index);
                    self.outcomes.push(index);
                    if let Some(facts) = facts {
                        facts.finished.get_or_insert(index);
                        facts.finishes += 1;
                    }
                }
                EventKind::Settled(_) => {
                    self.outcomes.push(index);
                    if let Some(facts) = facts {
                        facts.settled.get_or_insert(index);
                    }
                }
                EventKind::Stuck(_) | EventKind::Protocol(_) => {
                    self.notable.push(index);
                    if let Some(facts) = facts {
                        facts.stopped = true;
                    }
                }
                EventKind::Store(step) => {
                    self.notable.push(index);
                    let Some(facts) = facts else {
                        continue;
                    };
                    let StoreStep {
                        command,
                        before,
                        answer,
                        after,
                    } = &**step;
                    let Some(reply) = answer.reply() else {
                        continue;
                    };
                    if matches!(reply, Reply::Replay { .. }) {
                        facts.replayed_from = Some(index);
                    }
                    let now = idem_core::Timestamp::from_millis(event.at);
                    let live = before.as_ref().filter(|r| !r.is_expired(now));
                    // The reporting half of I7: a complete or renewal that finds the key no
                    // longer the sender's means its lease lapsed during the action.
                    if matches!(command.kind(), CommandKind::Complete | CommandKind::Renew)
                        && live.is_none_or(|r| r.owner() != history.attempts[who].owner)
                    {
                        facts.lapsed = true;
                    }
                    applied.push((facts.record, index));
                    if before != after {
                        self.wrote(who, command.kind(), event.at, after.as_ref());
                    }
                }
            }
        }
        self.steps_of_record = Grouped::new(self.steps_of_record.len(), applied.into_iter());
    }

    /// What a store step wrote, for the rules on the whole run: when each owner's
    /// reservation was first granted and until when it held, and until when a recorded
    /// result is replayed.
    fn wrote(&mut self, sender: usize, kind: CommandKind, at: u64, record: Option<&Record>) {
        match record {
            Some(Record::Pending {
                owner, lease_until, ..
            }) => {
                if let Some(holder) = self.attempt_of(*owner) {
                    let facts = &mut self.facts[holder];
                    if kind == CommandKind::Reserve && holder == sender {
                        facts.last_grant = Some(at);
                    }
                    let end = lease_until.as_millis();
                    facts.lease_end = Some(facts.lease_end.map_or(end, |e| e.max(end)));
                }
            }
            Some(Record::Completed {
                owner, expires_at, ..
            }) => {
                if let Some(writer) = self.attempt_of(*owner) {
                    self.facts[writer].recorded_until = Some(expires_at.as_millis());
                }
            }
            None => {}
        }
    }

    /// Whether the attempt went away while its action ran: it crashed, or its driver
    /// abandoned it with the action dropped mid-run.
    pub(super) fn went_away(&self, who: usize) -> Option<Cause> {
        let facts = self.facts.get(who)?;
        if facts.crashed {
            Some(Cause::HolderCrashed)
        } else if self.outcome(who) == Some(&Outcome::Abandoned(Abandonment::ActionDropped)) {
            Some(Cause::AbandonedMidAction)
        } else {
            None
        }
    }
}
