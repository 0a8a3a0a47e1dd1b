//! The abnormal ends of rule 11 (panics, keys that hold no record) and liveness: how every
//! attempt must end, an abandoned one by the settlement its phase calls for.

use idem_core::record::{CommandKind, StoredResult};
use idem_core::{Abandonment, Outcome, Protection, Recording};

use super::{Rule, Run, Violation};
use crate::history::{ActionEnd, EventKind};

pub(super) fn judge(run: &Run<'_>, found: &mut Vec<Violation>) {
    panics(run, found);
    corrupt(run, found);
    liveness(run, found);
}

/// Rule 11 for panics, on outcomes: an attempt whose action panicked ends `Panicked`; a
/// replay says "outcome unknown" exactly when the record it came from is a panicked
/// action's, whose request is the replaying one. (What a panicked attempt sends is judged
/// at its store steps.)
fn panics(run: &Run<'_>, found: &mut Vec<Violation>) {
    let history = run.history;
    for who in 0..run.facts.len() {
        if !run.panicked(who) {
            continue;
        }
        let facts = &run.facts[who];
        if let Some(outcome) = run.outcome(who)
            && !matches!(outcome, Outcome::Panicked(_))
        {
            found.push(run.violation(
                Rule::PanicIsOutcomeUnknown,
                facts.settled.or(facts.finished),
                format!(
                    "{}'s action panicked, but it ended {outcome:?}",
                    run.label(who)
                ),
            ));
        }
    }
    for &index in &run.outcomes {
        let event = &history.events[index];
        let EventKind::Finished(Outcome::Replayed { result }) = &event.kind else {
            continue;
        };
        let who = event.who;
        let label = run.label(who);
        // The record its reserve was last answered from.
        let source = run.facts[who]
            .replayed_from
            .and_then(|step| history.events[step].kind.store_step()?.before.as_ref())
            .and_then(|record| run.attempt_of(record.owner()));
        let from_a_panic = source.is_some_and(|writer| run.panicked(writer));
        let unknown = *result == StoredResult::Panicked;
        if from_a_panic != unknown {
            found.push(run.violation(
                Rule::PanicIsOutcomeUnknown,
                Some(index),
                match source {
                    Some(writer) if from_a_panic => format!(
                        "{label} was replayed {result:?} from the record of {}, whose action panicked: not \"outcome unknown\"",
                        run.label(writer)
                    ),
                    Some(writer) => format!(
                        "{label} was replayed \"outcome unknown\" from the record of {}, whose action did not panic",
                        run.label(writer)
                    ),
                    None => format!(
                        "{label} was replayed \"outcome unknown\", but no record was replayed to it"
                    ),
                },
            ));
        }
        if unknown {
            let attempt = &history.attempts[who];
            let panicked = history.attempts.iter().enumerate().any(|(by, other)| {
                other.key == attempt.key
                    && other.fingerprint == attempt.fingerprint
                    && run.panicked(by)
            });
            if !panicked {
                found.push(run.violation(
                    Rule::PanicIsOutcomeUnknown,
                    Some(index),
                    format!(
                        "{label} is answered \"outcome unknown\", but no execution of its request panicked"
                    ),
                ));
            }
        }
    }
}

/// Rule 11 for a key that holds a value that is not a record. An attempt told so (it
/// received "corrupt") runs nothing after that; told so in answer to its reserve, it ends
/// `CorruptRecord` (no retry, no fail-open); told so in answer to the complete of an
/// action that ran unprotected, it ends with `Recording::CorruptRecord`; an abandoned
/// attempt has no caller to answer. Under a key that starts out holding such a value,
/// nothing is charged and nothing but `CorruptRecord` (or a settlement) is answered, but
/// by an attempt that failed open without ever being answered. (A store that answers for
/// such a value or writes over it is judged at its store step.)
fn corrupt(run: &Run<'_>, found: &mut Vec<Violation>) {
    let history = run.history;
    for &(told, last_sent) in &run.told_corrupt {
        let who = history.events[told].who;
        let label = run.label(who);
        let key = history.attempts.get(who).map_or(0, |a| a.key);
        if let Some((ran, _)) = history.events.iter().enumerate().skip(told).find(|(_, e)| {
            e.who == who && matches!(e.kind, EventKind::Run { .. } | EventKind::Charged { .. })
        }) {
            found.push(run.violation(
                Rule::CorruptRecordRunsNothing,
                Some(ran),
                format!(
                    "{label} was told at #{told} that key {key} holds a value that is not a record, and then ran its action"
                ),
            ));
        }
        let facts = &run.facts[who];
        if facts.abandoned.is_some() {
            continue;
        }
        let (Some(command), Some(outcome)) = (last_sent, run.finished(who)) else {
            continue;
        };
        let honest = match command {
            CommandKind::Reserve => *outcome == Outcome::CorruptRecord,
            // A transactional complete told "corrupt" rolls its writes back.
            CommandKind::Complete if facts.transactional => {
                matches!(outcome, Outcome::RolledBack { .. })
            }
            CommandKind::Complete => matches!(
                outcome,
                Outcome::Executed(execution) | Outcome::Panicked(execution)
                    if execution.record == Recording::CorruptRecord
            ),
            // A renewal marks the lease lost and a release counts as done: nothing of the
            // attempt's is under the key.
            CommandKind::Renew | CommandKind::Release | CommandKind::Read => true,
        };
        if !honest {
            found.push(run.violation(
                Rule::CorruptRecordRunsNothing,
                facts.finished,
                format!(
                    "{label} was told at #{told} that key {key} holds a value that is not a record, in answer to its {command}, but ended {outcome:?}"
                ),
            ));
        }
    }
    for charge in history.statement.lines() {
        let (Some(spec), Some(who)) = (history.keys.get(charge.key), charge.by) else {
            continue;
        };
        let facts = &run.facts[who];
        if spec.corrupt && (!facts.unprotected || facts.corrupt_before_run.is_some()) {
            found.push(run.violation(
                Rule::CorruptRecordRunsNothing,
                facts.charge.map(|(event, _)| event),
                format!(
                    "{} charged {} under a key that holds a value that is not a record",
                    run.label(who),
                    charge.id
                ),
            ));
        }
    }
    if !history.keys.iter().any(|k| k.corrupt) {
        return;
    }
    for &index in &run.outcomes {
        let event = &history.events[index];
        let (EventKind::Finished(outcome) | EventKind::Settled(outcome)) = &event.kind else {
            continue;
        };
        let who = event.who;
        let on_corrupt = history
            .attempts
            .get(who)
            .and_then(|a| history.keys.get(a.key))
            .is_some_and(|k| k.corrupt);
        if !on_corrupt {
            continue;
        }
        let facts = &run.facts[who];
        // Told "corrupt" before this ending, and before its action ran.
        let told = facts.corrupt_before_run.is_some_and(|at| at < index);
        let unanswered_run = facts.unprotected && !told;
        let fine = match outcome {
            Outcome::CorruptRecord
            | Outcome::Abandoned(Abandonment::Settled | Abandonment::LeftToLease) => true,
            Outcome::StoreUnavailable => !told,
            Outcome::Abandoned(Abandonment::ActionDropped)
            | Outcome::ActionFailed { .. }
            | Outcome::RolledBack { .. }
            | Outcome::CommitUnknown => unanswered_run,
            Outcome::Executed(execution) | Outcome::Panicked(execution) => {
                execution.protection == Protection::FailedOpen && unanswered_run
            }
            Outcome::Replayed { .. } | Outcome::KeyReuse { .. } | Outcome::InProgress => false,
        };
        if !fine {
            found.push(run.violation(
                Rule::CorruptRecordRunsNothing,
                Some(index),
                format!(
                    "{} ended {outcome:?} under a key that holds a value that is not a record",
                    run.label(who)
                ),
            ));
        }
    }
}

/// `Liveness`: every attempt that started (something happened to it) and did not crash
/// (nor get stuck or stop on a protocol error, which are reported where they happen) ends. One its driver did not
/// abandon ends with an outcome for its caller, never `Abandoned`; an abandoned one ends
/// with a settlement that fits the phase it was abandoned in: an action dropped while it
/// ran ends `Abandoned(ActionDropped)`; before the action (reserving, waiting, or after a
/// fail-closed answer) the key is settled or left to its lease; after the action ended,
/// the result is recorded (`Executed`, `Panicked`) or a failure released (`ActionFailed`)
/// as if the caller had stayed. An attempt answered twice is the driver's bug.
fn liveness(run: &Run<'_>, found: &mut Vec<Violation>) {
    for (who, facts) in run.facts.iter().enumerate() {
        let label = run.label(who);
        if facts.finishes > 1 {
            found.push(run.violation(
                Rule::DriverProtocol,
                facts.finished,
                format!("{label} was given {} outcomes", facts.finishes),
            ));
        }
        if !facts.seen || facts.crashed || facts.stopped {
            continue;
        }
        let problem = match facts.abandoned {
            Some(_) => match run.outcome(who).filter(|_| facts.settled.is_some()) {
                None => Some(format!(
                    "{label} was abandoned and its settlement never ended"
                )),
                Some(outcome) => {
                    let fits = if facts.transactional {
                        super::transaction::settles_as_its_phase_calls_for(run, who, outcome)
                    } else if facts.dropped {
                        *outcome == Outcome::Abandoned(Abandonment::ActionDropped)
                    } else {
                        match facts.ended {
                            None => matches!(
                                outcome,
                                Outcome::Abandoned(Abandonment::Settled | Abandonment::LeftToLease)
                            ),
                            Some((_, ActionEnd::Failed)) => {
                                matches!(outcome, Outcome::ActionFailed { .. })
                            }
                            Some(_) => {
                                matches!(outcome, Outcome::Executed(_) | Outcome::Panicked(_))
                            }
                        }
                    };
                    (!fits).then(|| {
                        format!(
                            "{label} was abandoned {}, and its settlement ended {outcome:?}",
                            if facts.dropped {
                                "while its action ran"
                            } else if facts.ended.is_some() {
                                "after its action ended"
                            } else {
                                "before its action ran"
                            }
                        )
                    })
                }
            },
            None => match run.finished(who) {
                None => Some(format!("{label} never got an outcome")),
                Some(outcome @ Outcome::Abandoned(_)) => Some(format!(
                    "{label} ended {outcome:?}, but its driver never abandoned it"
                )),
                Some(_) => None,
            },
        };
        if let Some(detail) = problem {
            found.push(run.violation(Rule::Liveness, facts.settled.or(facts.finished), detail));
        }
    }
}
