//! `T1 transactional-effect-once`: effects that commit with the record (MODEL.md, "Effects
//! that commit with the record"). A transactional action's effect is writes in the store's
//! own database, made uncommitted and committed by the store together with the complete
//! that records the action's result, or rolled back. So:
//!
//! - its writes commit only at a store step that applied its own complete and recorded its
//!   result with them (`record::commits`), and such a step always commits them;
//! - a key's committed effect is its only one in a life of its record: a second needs every
//!   earlier effect's result to have expired (retention); a lease that ran out, a holder
//!   that crashed, paused or was dropped is no cause for it, as it is for other effects
//!   (`I7`);
//! - its outcome says whether its writes committed: `Executed` only if they did, `RolledBack`
//!   (and every end without an execution) only if they did not, `CommitUnknown` either way;
//!   a panic or a dropped action takes its writes with it (never `Panicked`, never
//!   `Abandoned(ActionDropped)`).

use std::fmt::Write as _;

use idem_core::record::{Command, Record, StoredResult, commits};
use idem_core::{Abandonment, Outcome};

use super::effects::{cause_of, retention_expired};
use super::{Cause, Rule, Run, Verdict};
use crate::history::{ActionEnd, Answer, EventKind, StoreStep};
use crate::statement::Charge;

pub(super) fn judge(run: &Run<'_>, verdict: &mut Verdict) {
    for (key, charges) in run.charges.iter().enumerate() {
        if has_commits(run, charges) {
            once_per_life(run, key, charges, verdict);
        }
    }
    commits_with_the_record(run, verdict);
    outcomes(run, verdict);
}

/// Whether any of a key's effects committed with the record: the key is then judged here
/// rather than by `I7` alone.
pub(super) fn has_commits(run: &Run<'_>, charges: &[&Charge<usize>]) -> bool {
    charges
        .iter()
        .any(|charge| charge.by.is_some_and(|who| run.transactional(who)))
}

/// One effect per life of the record. Each effect beyond the key's first needs a cause: an
/// effect of a non-transactional action on the key brings its own (`I7`'s); a committed one
/// brings only retention (every earlier effect's result had expired when it committed).
fn once_per_life(run: &Run<'_>, key: usize, charges: &[&Charge<usize>], verdict: &mut Verdict) {
    let extras = charges.len().saturating_sub(1);
    // (cause, whether it came with a committed effect)
    let mut causes: Vec<(Cause, bool)> = Vec::with_capacity(charges.len());
    let mut unexplained = Vec::new();
    for (i, charge) in charges.iter().enumerate() {
        let Some(who) = charge.by else {
            continue;
        };
        if run.transactional(who) {
            let earlier = &charges[..i];
            let expired = earlier.iter().all(|e| {
                e.by.and_then(|by| run.facts[by].recorded_until)
                    .is_some_and(|until| charge.at >= until)
            });
            if i == 0 {
                continue;
            }
            if expired {
                causes.push((Cause::RetentionExpired, true));
            } else {
                unexplained.push((*charge, who));
            }
        } else if let Some(cause) =
            cause_of(run, who, charges).or_else(|| retention_expired(run, charge, &charges[..i]))
        {
            causes.push((cause, false));
        }
    }
    let message = run.is_message_key(key);
    for (cause, committed) in causes.iter().take(extras) {
        verdict.count_extra(*cause, *committed, message);
    }
    if causes.len() >= extras {
        return;
    }
    let spec = &run.history.keys[key];
    let mut detail = format!(
        "key {key} ({} {}) has {} effects with {} allowed, and a committed effect is allowed only after every earlier result expired:",
        spec.operation,
        spec.key,
        charges.len(),
        causes.len()
    );
    for (charge, who) in &unexplained {
        // What would have explained it were it not committed with the record: counted, so
        // that a summary shows extra effects of lease loss among transactional ones.
        let excuse = lease_loss(run, *who, charges);
        if let Some(cause) = excuse {
            verdict.count_extra(cause, true, message);
        }
        let _ = write!(
            detail,
            " {} committed by {} ({:?}){};",
            charge.id,
            run.label(*who),
            run.outcome(*who),
            excuse.map_or(String::new(), |c| format!(" after {}", c.name()))
        );
    }
    let event = unexplained
        .last()
        .and_then(|(_, who)| run.facts[*who].charge)
        .map(|(event, _)| event);
    verdict
        .violations
        .push(run.violation(Rule::TransactionalEffectOnce, event, detail));
}

/// What explains an extra effect of `who` under `I7` (a lease lost, a holder crashed or
/// dropped, a fail-open run), or the lease it held having ended before its commit.
fn lease_loss(run: &Run<'_>, who: usize, charges: &[&Charge<usize>]) -> Option<Cause> {
    let facts = &run.facts[who];
    let committed_at = facts
        .charge
        .and_then(|(event, _)| run.history.events.get(event))
        .map(|e| e.at);
    cause_of(run, who, charges).or_else(|| {
        let lapsed = facts.lapsed
            || facts
                .lease_end
                .zip(committed_at)
                .is_some_and(|(end, at)| end <= at);
        lapsed.then_some(Cause::LeaseExpired)
    })
}

/// The writes commit exactly with the complete that records their action's result: every
/// commit follows a store step of its attempt's complete that `record::commits` and that
/// recorded the result under its owner, naming the writes; every such step is followed by
/// the commit.
fn commits_with_the_record(run: &Run<'_>, verdict: &mut Verdict) {
    let events = &run.history.events;
    for &index in &run.notable {
        let event = &events[index];
        let who = event.who;
        let label = || run.label(who);
        match &event.kind {
            EventKind::Committed { .. } => {
                let id = run.effect_id(who).unwrap_or("?");
                let step = index.checked_sub(1).and_then(|i| events.get(i));
                let recorded = step.is_some_and(|step| {
                    step.who == who
                        && matches!(step.kind.store_step(), Some(StoreStep {
                            command: Command::Complete { .. },
                            answer: Answer::Reply(reply),
                            after: Some(Record::Completed { owner, result, .. }),
                            ..
                        }) if commits(reply)
                            && *owner == run.history.attempts[who].owner
                            && match result {
                                StoredResult::Value(body) => body.as_bytes() == id.as_bytes(),
                                StoredResult::NotStored => true,
                                StoredResult::Panicked => false,
                            })
                });
                let wrote = run.transactional(who) && run.facts[who].wrote.is_some();
                if !recorded || !wrote {
                    let answered = match step.map(|s| &s.kind) {
                        Some(EventKind::Store(step)) => format!("{:?}", step.answer),
                        _ => "no store step".into(),
                    };
                    verdict.violations.push(run.violation(
                        Rule::TransactionalEffectOnce,
                        Some(index),
                        format!(
                            "{}'s writes {id} committed, but not with a complete that recorded its result (the store answered {answered})",
                            label()
                        ),
                    ));
                }
            }
            EventKind::Store(step)
                if matches!(&**step, StoreStep {
                    command: Command::Complete { .. },
                    answer: Answer::Reply(reply),
                    before,
                    after,
                } if run.transactional(who) && commits(reply) && before != after) =>
            {
                let committed = events.get(index + 1).is_some_and(|next| {
                    next.who == who && matches!(next.kind, EventKind::Committed { .. })
                });
                if !committed {
                    verdict.violations.push(run.violation(
                        Rule::TransactionalEffectOnce,
                        Some(index),
                        format!(
                            "the store recorded {}'s result, but its writes did not commit with it",
                            label()
                        ),
                    ));
                }
            }
            _ => {}
        }
    }
}

/// A transactional attempt's outcome says whether its writes committed.
fn outcomes(run: &Run<'_>, verdict: &mut Verdict) {
    for (who, facts) in run.facts.iter().enumerate() {
        if !facts.transactional {
            continue;
        }
        let Some(outcome) = run.outcome(who) else {
            continue;
        };
        let committed = facts.charge.is_some();
        let honest = match outcome {
            Outcome::Executed(_) => committed,
            Outcome::CommitUnknown => true,
            Outcome::Panicked(_) | Outcome::Abandoned(Abandonment::ActionDropped) => false,
            _ => !committed,
        };
        if !honest {
            verdict.violations.push(run.violation(
                Rule::TransactionalEffectOnce,
                facts.settled.or(facts.finished),
                format!(
                    "{}'s writes {} committed, and it ended {outcome:?}",
                    run.label(who),
                    if committed { "were" } else { "were never" }
                ),
            ));
        }
    }
}

/// `liveness` for an abandoned transactional attempt: its settlement fits the phase it was
/// abandoned in. Before its action: the key settled or left to its lease. Its action
/// dropped mid-run, or ended without its complete out: rolled back (the writes went with
/// the call). Its action failed or panicked: released as a failure (or rolled back). Its
/// complete out: the record read, committed or not, or unknown.
pub(super) fn settles_as_its_phase_calls_for(run: &Run<'_>, who: usize, outcome: &Outcome) -> bool {
    let facts = &run.facts[who];
    if facts.dropped {
        return matches!(outcome, Outcome::RolledBack { .. });
    }
    match facts.ended {
        None => matches!(
            outcome,
            Outcome::Abandoned(Abandonment::Settled | Abandonment::LeftToLease)
        ),
        // Released as a failure, or rolled back when abandoned before its end was acted on.
        Some((_, ActionEnd::Failed | ActionEnd::Panicked)) => {
            matches!(
                outcome,
                Outcome::ActionFailed { .. } | Outcome::RolledBack { .. }
            )
        }
        Some((_, ActionEnd::Succeeded | ActionEnd::Unrecordable)) => matches!(
            outcome,
            Outcome::Executed(_) | Outcome::RolledBack { .. } | Outcome::CommitUnknown
        ),
    }
}
