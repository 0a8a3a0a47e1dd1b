//! The rules judged on the whole run: one effect per key, each extra one with its cause
//! (`I7`); outcomes that say their lease held really held it ("I7 reported honestly");
//! identical requests answered alike, each answer a real result of that request (`I8`,
//! `I4`).

use std::fmt::Write as _;

use idem_core::record::{Completion, Record, Reply, StoredResult};
use idem_core::{Outcome, Protection, Recording, Timestamp};

use super::{Cause, Rule, Run, Verdict, Violation};
use crate::history::{ActionEnd, EventKind};
use crate::statement::Charge;

pub(super) fn judge(run: &Run<'_>, verdict: &mut Verdict) {
    let charges = charges_by_key(run);
    effect_count(run, &charges, verdict);
    honesty(run, &mut verdict.violations);
    answers(run, &charges, &mut verdict.violations);
    key_reuse(run, &mut verdict.violations);
}

/// Each key's charges, in order.
fn charges_by_key<'h>(run: &Run<'h>) -> Vec<Vec<&'h Charge<usize>>> {
    let mut by_key: Vec<Vec<&Charge<usize>>> = vec![Vec::new(); run.history.keys.len()];
    for charge in run.history.statement.lines() {
        if let Some(charges) = by_key.get_mut(charge.key) {
            charges.push(charge);
        }
    }
    by_key
}

/// `I7`: the first charge of a key is its effect; each further one must be explained by a
/// cause the model allows (MODEL.md, "Non-guarantees"), one cause per charge. Each extra
/// charge is counted under the cause that allows it.
fn effect_count(run: &Run<'_>, charges: &[Vec<&Charge<usize>>], verdict: &mut Verdict) {
    for (key, charges) in charges.iter().enumerate() {
        // A key with effects that commit with the record is `T1`'s (`transaction`).
        if charges.len() < 2 || super::transaction::has_commits(run, charges) {
            continue;
        }
        let extras = charges.len() - 1;
        let mut causes = Vec::with_capacity(charges.len());
        for (i, charge) in charges.iter().enumerate() {
            let cause = charge
                .by
                .and_then(|who| cause_of(run, who, charges))
                .or_else(|| retention_expired(run, charge, &charges[..i]));
            causes.extend(cause);
        }
        for cause in causes.iter().take(extras) {
            verdict.extra.add(*cause);
        }
        if causes.len() < extras {
            let spec = &run.history.keys[key];
            let mut detail = format!(
                "key {key} ({} {}) was charged {} times with {} allowed:",
                spec.operation,
                spec.key,
                charges.len(),
                causes.len()
            );
            for charge in charges {
                let Some(who) = charge.by else {
                    let _ = write!(detail, " {} by nobody known;", charge.id);
                    continue;
                };
                let _ = write!(
                    detail,
                    " {} by {} ({:?})",
                    charge.id,
                    run.label(who),
                    run.outcome(who)
                );
                if run.went_away(who).is_some()
                    && let Some(lease_end) = run.facts[who].lease_end
                    && let Err(why) = left_to_its_lease(run, who, lease_end)
                {
                    let _ = write!(detail, " [{why}]");
                }
                detail.push(';');
            }
            let event = charges
                .last()
                .and_then(|c| c.by)
                .and_then(|who| run.facts[who].charge)
                .map(|(event, _)| event);
            verdict
                .violations
                .push(run.violation(Rule::I7, event, detail));
        }
    }
}

/// The allowed cause a charge by `who` brings with it, if any: each such charge allows one
/// extra charge of its key (`charges`, every charge of the key).
///
/// A holder that crashed, or whose action was dropped mid-run, leaves its key held until
/// its lease ends: its charge explains another only when nobody else was granted the key
/// before that lease ended (on the store's clock), and the holder of another charge got the
/// reservation its action ran under at or after that end. A panic is no cause: a panicked
/// action's key is completed.
pub(super) fn cause_of(run: &Run<'_>, who: usize, charges: &[&Charge<usize>]) -> Option<Cause> {
    let facts = run.facts.get(who)?;
    if facts.unprotected {
        return Some(Cause::FailOpen);
    }
    if let Some(cause) = run.went_away(who) {
        let lease_end = facts.lease_end?;
        let taken_over = charges.iter().any(|other| {
            other.by.is_some_and(|by| {
                by != who
                    && run.facts[by]
                        .run_grant
                        .is_some_and(|granted| granted >= lease_end)
            })
        });
        return (taken_over && left_to_its_lease(run, who, lease_end).is_ok()).then_some(cause);
    }
    match run.outcome(who) {
        Some(Outcome::Executed(execution) | Outcome::Panicked(execution)) => {
            if execution.protection == Protection::FailedOpen {
                Some(Cause::FailOpen)
            } else if execution.lease_lost {
                Some(Cause::LeaseExpired)
            } else if execution.record == Recording::Unknown {
                Some(Cause::CompleteUnknown)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// A charge made after the result an earlier charge's attempt recorded had expired.
pub(super) fn retention_expired(
    run: &Run<'_>,
    charge: &Charge<usize>,
    earlier: &[&Charge<usize>],
) -> Option<Cause> {
    earlier
        .iter()
        .filter_map(|e| e.by.and_then(|by| run.facts[by].recorded_until))
        .any(|until| charge.at >= until)
        .then_some(Cause::RetentionExpired)
}

/// For an attempt that went away mid-action: `Ok` when nobody else was granted its key
/// after the reservation its action ran under and before that lease (as last extended,
/// `lease_end`) ended on the store's clock; `Err` says who was.
fn left_to_its_lease(run: &Run<'_>, who: usize, lease_end: u64) -> Result<(), String> {
    let facts = &run.facts[who];
    let owner = run.history.attempts[who].owner;
    let Some(started) = facts.run.or(facts.charge.map(|(event, _)| event)) else {
        return Ok(());
    };
    let steps = run
        .steps_of_record
        .get(facts.record)
        .map_or(&[][..], Vec::as_slice);
    let reply_of = |step: usize| match &run.history.events[step].kind {
        EventKind::Store {
            answer: crate::history::Answer::Reply(reply),
            ..
        } => Some(reply),
        _ => None,
    };
    let Some(granted) = steps
        .iter()
        .copied()
        .filter(|&step| {
            step < started
                && run.history.events[step].who == who
                && matches!(reply_of(step), Some(Reply::Reserved(r)) if r.owner == owner)
        })
        .max()
    else {
        return Ok(());
    };
    let label = run.label(who);
    match steps.iter().copied().find(|&step| {
        let event = &run.history.events[step];
        step > granted
            && event.at < lease_end
            && matches!(reply_of(step), Some(Reply::Reserved(r)) if r.owner != owner)
    }) {
        Some(step) => {
            let event = &run.history.events[step];
            Err(format!(
                "{label} went away mid-action, but {} was granted the key at #{step} (t+{}), before {label}'s lease ended at t+{lease_end}",
                run.label(event.who),
                event.at
            ))
        }
        None => Ok(()),
    }
}

/// The honesty half of `I7`: an attempt that reports its lease held (`lease_lost: false`,
/// under a reservation) ran its action under a reservation granted to it; nobody else was
/// granted the key from that grant until its result was recorded (or, if it never was,
/// until the attempt's outcome); the store never told it meanwhile that the lease had run
/// out, nor found its reservation gone when its complete or a renewal arrived; and a result
/// it reports recorded was written.
fn honesty(run: &Run<'_>, found: &mut Vec<Violation>) {
    for who in 0..run.facts.len() {
        let Some(Outcome::Executed(execution) | Outcome::Panicked(execution)) = run.outcome(who)
        else {
            continue;
        };
        if execution.lease_lost || execution.protection != Protection::Reserved {
            continue;
        }
        let facts = &run.facts[who];
        // A transactional commit is honest by `T1`: committed or not, never a second effect.
        if facts.transactional {
            continue;
        }
        let label = run.label(who);
        let reported = facts.settled.or(facts.finished);
        if facts.lapsed {
            found.push(run.violation(
                Rule::I7ReportedHonestly,
                reported,
                format!(
                    "the store found {label}'s reservation gone when its complete or a renewal arrived, but it reports {execution:?}"
                ),
            ));
        }
        let Some(anchor) = facts.run.or(facts.charge.map(|(event, _)| event)) else {
            continue;
        };
        let owner = run.history.attempts[who].owner;
        let steps = run
            .steps_of_record
            .get(facts.record)
            .map_or(&[][..], Vec::as_slice);
        let start = steps
            .iter()
            .copied()
            .filter(|&step| {
                step < anchor
                    && run.history.events[step].who == who
                    && matches!(&run.history.events[step].kind,
                        EventKind::Store { answer: crate::history::Answer::Reply(Reply::Reserved(r)), .. }
                            if r.owner == owner)
            })
            .max()
            .unwrap_or(anchor);
        let mut recorded = None;
        let mut lapses = Vec::new();
        // Until its result is recorded, or, when it never is, until the attempt says so.
        let until = reported.unwrap_or(usize::MAX);
        for &step in steps.iter().filter(|&&step| step > start && step < until) {
            let event = &run.history.events[step];
            let EventKind::Store {
                command,
                before,
                answer: crate::history::Answer::Reply(reply),
                after,
            } = &event.kind
            else {
                continue;
            };
            let mine = event.who == who;
            match reply {
                Reply::Reserved(r) if r.owner != owner => {
                    lapses.push(format!(
                        "{} was granted the key at #{step}",
                        run.owner_label(r.owner)
                    ));
                }
                Reply::Completed(Completion::AfterLeaseExpiry) | Reply::Refused(_) if mine => {
                    lapses.push(format!(
                        "the store answered its {} at #{step} with {reply:?}",
                        command.name()
                    ));
                }
                _ => {}
            }
            if mine
                && before != after
                && matches!(after, Some(Record::Completed { owner: by, .. }) if *by == owner)
            {
                recorded = Some(step);
                break;
            }
        }
        if matches!(
            execution.record,
            Recording::Stored | Recording::StoredWithoutBody
        ) && recorded.is_none()
        {
            found.push(run.violation(
                Rule::I7ReportedHonestly,
                reported,
                format!("{label} reports its result recorded, but no record of it was written"),
            ));
        }
        if !lapses.is_empty() {
            found.push(run.violation(
                Rule::I7ReportedHonestly,
                recorded.or(reported),
                format!(
                    "{label} reports lease_lost: false, but {}",
                    lapses.join("; ")
                ),
            ));
        }
    }
}

/// The answers given to one request on one key within one life of its record: (event,
/// attempt, what it was answered).
type Answers = Vec<(usize, usize, StoredResult)>;

/// `I8` (and `I4` for bodies): for each key and request, every answer given within one
/// retention period (replays, and executions whose effect is the one allowed) is the same
/// result; every replayed body is a charge made for that same request under that key; and
/// a replay without a body answers an execution of that request whose value could not be
/// recorded.
fn answers(run: &Run<'_>, charges: &[Vec<&Charge<usize>>], found: &mut Vec<Violation>) {
    let history = run.history;
    // Where each record's completed result was found expired: a new life of the record.
    let lives: Vec<Vec<usize>> = run
        .steps_of_record
        .iter()
        .map(|steps| {
            steps
                .iter()
                .copied()
                .filter(|&step| {
                    let event = &history.events[step];
                    matches!(&event.kind, EventKind::Store { before: Some(record @ Record::Completed { .. }), .. }
                        if record.is_expired(Timestamp::from_millis(event.at)))
                })
                .collect()
        })
        .collect();
    let life = |who: usize, at: usize| {
        let record = run.facts[who].record;
        lives
            .get(record)
            .map_or(0, |starts| starts.iter().filter(|&&s| s <= at).count())
    };
    let mut groups: Vec<((usize, idem_core::Fingerprint, usize), Answers)> = Vec::new();
    for (index, event) in history.events.iter().enumerate() {
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
                (result.clone(), facts.replayed_from.unwrap_or(index))
            }
            Outcome::Executed(execution) if !excused() => {
                let Some(charge) = facts
                    .charge
                    .and_then(|(_, line)| history.statement.lines().get(line))
                else {
                    continue;
                };
                let answer = if execution.record == Recording::StoredWithoutBody {
                    StoredResult::NotStored
                } else {
                    StoredResult::Value(idem_core::Body::new(charge.id.as_bytes()))
                };
                (answer, facts.run.unwrap_or(index))
            }
            Outcome::Panicked(execution) if execution.record == Recording::Stored && !excused() => {
                (StoredResult::Panicked, facts.run.unwrap_or(index))
            }
            _ => continue,
        };
        let group = (attempt.key, attempt.fingerprint, life(who, at));
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, answers)) => answers.push((index, who, answer)),
            None => groups.push((group, vec![(index, who, answer)])),
        }
    }
    for ((key, _, _), given) in groups {
        let Some((_, first_who, first)) = given.first() else {
            continue;
        };
        if let Some((index, who, answer)) = given.iter().find(|(_, _, answer)| answer != first) {
            found.push(run.violation(
                Rule::I8,
                Some(*index),
                format!(
                    "identical requests on key {key} got different answers: {} got {}, {} got {}",
                    run.label(*first_who),
                    crate::history::ResultLabel(first),
                    run.label(*who),
                    crate::history::ResultLabel(answer)
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
fn key_reuse(run: &Run<'_>, found: &mut Vec<Violation>) {
    let history = run.history;
    for (index, event) in history.events.iter().enumerate() {
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
