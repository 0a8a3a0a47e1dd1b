//! "I7 reported honestly", `I7`'s proviso: an outcome that says its lease held
//! (`lease_lost: false`) really held it, from its grant until its result was recorded, and
//! a result it reports recorded was written.

use idem_core::record::{Completion, Record, Reply};
use idem_core::{Outcome, Protection, Recording};

use super::{Rule, Run, Violation};
use crate::history::StoreStep;

/// The honesty half of `I7`: an attempt that reports its lease held (`lease_lost: false`,
/// under a reservation) ran its action under a reservation granted to it; nobody else was
/// granted the key from that grant until its result was recorded (or, if it never was,
/// until the attempt's outcome); the store never told it meanwhile that the lease had run
/// out, nor found its reservation gone when its complete or a renewal arrived; and a result
/// it reports recorded was written.
pub(super) fn honesty(run: &Run<'_>, found: &mut Vec<Violation>) {
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
        let steps = run.steps_of_record.get(facts.record).unwrap_or(&[]);
        let start = steps
            .iter()
            .copied()
            .filter(|&step| {
                step < anchor
                    && run.history.events[step].who == who
                    && matches!(run.history.events[step].kind.store_step(),
                        Some(StoreStep { answer: crate::history::Answer::Reply(Reply::Reserved(r)), .. })
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
            let Some(StoreStep {
                command,
                before,
                answer: crate::history::Answer::Reply(reply),
                after,
            }) = event.kind.store_step()
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
