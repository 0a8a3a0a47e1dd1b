//! The judge: a pure function from a run's [`History`] to the invariants it broke.
//!
//! It does not re-run the record machine: it checks what MODEL.md promises, against the
//! store's own clock, from the outside. Store-level invariants are judged at every store
//! step (`I1`, `I2`, `I3`, `I4`, `I6`/`I9`, `I10`, `I11`, and `I5` for what gets recorded);
//! the effect count (`I7`) and the answers (`I8`) are judged on the whole run. An extra
//! effect on a key is allowed only when its attempt says why: it reported `lease_lost`, ran
//! `FailedOpen`, could not tell whether its result was recorded (`Recording::Unknown`), or
//! went away mid-action (it crashed, or its caller left and the driver abandoned it) and
//! the next holder got the key only once its lease had ended on the store's clock. An
//! attempt that says its lease held must really have held it (the honesty half of `I7`).
//!
//! The abnormal ends have rules of their own (rule 11): a panicked action's key is completed
//! as `Panicked`, never released by its owner, and replayed as "outcome unknown"; an
//! attempt told that its key holds a corrupt value runs nothing after it and ends
//! `CorruptRecord`; and every attempt ends, an abandoned one when its settlement does.

use std::collections::BTreeSet;
use std::fmt;

use idem_core::record::{Command, Completion, Record, Reply, StoredResult};
use idem_core::{Abandonment, Outcome, Protection, Recording, Timestamp};

use crate::history::{AttemptId, Event, EventKind, History, ShortRecord};
use crate::world::{Answer, Delivery};

/// A rule of MODEL.md (or of the harness itself) that a run can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invariant {
    /// One live holder per key.
    I1,
    /// Only the owner completes, renews or releases.
    I2,
    /// A completed record is never changed before it expires.
    I3,
    /// Never a replay under another fingerprint.
    I4,
    /// Failures are not cached.
    I5,
    /// A dead holder frees its key within one lease.
    I6,
    /// One effect per key, unless the outcome says why.
    I7,
    /// `I7`'s proviso: an outcome that says its lease held (`lease_lost: false`) really
    /// held it, from its grant until its result was recorded.
    I7Report,
    /// Identical requests get identical answers.
    I8,
    /// An expired record behaves as an absent one.
    I9,
    /// A lease never shrinks.
    I10,
    /// Reserve is idempotent for its owner.
    I11,
    /// The attempt machine says its lease is held (`LeaseState::Held`) only while the store
    /// holds that attempt's live reservation (MODEL.md, the attempt machine, step 2): a
    /// driver that tells its action "you still hold the key" must be telling the truth.
    LeaseView,
    /// A panicked action's key is completed as `StoredResult::Panicked` (the attempt ends
    /// `Outcome::Panicked`), never released by its owner, and every replay of it says
    /// "outcome unknown" (rule 11).
    Panic,
    /// An attempt told that its key holds a corrupt value runs nothing after that, and ends
    /// `CorruptRecord` (or records nothing: `Recording::CorruptRecord`), without retrying
    /// or failing open (rule 11).
    Corrupt,
    /// Every attempt that did not crash gets an outcome; an abandoned one settles, and its
    /// settlement ends `Abandoned`.
    Liveness,
    /// The driver never feeds the machine an input it refuses.
    Driver,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One broken rule, where it broke, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The rule.
    pub invariant: Invariant,
    /// The event (an index into the history) at which it is seen, if one.
    pub event: Option<usize>,
    /// What happened, for a person.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violated", self.invariant)?;
        if let Some(event) = self.event {
            write!(f, " at #{event}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// A run that broke at least one rule: the violations and the whole history, which its
/// `Display` prints as a readable story.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// Every rule broken, in the order found.
    pub violations: Vec<Violation>,
    /// The run.
    pub history: History,
}

impl Counterexample {
    /// Whether `invariant` is among the broken rules.
    pub fn breaks(&self, invariant: Invariant) -> bool {
        self.violations.iter().any(|v| v.invariant == invariant)
    }

    /// The broken rules, without repeats.
    pub fn invariants(&self) -> BTreeSet<Invariant> {
        self.violations.iter().map(|v| v.invariant).collect()
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
pub fn check_run(history: &History) -> Result<(), Counterexample> {
    let mut found = Vec::new();
    for (index, event) in history.events.iter().enumerate() {
        match &event.kind {
            EventKind::Store {
                command,
                before,
                answer: Answer::Reply(reply),
                after,
                ..
            } => store_step(
                history,
                index,
                event,
                Step {
                    command,
                    before: before.as_ref(),
                    reply,
                    after: after.as_ref(),
                },
                &mut found,
            ),
            EventKind::BelievedHeld { held_at } => {
                lease_view(history, index, event, *held_at, &mut found);
            }
            EventKind::Stuck(why) => found.push(Violation {
                invariant: Invariant::Liveness,
                event: Some(index),
                detail: format!("{} is stuck: {why}", event.who),
            }),
            EventKind::Protocol(why) => found.push(Violation {
                invariant: Invariant::Driver,
                event: Some(index),
                detail: format!("{}: {why}", event.who),
            }),
            _ => {}
        }
    }
    effect_count(history, &mut found);
    lease_honesty(history, &mut found);
    answers(history, &mut found);
    panics(history, &mut found);
    corrupt_answers(history, &mut found);
    liveness(history, &mut found);
    if found.is_empty() {
        Ok(())
    } else {
        Err(Counterexample {
            violations: found,
            history: history.clone(),
        })
    }
}

/// One applied store command.
struct Step<'a> {
    command: &'a Command,
    before: Option<&'a Record>,
    reply: &'a Reply,
    after: Option<&'a Record>,
}

fn store_step(
    history: &History,
    index: usize,
    event: &Event,
    step: Step<'_>,
    found: &mut Vec<Violation>,
) {
    let now = Timestamp::from_millis(event.at);
    let owner = event.who.owner();
    let live = step.before.filter(|record| !record.is_expired(now));
    let changed = step.before != step.after;
    let mut violate = |invariant, detail: String| {
        found.push(Violation {
            invariant,
            event: Some(index),
            detail,
        });
    };

    if let (Reply::Reserved(granted), Some(record)) = (step.reply, live)
        && record.owner() != granted.owner
    {
        {
            violate(
                Invariant::I1,
                format!(
                    "{} was granted the key while {} held it, live until t+{}",
                    event.who,
                    label(record.owner()),
                    record.expires_at().as_millis()
                ),
            );
        }
    }
    let fenced = matches!(
        step.command,
        Command::Complete { .. } | Command::Renew { .. } | Command::Release { .. }
    );
    if let Some(record) = live {
        let succeeded = matches!(
            step.reply,
            Reply::Renewed(_) | Reply::Released | Reply::Completed(_)
        );
        if fenced && record.owner() != owner && (changed || succeeded) {
            violate(
                Invariant::I2,
                format!(
                    "{} ({}) changed, or was told it changed, the live record of {}",
                    event.who,
                    step.command.name(),
                    label(record.owner())
                ),
            );
        }
        if matches!(record, Record::Completed { .. }) && changed {
            violate(
                Invariant::I3,
                format!(
                    "{} ({}) changed a completed record before it expired at t+{}",
                    event.who,
                    step.command.name(),
                    record.expires_at().as_millis()
                ),
            );
        }
    }
    if let Reply::Replay { .. } = step.reply
        && live.map(Record::fingerprint) != Some(event.fingerprint)
    {
        {
            violate(
                Invariant::I4,
                format!("{} was replayed a record of another request", event.who),
            );
        }
    }
    if step.before.is_some() && live.is_none() && !answers_as_absent(step.command, step.reply) {
        let invariant = match step.before {
            Some(Record::Pending { .. }) => Invariant::I6,
            _ => Invariant::I9,
        };
        violate(
            invariant,
            format!(
                "an expired record answered {}'s {} with {:?}, not as an absent key",
                event.who,
                step.command.name(),
                step.reply
            ),
        );
    }
    if let (
        Some(Record::Pending {
            owner: held_by,
            lease_until: old,
            ..
        }),
        Some(Record::Pending {
            owner: now_by,
            lease_until: new,
            ..
        }),
    ) = (live, step.after)
        && held_by == now_by
        && new < old
    {
        {
            violate(
                Invariant::I10,
                format!(
                    "the lease of {} shrank from t+{} to t+{}",
                    label(*held_by),
                    old.as_millis(),
                    new.as_millis()
                ),
            );
        }
    }
    if let (
        Command::Reserve { .. },
        Some(Record::Pending {
            owner: holder,
            lease_until,
            ..
        }),
    ) = (step.command, live)
    {
        let same = matches!(step.reply, Reply::Reserved(r) if r.owner == owner && r.lease_until == Some(*lease_until));
        if *holder == owner && (!same || changed) {
            violate(
                Invariant::I11,
                format!(
                    "{}'s repeated reserve was answered {:?} or changed the record",
                    event.who, step.reply
                ),
            );
        }
    }
    if let Some(Record::Completed {
        owner: by, result, ..
    }) = step.after
        && changed
    {
        recorded_result(history, index, *by, result, &mut violate);
    }
}

/// `LeaseView`: when the attempt's machine said its lease was held, at store time
/// `held_at`, the key held the attempt's own reservation, live past `held_at`.
fn lease_view(
    history: &History,
    index: usize,
    event: &Event,
    held_at: u64,
    found: &mut Vec<Violation>,
) {
    let earlier = history.events.get(..index).unwrap_or_default();
    let state = earlier
        .iter()
        .rev()
        .filter(|e| e.key == event.key && e.at <= held_at)
        .find_map(|e| match &e.kind {
            EventKind::Store { after, .. } => Some(after.as_ref()),
            _ => None,
        })
        .flatten();
    let holds = matches!(state, Some(record @ Record::Pending { .. })
        if record.owner() == event.who.owner() && !record.is_expired(Timestamp::from_millis(held_at)));
    if !holds {
        found.push(Violation {
            invariant: Invariant::LeaseView,
            event: Some(index),
            detail: format!(
                "{}'s machine said its lease was held at t+{held_at}, but the key then held {}",
                event.who,
                ShortRecord(&state.cloned())
            ),
        });
    }
}

/// `I5` and `I8` for a record that just became `Completed`: it must hold the charge of a
/// succeeded action of its owner; and the `Panic` rule: "outcome unknown" is recorded for
/// an action that panicked, and only for one.
fn recorded_result(
    history: &History,
    index: usize,
    by: idem_core::OwnerToken,
    result: &StoredResult,
    violate: &mut impl FnMut(Invariant, String),
) {
    let Some(writer) = AttemptId::of_owner(by) else {
        violate(
            Invariant::I5,
            format!("a result was recorded for the unknown owner {by}"),
        );
        return;
    };
    let panicked = history.panicked(writer);
    match (result, panicked) {
        (StoredResult::Panicked, true) => return,
        (StoredResult::Panicked, false) => {
            violate(
                Invariant::Panic,
                format!(
                    "\"outcome unknown\" was recorded for {writer}, whose action did not panic"
                ),
            );
            return;
        }
        (_, true) => {
            violate(
                Invariant::Panic,
                format!("{writer}'s action panicked, but its record holds {result:?}"),
            );
            return;
        }
        (_, false) => {}
    }
    let body = result.value();
    let earlier = history.events.get(..index).unwrap_or_default();
    let charged = earlier.iter().find_map(|e| match &e.kind {
        EventKind::Charged { body } if e.who == writer => Some(body),
        _ => None,
    });
    match (charged, body) {
        (None, _) => violate(
            Invariant::I5,
            format!("a result was recorded for {writer}, whose action did not succeed"),
        ),
        (Some(charge), Some(stored)) if charge.as_slice() != stored.as_bytes() => violate(
            Invariant::I8,
            format!("{writer}'s record holds a body that is not its charge"),
        ),
        _ => {}
    }
}

/// Whether `reply` is what an absent key answers to `command` (`I9`).
fn answers_as_absent(command: &Command, reply: &Reply) -> bool {
    match command {
        Command::Reserve { .. } => matches!(reply, Reply::Reserved(_)),
        Command::Complete { .. } => {
            matches!(reply, Reply::Completed(Completion::AfterLeaseExpiry))
        }
        Command::Renew { .. } | Command::Release { .. } => {
            matches!(reply, Reply::Refused(idem_core::Refusal::LeaseLost))
        }
        Command::Read => matches!(reply, Reply::Read(None)),
    }
}

fn label(owner: idem_core::OwnerToken) -> String {
    AttemptId::of_owner(owner).map_or_else(|| owner.to_string(), |who| who.to_string())
}

/// Every attempt that appears in the history, in order of first appearance.
fn attempts(history: &History) -> Vec<(AttemptId, usize)> {
    let mut seen: Vec<(AttemptId, usize)> = Vec::new();
    for event in &history.events {
        if !seen.iter().any(|(who, _)| *who == event.who) {
            seen.push((event.who, event.key));
        }
    }
    seen
}

/// Whether an attempt's outcome (or its going away) accounts for an extra effect (`I7`).
fn excused(history: &History, who: AttemptId) -> bool {
    if went_away_mid_action(history, who) {
        return left_to_its_lease(history, who).is_ok();
    }
    match history.outcome(who) {
        Some(Outcome::Executed(execution) | Outcome::Panicked(execution)) => {
            execution.lease_lost
                || execution.protection == Protection::FailedOpen
                || execution.record == Recording::Unknown
        }
        // Charged but never finished: reported as a liveness violation already.
        None => true,
        Some(_) => false,
    }
}

/// Whether the attempt went away while its action ran: it crashed, or its caller left and
/// the driver abandoned it with the action dropped mid-run.
fn went_away_mid_action(history: &History, who: AttemptId) -> bool {
    history.crashed(who)
        || history.settlement(who) == Some(&Outcome::Abandoned(Abandonment::ActionDropped))
}

/// For an attempt that went away mid-action: `Ok` when its key was left to its lease, so
/// that nobody else was granted the key, after the reservation its action ran under, before
/// that lease (as last extended) ended on the store's clock; `Err` says who was. An
/// action that ran without a reservation (fail-open) had no lease to leave.
fn left_to_its_lease(history: &History, who: AttemptId) -> Result<(), String> {
    let owner = who.owner();
    let Some(started) = history.events.iter().position(|e| {
        e.who == who && matches!(e.kind, EventKind::Charged { .. } | EventKind::Panicked)
    }) else {
        return Ok(());
    };
    let key = history.events.get(started).map_or(0, |e| e.key);
    let store_steps = || {
        history
            .events
            .iter()
            .enumerate()
            .filter(move |(_, e)| e.key == key)
            .filter_map(|(index, e)| match &e.kind {
                EventKind::Store {
                    answer: Answer::Reply(reply),
                    after,
                    ..
                } => Some((index, e, reply, after)),
                _ => None,
            })
    };
    let Some(granted) = store_steps()
        .filter(|(index, e, reply, _)| {
            *index < started
                && e.who == who
                && matches!(reply, Reply::Reserved(r) if r.owner == owner)
        })
        .map(|(index, ..)| index)
        .max()
    else {
        return Ok(());
    };
    let lease_end = store_steps()
        .filter_map(|(_, _, _, after)| match after {
            Some(Record::Pending {
                owner: holder,
                lease_until,
                ..
            }) if *holder == owner => Some(lease_until.as_millis()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    match store_steps().find(|(index, e, reply, _)| {
        *index > granted
            && e.at < lease_end
            && matches!(reply, Reply::Reserved(r) if r.owner != owner)
    }) {
        Some((index, e, ..)) => Err(format!(
            "{who} went away mid-action, but {} was granted the key at #{index} (t+{}), before {who}'s lease ended at t+{lease_end}",
            e.who, e.at
        )),
        None => Ok(()),
    }
}

/// `I7`: at most one unexcused effect per key.
fn effect_count(history: &History, found: &mut Vec<Violation>) {
    let mut keys: Vec<usize> = history.events.iter().map(|e| e.key).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let unexcused: Vec<(usize, AttemptId)> = history
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.key == key && matches!(e.kind, EventKind::Charged { .. }))
            .filter(|(_, e)| !excused(history, e.who))
            .map(|(index, e)| (index, e.who))
            .collect();
        if unexcused.len() > 1 {
            let who: Vec<String> = unexcused
                .iter()
                .map(|(index, who)| {
                    let why = went_away_mid_action(history, *who)
                        .then(|| left_to_its_lease(history, *who).err())
                        .flatten();
                    match why {
                        Some(why) => format!("{who} at #{index} ({why})"),
                        None => format!("{who} at #{index}"),
                    }
                })
                .collect();
            found.push(Violation {
                invariant: Invariant::I7,
                event: unexcused.last().map(|(index, _)| *index),
                detail: format!(
                    "key {key} was charged {} times ({} in all) by attempts that report neither a lost lease, fail-open nor an unknown recording, and did not go away mid-action leaving the key to its lease: {}",
                    unexcused.len(),
                    history.charges(key),
                    who.join(", ")
                ),
            });
        }
    }
}

/// The honesty half of `I7`: an attempt that reports its lease held (`lease_lost: false`,
/// under a reservation) ran its action under a reservation granted to it, nobody else was
/// granted the key from that grant until the attempt's result was recorded, and the store
/// never told it meanwhile that the lease had run out.
fn lease_honesty(history: &History, found: &mut Vec<Violation>) {
    for (who, key) in attempts(history) {
        let Some(Outcome::Executed(execution) | Outcome::Panicked(execution)) =
            history.outcome(who)
        else {
            continue;
        };
        if execution.lease_lost || execution.protection != Protection::Reserved {
            continue;
        }
        let owner = who.owner();
        let Some(charged) = history.events.iter().position(|e| {
            e.who == who && matches!(e.kind, EventKind::Charged { .. } | EventKind::Panicked)
        }) else {
            continue;
        };
        let store_events: Vec<_> = history
            .events
            .iter()
            .enumerate()
            .filter_map(|(index, e)| match &e.kind {
                EventKind::Store {
                    command,
                    answer: Answer::Reply(reply),
                    before,
                    after,
                    ..
                } if e.key == key => Some((index, e, command, reply, before, after)),
                _ => None,
            })
            .collect();
        // The window the attempt claims it held the key: from the reservation its action
        // ran under (its last grant before the charge) or, lacking one, from the charge,
        // until its result is recorded.
        let start = store_events
            .iter()
            .rev()
            .find(|(index, e, _, reply, _, _)| {
                *index < charged
                    && e.who == who
                    && matches!(reply, Reply::Reserved(r) if r.owner == owner)
            })
            .map(|(index, ..)| *index)
            .unwrap_or(charged);
        let mut violate = |event: Option<usize>, detail: String| {
            found.push(Violation {
                invariant: Invariant::I7Report,
                event,
                detail,
            });
        };
        let mut recorded = None;
        let mut lapses = Vec::new();
        for (index, event, command, reply, before, after) in &store_events {
            if *index <= start || recorded.is_some() {
                continue;
            }
            let mine = event.who == who;
            match reply {
                Reply::Reserved(r) if r.owner != owner => {
                    lapses.push(format!(
                        "{} was granted the key at #{index}",
                        label(r.owner)
                    ));
                }
                Reply::Completed(Completion::AfterLeaseExpiry) | Reply::Refused(_) if mine => {
                    lapses.push(format!(
                        "the store answered its {} at #{index} with {reply:?}",
                        command.name()
                    ));
                }
                _ => {}
            }
            let completes =
                matches!(after, Some(Record::Completed { owner: by, .. }) if *by == owner);
            if mine && completes && before != after {
                recorded = Some(*index);
            }
        }
        if matches!(
            execution.record,
            Recording::Stored | Recording::StoredWithoutBody
        ) && recorded.is_none()
        {
            violate(
                Some(start),
                format!("{who} reports its result recorded, but no record of it was written"),
            );
        }
        if !lapses.is_empty() {
            violate(
                recorded.or(Some(start)),
                format!("{who} reports lease_lost: false, but {}", lapses.join("; ")),
            );
        }
    }
}

/// The answers given to one request on one key: (event, attempt, what it was answered).
type Answers = Vec<(usize, AttemptId, StoredResult)>;

/// `I8` (and `I4` for bodies): for each key and request, every answer given (replays, and
/// executions whose effect is the one allowed) is the same result, and every replayed body
/// is a charge made for that same request.
fn answers(history: &History, found: &mut Vec<Violation>) {
    let mut groups: Vec<((usize, idem_core::Fingerprint), Answers)> = Vec::new();
    for (index, (event, outcome)) in history
        .events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match &e.kind {
            EventKind::Finished(outcome) => Some((i, (e, outcome))),
            _ => None,
        })
    {
        let answer = match outcome {
            Outcome::Replayed { result } => {
                if let StoredResult::Value(body) = result {
                    replayed_body(history, index, event, body, found);
                }
                result.clone()
            }
            Outcome::Executed(_) if !excused(history, event.who) => {
                match history.events.iter().find_map(|e| match &e.kind {
                    EventKind::Charged { body } if e.who == event.who => Some(body.clone()),
                    _ => None,
                }) {
                    Some(body) => StoredResult::Value(idem_core::Body::new(body)),
                    None => continue,
                }
            }
            Outcome::Panicked(execution)
                if execution.record == Recording::Stored && !excused(history, event.who) =>
            {
                StoredResult::Panicked
            }
            _ => continue,
        };
        let group = (event.key, event.fingerprint);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, answers)) => answers.push((index, event.who, answer)),
            None => groups.push((group, vec![(index, event.who, answer)])),
        }
    }
    for ((key, _), given) in groups {
        let Some((_, first_who, first)) = given.first() else {
            continue;
        };
        if let Some((index, who, _)) = given.iter().find(|(_, _, answer)| answer != first) {
            found.push(Violation {
                invariant: Invariant::I8,
                event: Some(*index),
                detail: format!(
                    "identical requests on key {key} got different answers: {first_who} and {who}"
                ),
            });
        }
    }
}

/// A replayed body is a charge made for the replaying request (`I4`, `I8`).
fn replayed_body(
    history: &History,
    index: usize,
    event: &Event,
    body: &idem_core::Body,
    found: &mut Vec<Violation>,
) {
    let charge = history.events.iter().find(|e| {
        matches!(&e.kind, EventKind::Charged { body: charged }
            if e.key == event.key && charged.as_slice() == body.as_bytes())
    });
    match charge {
        Some(charge) if charge.fingerprint != event.fingerprint => found.push(Violation {
            invariant: Invariant::I4,
            event: Some(index),
            detail: format!(
                "{} was replayed the result of {}, a request with another fingerprint",
                event.who, charge.who
            ),
        }),
        None => found.push(Violation {
            invariant: Invariant::I8,
            event: Some(index),
            detail: format!("{} was replayed a body that no action produced", event.who),
        }),
        Some(_) => {}
    }
}

/// The `Panic` rule: an attempt whose action panicked never sends a release (its effect may
/// have happened), completes only with "outcome unknown", and ends `Panicked`; a replay of
/// a panicked action's record says "outcome unknown", and only such a replay does.
fn panics(history: &History, found: &mut Vec<Violation>) {
    let mut violate = |event: Option<usize>, detail: String| {
        found.push(Violation {
            invariant: Invariant::Panic,
            event,
            detail,
        });
    };
    for (who, _) in attempts(history) {
        if !history.panicked(who) {
            continue;
        }
        for (index, event) in history.events.iter().enumerate() {
            match &event.kind {
                EventKind::Store { command, .. } if event.who == who => match command {
                    Command::Release { .. } => violate(
                        Some(index),
                        format!(
                            "{who}'s action panicked (its effect may have happened), and it sent a release of the key"
                        ),
                    ),
                    Command::Complete { result, .. } if *result != StoredResult::Panicked => {
                        violate(
                            Some(index),
                            format!(
                                "{who}'s action panicked, and it completed the key with {result:?}"
                            ),
                        );
                    }
                    _ => {}
                },
                EventKind::Finished(outcome)
                    if event.who == who && !matches!(outcome, Outcome::Panicked(_)) =>
                {
                    violate(
                        Some(index),
                        format!("{who}'s action panicked, but it ended {outcome:?}"),
                    );
                }
                _ => {}
            }
        }
    }
    for (index, event) in history.events.iter().enumerate() {
        let EventKind::Finished(Outcome::Replayed { result }) = &event.kind else {
            continue;
        };
        // The record its reserve was last answered from.
        let source = history
            .events
            .get(..index)
            .unwrap_or_default()
            .iter()
            .rev()
            .find_map(|e| match &e.kind {
                EventKind::Store {
                    answer: Answer::Reply(Reply::Replay { .. }),
                    before: Some(record),
                    delivery: Delivery::Normal,
                    ..
                } if e.who == event.who => Some(record.owner()),
                _ => None,
            })
            .and_then(AttemptId::of_owner);
        let from_a_panic = source.is_some_and(|writer| history.panicked(writer));
        let unknown = *result == StoredResult::Panicked;
        if from_a_panic != unknown {
            violate(
                Some(index),
                match source {
                    Some(writer) if from_a_panic => format!(
                        "{} was replayed {result:?} from the record of {writer}, whose action panicked: not \"outcome unknown\"",
                        event.who
                    ),
                    Some(writer) => format!(
                        "{} was replayed \"outcome unknown\" from the record of {writer}, whose action did not panic",
                        event.who
                    ),
                    None => format!(
                        "{} was replayed \"outcome unknown\", but no record was replayed to it",
                        event.who
                    ),
                },
            );
        }
    }
}

/// The `Corrupt` rule: an attempt told (a delivered answer) that its key holds a corrupt
/// value runs nothing after that; told so in answer to its reserve, it ends
/// `CorruptRecord` (no retry, no fail-open); told so in answer to the complete of an action
/// that ran unprotected (a store that could not be reached is not a store that answered),
/// it ends with `Recording::CorruptRecord`. An abandoned attempt has no caller to answer.
fn corrupt_answers(history: &History, found: &mut Vec<Violation>) {
    for (told, event) in history.events.iter().enumerate() {
        let EventKind::Store {
            command,
            answer: Answer::Corrupt,
            delivery: Delivery::Normal,
            ..
        } = &event.kind
        else {
            continue;
        };
        let (who, key) = (event.who, event.key);
        let mut violate = |event: usize, detail: String| {
            found.push(Violation {
                invariant: Invariant::Corrupt,
                event: Some(event),
                detail,
            });
        };
        if let Some((ran, _)) = history.events.iter().enumerate().skip(told).find(|(_, e)| {
            e.who == who && matches!(e.kind, EventKind::Charged { .. } | EventKind::Panicked)
        }) {
            violate(
                ran,
                format!(
                    "{who} was told at #{told} that key {key} holds a corrupt value, and then ran its action"
                ),
            );
        }
        if history.abandoned(who) {
            continue;
        }
        let Some((index, outcome)) = history.events.iter().enumerate().find_map(|(i, e)| match &e
            .kind
        {
            EventKind::Finished(outcome) if e.who == who => Some((i, outcome)),
            _ => None,
        }) else {
            continue;
        };
        let honest = match command {
            Command::Reserve { .. } => *outcome == Outcome::CorruptRecord,
            Command::Complete { .. } => matches!(
                outcome,
                Outcome::Executed(execution) | Outcome::Panicked(execution)
                    if execution.record == Recording::CorruptRecord
            ),
            // A renewal marks the lease lost and a release counts as done: nothing of the
            // attempt's is under the key.
            Command::Renew { .. } | Command::Release { .. } | Command::Read => true,
        };
        if !honest {
            violate(
                index,
                format!(
                    "{who} was told at #{told} that key {key} holds a corrupt value, in answer to its {}, but ended {outcome:?}",
                    command.name()
                ),
            );
        }
    }
}

/// `Liveness`: every attempt that did not crash (and did not stop on a protocol error or
/// get stuck, which are reported where they happen) ends: with an outcome for its caller,
/// or, when abandoned, with a settlement that ends `Abandoned`.
fn liveness(history: &History, found: &mut Vec<Violation>) {
    for (who, _) in attempts(history) {
        let stopped = history.events.iter().any(|e| {
            e.who == who
                && matches!(
                    e.kind,
                    EventKind::Crashed | EventKind::Stuck(_) | EventKind::Protocol(_)
                )
        });
        if stopped {
            continue;
        }
        let problem = if history.abandoned(who) {
            match history.settlement(who) {
                Some(Outcome::Abandoned(_)) => None,
                Some(other) => Some(format!("{who} was abandoned and settled as {other:?}")),
                None => Some(format!(
                    "{who} was abandoned and its settlement never ended"
                )),
            }
        } else if history.outcome(who).is_none() {
            Some(format!("{who} never got an outcome"))
        } else {
            None
        };
        if let Some(detail) = problem {
            found.push(Violation {
                invariant: Invariant::Liveness,
                event: None,
                detail,
            });
        }
    }
}
