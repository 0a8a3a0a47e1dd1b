//! Identical requests get identical answers (`I8`): within one life of a key's record,
//! every answer to one request is the same result, each replayed body a real result of
//! that request under that key (`I8`, and `I4` when it is another request's); and a
//! key-reuse refusal names another request under this very key (`I4`).

use idem_core::record::{Record, StoredResult};
use idem_core::{Outcome, Recording, Timestamp};

use super::effects::cause_of;
use super::grouped::Grouped;
use super::{Rule, Run, Violation};
use crate::history::{ActionEnd, EventKind, StoreStep};
use crate::statement::Charge;

/// What an attempt was answered, borrowed from the history: equal exactly when the
/// [`StoredResult`]s they stand for are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Given<'h> {
    /// [`StoredResult::Value`], its bytes.
    Value(&'h [u8]),
    /// [`StoredResult::NotStored`].
    NotStored,
    /// [`StoredResult::Panicked`].
    Panicked,
}

impl<'h> Given<'h> {
    fn of(result: &'h StoredResult) -> Self {
        match result {
            StoredResult::Value(body) => Given::Value(body.as_bytes()),
            StoredResult::NotStored => Given::NotStored,
            StoredResult::Panicked => Given::Panicked,
        }
    }

    /// The stored result it stands for, to print.
    fn result(self) -> StoredResult {
        match self {
            Given::Value(bytes) => StoredResult::Value(idem_core::Body::new(bytes)),
            Given::NotStored => StoredResult::NotStored,
            Given::Panicked => StoredResult::Panicked,
        }
    }
}

/// `I8` (and `I4` for bodies): for each key and request, every answer given within one
/// retention period (replays, and executions whose effect is the one allowed) is the same
/// result; every replayed body is a charge made for that same request under that key; and
/// a replay without a body answers an execution of that request whose value could not be
/// recorded.
pub(super) fn answers(
    run: &Run<'_>,
    charges: &Grouped<&Charge<usize>>,
    found: &mut Vec<Violation>,
) {
    let history = run.history;
    // Where each record's completed result was found expired: a new life of the record.
    // (record, step), few in a run, most often none.
    let lives: Vec<(usize, usize)> = run
        .steps_of_record
        .iter()
        .enumerate()
        .flat_map(|(record, steps)| steps.iter().map(move |&step| (record, step)))
        .filter(|&(_, step)| {
            let event = &history.events[step];
            matches!(event.kind.store_step(), Some(StoreStep { before: Some(record @ Record::Completed { .. }), .. })
                if record.is_expired(Timestamp::from_millis(event.at)))
        })
        .collect();
    let life = |who: usize, at: usize| {
        let record = run.facts[who].record;
        lives
            .iter()
            .filter(|&&(r, s)| r == record && s <= at)
            .count()
    };
    // Each request on a key within one life of its record, in the order first answered;
    // and every answer given, under its group: (group, event, attempt, what it was
    // answered).
    let mut groups: Vec<(usize, &idem_core::Fingerprint, usize)> = Vec::new();
    let mut given: Vec<(usize, usize, usize, Given<'_>)> = Vec::new();
    for &index in &run.outcomes {
        let event = &history.events[index];
        let EventKind::Finished(outcome) = &event.kind else {
            continue;
        };
        let who = event.who;
        let Some(attempt) = history.attempts.get(who) else {
            continue;
        };
        let facts = &run.facts[who];
        let excused = || {
            charges
                .get(attempt.key)
                .is_some_and(|charges| cause_of(run, who, charges).is_some())
        };
        let (answer, at) = match outcome {
            Outcome::Replayed { result } => {
                match result {
                    StoredResult::Value(body) => {
                        replayed_body(run, index, who, body.as_bytes(), found);
                    }
                    StoredResult::NotStored => bodiless_replay(run, index, who, found),
                    StoredResult::Panicked => {}
                }
                (Given::of(result), facts.replayed_from.unwrap_or(index))
            }
            Outcome::Executed(execution) if !excused() => {
                let Some(charge) = facts
                    .charge
                    .and_then(|(_, line)| history.statement.lines().get(line))
                else {
                    continue;
                };
                let answer = if execution.record == Recording::StoredWithoutBody {
                    Given::NotStored
                } else {
                    Given::Value(charge.id.as_bytes())
                };
                (answer, facts.run.unwrap_or(index))
            }
            Outcome::Panicked(execution) if execution.record == Recording::Stored && !excused() => {
                (Given::Panicked, facts.run.unwrap_or(index))
            }
            _ => continue,
        };
        let group = (attempt.key, &attempt.fingerprint, life(who, at));
        let group = match groups.iter().position(|g| *g == group) {
            Some(known) => known,
            None => {
                groups.push(group);
                groups.len() - 1
            }
        };
        given.push((group, index, who, answer));
    }
    for (group, (key, _, _)) in groups.iter().enumerate() {
        let mut answers = given.iter().filter(|(g, ..)| *g == group);
        let Some((_, _, first_who, first)) = answers.next() else {
            continue;
        };
        if let Some((_, index, who, answer)) = answers.find(|(.., answer)| answer != first) {
            found.push(run.violation(
                Rule::I8,
                Some(*index),
                format!(
                    "identical requests on key {key} got different answers: {} got {}, {} got {}",
                    run.label(*first_who),
                    crate::history::ResultLabel(&first.result()),
                    run.label(*who),
                    crate::history::ResultLabel(&answer.result())
                ),
            ));
        }
    }
}

/// A replayed body is a charge made under the replaying request's key, for that request
/// (`I8`, and `I4` when it is another request's).
fn replayed_body(run: &Run<'_>, index: usize, who: usize, body: &[u8], found: &mut Vec<Violation>) {
    let history = run.history;
    let attempt = &history.attempts[who];
    let label = run.label(who);
    match history.statement.find(body) {
        None => found.push(run.violation(
            Rule::I8,
            Some(index),
            format!(
                "{label} was replayed {:?}, a body that no action produced",
                String::from_utf8_lossy(body)
            ),
        )),
        Some((_, charge)) if charge.key != attempt.key => found.push(run.violation(
            Rule::I8,
            Some(index),
            format!(
                "{label} was replayed {}, a charge made under another key",
                charge.id
            ),
        )),
        Some((_, charge)) => {
            let by = charge
                .by
                .and_then(|by| history.attempts.get(by).map(|a| (by, a)));
            if let Some((by, other)) = by
                && other.fingerprint != attempt.fingerprint
            {
                for rule in [Rule::I4, Rule::I8] {
                    found.push(run.violation(
                        rule,
                        Some(index),
                        format!(
                            "{label} was replayed {}, the result of {}, a request with another fingerprint",
                            charge.id,
                            run.label(by)
                        ),
                    ));
                }
            }
        }
    }
}

/// A replay without a body answers an execution of the same request under the same key
/// whose value could not be recorded (`I8`).
fn bodiless_replay(run: &Run<'_>, index: usize, who: usize, found: &mut Vec<Violation>) {
    let history = run.history;
    let attempt = &history.attempts[who];
    let made = history.attempts.iter().enumerate().any(|(by, other)| {
        other.key == attempt.key
            && other.fingerprint == attempt.fingerprint
            && run.facts[by].charge.is_some()
            && matches!(run.facts[by].ended, Some((_, ActionEnd::Unrecordable)))
    });
    if !made {
        found.push(run.violation(
            Rule::I8,
            Some(index),
            format!(
                "{} was replayed no body, but no execution of its request went unrecorded",
                run.label(who)
            ),
        ));
    }
}

/// `I4`: a `KeyReuse` outcome carries two different fingerprints, the stored one that of
/// another request under this very key.
pub(super) fn key_reuse(run: &Run<'_>, found: &mut Vec<Violation>) {
    let history = run.history;
    for &index in &run.outcomes {
        let event = &history.events[index];
        let EventKind::Finished(Outcome::KeyReuse { stored, given }) = &event.kind else {
            continue;
        };
        let key = history.attempts.get(event.who).map(|a| a.key);
        let genuine = stored != given
            && history
                .attempts
                .iter()
                .any(|a| Some(a.key) == key && a.fingerprint == *stored);
        if !genuine {
            found.push(run.violation(
                Rule::I4,
                Some(index),
                format!(
                    "{} was refused as key reuse, but no other request used its key",
                    run.label(event.who)
                ),
            ));
        }
    }
}
