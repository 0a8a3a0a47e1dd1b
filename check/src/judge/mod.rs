//! The judge: a pure function from a run's [`History`] to the rules of MODEL.md it broke,
//! and the cause of every extra effect.
//!
//! It does not re-run the record machine: it checks what MODEL.md promises, on the store's
//! own clock, from the outside. Every rule is named as MODEL.md names it ([`Rule`]):
//!
//! - at every store step (`steps`): one live holder (`I1`), only the owner completes,
//!   renews or releases (`I2`), a completed record never changes (`I3`), another request is
//!   refused and never replayed (`I4`), nothing but a successful action's result is
//!   recorded (`I5`), a record lives no longer than its holder's leases and an expired one
//!   answers as absent (`I6`, `I9`), a lease never shrinks (`I10`), the holder's repeated
//!   reserve is its reservation unchanged (`I11`), keys are filed as given (`I12`); and
//!   what the attempt machine says of its lease is what the store holds (the lease view);
//! - over the whole run (`effects`): one effect per key, each extra one carrying an allowed
//!   [`Cause`] (`I7`); an outcome that says its lease held really held it ("I7 reported
//!   honestly"); identical requests get identical answers, each a real result of that
//!   request (`I8`, `I4`);
//! - the abnormal ends of rule 11 (`ends`): a panicked action is recorded and replayed as
//!   "outcome unknown" and its key never released; a key that holds no record runs
//!   nothing; the key of an action dropped mid-run is never released; and every attempt
//!   ends, an abandoned one in the settlement its phase calls for (liveness);
//! - effects that commit with the record (`transaction`, `T1`): a transactional action's
//!   writes commit only with the complete that records its result, once per life of the
//!   record, and its outcome says whether they did.
//!
//! A violation names its rule and the event at which it is seen; a [`Counterexample`]
//! prints them with the whole history as a story.

mod effects;
mod ends;
mod steps;
mod transaction;

use std::collections::BTreeSet;
use std::fmt;

use idem_core::record::{CommandKind, Record, Reply};
use idem_core::{Abandonment, Outcome};

use crate::history::{ActionEnd, EventKind, History, Received};
use crate::tally::{Class, Tally};

/// A rule of MODEL.md (or of the harness itself) that a run can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// One live holder per key.
    I1,
    /// Only the owner completes, renews or releases.
    I2,
    /// A completed record is never changed before it expires.
    I3,
    /// A request with another fingerprint is refused, never answered with the record.
    I4,
    /// Failures are not cached: only a successful action's result is recorded.
    I5,
    /// A dead holder frees its key within one lease.
    I6,
    /// One effect per key, unless an allowed cause explains each extra one.
    I7,
    /// `I7`'s proviso: an outcome that says its lease held (`lease_lost: false`) really
    /// held it, from its grant until its result was recorded.
    I7ReportedHonestly,
    /// Identical requests get identical answers.
    I8,
    /// An expired record behaves as an absent one.
    I9,
    /// A lease never shrinks.
    I10,
    /// Reserve is idempotent for its owner.
    I11,
    /// Keys and operations are never rewritten.
    I12,
    /// The attempt machine says its lease is held (`LeaseState::Held`, confirmed until an
    /// instant) only while the store holds that attempt's reservation, lasting at least
    /// that long.
    LeaseView,
    /// Every attempt that did not crash ends; an abandoned one settles as its phase calls
    /// for, and one its driver did not abandon never ends `Abandoned`.
    Liveness,
    /// Rule 11, a panic: a panicked action's key is completed as "outcome unknown"
    /// (`StoredResult::Panicked`, and only a panicked action's is), never released by its
    /// owner, and every replay of it says "outcome unknown".
    PanicIsOutcomeUnknown,
    /// Rule 11, a value that is not a record: the store never answers for it nor replaces
    /// it, an attempt told "corrupt" runs nothing after that and ends `CorruptRecord`, and
    /// nothing is charged under the key but by an attempt that failed open unanswered.
    CorruptRecordRunsNothing,
    /// Rule 11, an attached call dropped while its action ran: its owner never releases
    /// the key, which stays held until its lease ends.
    DroppedActionKeepsKey,
    /// The driver feeds the attempt machine only inputs it awaits.
    DriverProtocol,
    /// Effects that commit with the record (MODEL.md, "T1"): a transactional action's writes
    /// commit only with the complete that records its result, at most once per life of the
    /// record, never a second time because a holder lost its lease; its outcome says
    /// whether they committed.
    TransactionalEffectOnce,
}

impl Rule {
    /// Every rule, in the order above.
    pub const ALL: [Rule; 20] = [
        Rule::I1,
        Rule::I2,
        Rule::I3,
        Rule::I4,
        Rule::I5,
        Rule::I6,
        Rule::I7,
        Rule::I7ReportedHonestly,
        Rule::I8,
        Rule::I9,
        Rule::I10,
        Rule::I11,
        Rule::I12,
        Rule::LeaseView,
        Rule::Liveness,
        Rule::PanicIsOutcomeUnknown,
        Rule::CorruptRecordRunsNothing,
        Rule::DroppedActionKeepsKey,
        Rule::DriverProtocol,
        Rule::TransactionalEffectOnce,
    ];

    /// The rule's name, as MODEL.md writes it.
    pub fn name(self) -> &'static str {
        match self {
            Rule::I1 => "I1",
            Rule::I2 => "I2",
            Rule::I3 => "I3",
            Rule::I4 => "I4",
            Rule::I5 => "I5",
            Rule::I6 => "I6",
            Rule::I7 => "I7",
            Rule::I7ReportedHonestly => "I7 reported honestly",
            Rule::I8 => "I8",
            Rule::I9 => "I9",
            Rule::I10 => "I10",
            Rule::I11 => "I11",
            Rule::I12 => "I12",
            Rule::LeaseView => "lease view",
            Rule::Liveness => "liveness",
            Rule::PanicIsOutcomeUnknown => "R11 panic-is-outcome-unknown",
            Rule::CorruptRecordRunsNothing => "R11 corrupt-record-runs-nothing",
            Rule::DroppedActionKeepsKey => "R11 dropped-action-keeps-key",
            Rule::DriverProtocol => "driver protocol",
            Rule::TransactionalEffectOnce => "T1 transactional-effect-once",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an extra effect (a second charge under one key) is allowed (MODEL.md, `I7` and
/// "Non-guarantees").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// An attempt that charged ran unprotected because the store was unreachable.
    FailOpen,
    /// An attempt that charged reported `lease_lost`: its lease ran out during the action.
    LeaseExpired,
    /// A holder crashed after charging, before recording; its lease ran out before the
    /// holder of another charge got the key, and nobody got it before.
    HolderCrashed,
    /// An attached call was dropped while its action ran (`Abandoned(ActionDropped)`) and
    /// the action charged; its key was left to its lease exactly as after a crash.
    AbandonedMidAction,
    /// An attempt that charged could not record its result (`Recording::Unknown`).
    CompleteUnknown,
    /// The charge came after an earlier result's retention had run out.
    RetentionExpired,
}

impl Cause {
    /// Every cause, in the order summaries print them.
    pub const ALL: [Cause; 6] = [
        Cause::FailOpen,
        Cause::LeaseExpired,
        Cause::HolderCrashed,
        Cause::AbandonedMidAction,
        Cause::CompleteUnknown,
        Cause::RetentionExpired,
    ];

    /// The cause's name in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Cause::FailOpen => "fail-open",
            Cause::LeaseExpired => "lease-expired",
            Cause::HolderCrashed => "holder-crashed",
            Cause::AbandonedMidAction => "abandoned-mid-action",
            Cause::CompleteUnknown => "complete-unknown",
            Cause::RetentionExpired => "retention-expired",
        }
    }
}

impl Class for Cause {
    const ALL: &'static [Self] = &Cause::ALL;
    const KIND: &'static str = "cause";
    fn name(self) -> &'static str {
        Cause::name(self)
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Extra effects counted by cause.
pub type CauseCounts = Tally<Cause>;

/// One broken rule, where it was seen, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// The event (an index into the history) at which it is seen, if one.
    pub event: Option<usize>,
    /// That event's time, on the store's clock.
    pub at: Option<u64>,
    /// What happened, for a person.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated", self.rule)?;
        if let (Some(event), Some(at)) = (self.event, self.at) {
            write!(f, " at #{event} (t+{at})")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// What the judge found in one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Every rule broken, in the order found.
    pub violations: Vec<Violation>,
    /// The extra effects, each counted under the cause that allows it (transactional
    /// effects apart).
    pub extra: CauseCounts,
    /// The extra effects that committed with the record (transactional), by cause: only
    /// `retention-expired` is allowed; one counted under another cause (a lease lost, a
    /// holder crashed or dropped) is also a violation of `T1`.
    pub extra_transactional: CauseCounts,
}

impl Verdict {
    /// Whether `rule` is among the broken rules.
    pub fn breaks(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }

    /// The broken rules, without repeats.
    pub fn rules(&self) -> BTreeSet<Rule> {
        self.violations.iter().map(|v| v.rule).collect()
    }
}

/// A run that broke at least one rule: the violations and the whole history, which its
/// `Display` prints as a story.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// Every rule broken, in the order found.
    pub violations: Vec<Violation>,
    /// The run.
    pub history: History,
}

impl Counterexample {
    /// Whether `rule` is among the broken rules.
    pub fn breaks(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }

    /// The broken rules, without repeats.
    pub fn rules(&self) -> BTreeSet<Rule> {
        self.violations.iter().map(|v| v.rule).collect()
    }
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "counterexample: {} violation(s)", self.violations.len())?;
        for violation in &self.violations {
            writeln!(f, "  {violation}")?;
        }
        writeln!(f, "history (times on the store's clock, ms):")?;
        write!(f, "{}", self.history)
    }
}

impl std::error::Error for Counterexample {}

/// Judges one run.
pub fn judge(history: &History) -> Verdict {
    let run = Run::new(history);
    let mut verdict = Verdict::default();
    steps::judge(&run, &mut verdict.violations);
    effects::judge(&run, &mut verdict);
    ends::judge(&run, &mut verdict.violations);
    transaction::judge(&run, &mut verdict);
    verdict
}

/// Judges one run: `Ok` when it keeps every rule, else the counterexample.
pub fn check_run(history: &History) -> Result<(), Box<Counterexample>> {
    let verdict = judge(history);
    if verdict.violations.is_empty() {
        Ok(())
    } else {
        Err(Box::new(Counterexample {
            violations: verdict.violations,
            history: history.clone(),
        }))
    }
}

/// What one attempt did, gathered in one pass over the history.
#[derive(Debug, Clone, Default)]
struct Facts {
    /// The record its key is filed under.
    record: usize,
    /// Whether anything happened to it.
    seen: bool,
    /// The event at which its action was handed out.
    run: Option<usize>,
    /// Whether the action ran without a reservation.
    unprotected: bool,
    /// How its action ended, and where.
    ended: Option<(usize, ActionEnd)>,
    /// Its first charge: the event, and the statement line.
    charge: Option<(usize, usize)>,
    /// Whether it crashed.
    crashed: bool,
    /// Where its driver abandoned it.
    abandoned: Option<usize>,
    /// Whether it was abandoned while its action ran (the action dropped mid-run).
    dropped: bool,
    /// Its first outcome given to its caller, and how many it was given.
    finished: Option<usize>,
    finishes: u32,
    /// How its settlement ended.
    settled: Option<usize>,
    /// It got stuck, or its driver broke the protocol.
    stopped: bool,
    /// Its action is transactional: its effect commits with its record, or not at all.
    transactional: bool,
    /// Where its transactional action made its writes, uncommitted.
    wrote: Option<usize>,
    /// It received "corrupt" before its action ran: where it first did.
    corrupt_before_run: Option<usize>,
    /// When (store's clock) the store last wrote its own reservation for its reserve.
    last_grant: Option<u64>,
    /// When the store wrote the reservation its action ran under (the last grant before it
    /// ran).
    run_grant: Option<u64>,
    /// The latest end of a reservation of its that the store wrote (store's clock).
    lease_end: Option<u64>,
    /// When the last result recorded under its token expires (store's clock).
    recorded_until: Option<u64>,
    /// The store found its reservation gone when its complete or renewal arrived.
    lapsed: bool,
    /// The last store step of its that was answered with a replay.
    replayed_from: Option<usize>,
}

/// A history with what the rules need looked up once.
struct Run<'h> {
    history: &'h History,
    facts: Vec<Facts>,
    /// Owner tokens, sorted, with their attempts.
    owners: Vec<(u128, usize)>,
    /// For each key, the record it is filed under (keys filed alike share one).
    record_of_key: Vec<usize>,
    /// For each record, its store steps that applied a command, in order.
    steps_of_record: Vec<Vec<usize>>,
}

impl<'h> Run<'h> {
    fn new(history: &'h History) -> Self {
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
            steps_of_record: vec![Vec::new(); history.keys.len().max(1)],
            record_of_key,
        };
        run.gather();
        run
    }

    /// The attempt holding `owner`, if any.
    fn attempt_of(&self, owner: idem_core::OwnerToken) -> Option<usize> {
        let bits = owner.as_u128();
        self.owners
            .binary_search_by(|(o, _)| o.cmp(&bits))
            .ok()
            .map(|i| self.owners[i].1)
    }

    fn label(&self, who: usize) -> &str {
        self.history
            .attempts
            .get(who)
            .map_or("?", |a| a.label.as_str())
    }

    fn owner_label(&self, owner: idem_core::OwnerToken) -> String {
        self.attempt_of(owner)
            .map_or_else(|| owner.to_string(), |who| self.label(who).to_owned())
    }

    /// The attempt's last outcome: its settlement's if it settled, else its caller's.
    fn outcome(&self, who: usize) -> Option<&'h Outcome> {
        let facts = self.facts.get(who)?;
        let event = facts.settled.or(facts.finished)?;
        match &self.history.events[event].kind {
            EventKind::Settled(outcome) | EventKind::Finished(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// The outcome given to the attempt's caller, if any.
    fn finished(&self, who: usize) -> Option<&'h Outcome> {
        let event = self.facts.get(who)?.finished?;
        match &self.history.events[event].kind {
            EventKind::Finished(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// Whether the attempt's action panicked, its effect unknown: a transactional action's
    /// panic takes its writes with it, so it is a failure instead (`T1`).
    fn panicked(&self, who: usize) -> bool {
        self.facts
            .get(who)
            .is_some_and(|f| !f.transactional && matches!(f.ended, Some((_, ActionEnd::Panicked))))
    }

    /// Whether the attempt's action is transactional.
    fn transactional(&self, who: usize) -> bool {
        self.facts.get(who).is_some_and(|f| f.transactional)
    }

    /// The id of the attempt's effect: its charge's, or the one its transactional action
    /// gave its writes (committed or not).
    fn effect_id(&self, who: usize) -> Option<&'h str> {
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

    fn violation(&self, rule: Rule, event: Option<usize>, detail: String) -> Violation {
        Violation {
            rule,
            event,
            at: event.and_then(|e| self.history.events.get(e)).map(|e| e.at),
            detail,
        }
    }

    /// One pass over the history: the facts of every attempt, and each record's steps.
    fn gather(&mut self) {
        let history = self.history;
        for (index, event) in history.events.iter().enumerate() {
            let who = event.who;
            let Some(facts) = self.facts.get_mut(who) else {
                continue;
            };
            facts.seen = true;
            match &event.kind {
                EventKind::Received(Received::Corrupt) if facts.run.is_none() => {
                    facts.corrupt_before_run.get_or_insert(index);
                }
                EventKind::Run { unprotected } => {
                    if facts.run.is_none() {
                        facts.run = Some(index);
                        facts.run_grant = facts.last_grant;
                    }
                    facts.unprotected |= *unprotected;
                }
                EventKind::Charged { charge } | EventKind::Committed { charge } => {
                    facts.charge.get_or_insert((index, *charge));
                }
                EventKind::Transactional => facts.transactional = true,
                EventKind::Wrote { .. } => {
                    facts.wrote.get_or_insert(index);
                }
                EventKind::ActionEnded(end) => {
                    facts.ended.get_or_insert((index, *end));
                }
                EventKind::Crashed => facts.crashed = true,
                EventKind::Abandoned => {
                    if facts.abandoned.is_none() {
                        facts.abandoned = Some(index);
                        facts.dropped = facts.run.is_some() && facts.ended.is_none();
                    }
                }
                EventKind::Finished(_) => {
                    facts.finished.get_or_insert(index);
                    facts.finishes += 1;
                }
                EventKind::Settled(_) => {
                    facts.settled.get_or_insert(index);
                }
                EventKind::Stuck(_) | EventKind::Protocol(_) => facts.stopped = true,
                EventKind::Store {
                    command,
                    before,
                    answer,
                    after,
                } => {
                    let Some(reply) = answer.reply() else {
                        continue;
                    };
                    let record = facts.record;
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
                    if let Some(steps) = self.steps_of_record.get_mut(record) {
                        steps.push(index);
                    }
                    if before != after {
                        self.wrote(who, command.kind(), event.at, after.as_ref());
                    }
                }
                EventKind::Sent(_)
                | EventKind::Received(_)
                | EventKind::LeaseView { .. }
                | EventKind::Paused { .. } => {}
            }
        }
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
    fn went_away(&self, who: usize) -> Option<Cause> {
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
