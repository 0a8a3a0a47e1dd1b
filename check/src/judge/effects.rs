//! The rules judged on the whole run: one effect per key, each extra one with its cause
//! (`I7`); outcomes that say their lease held really held it ("I7 reported honestly",
//! in `honesty`); identical requests answered alike, each answer a real result of that
//! request (`I8`, `I4`, in `answers`).
//!
//! Here is `I7` itself: each key's charges counted, and each extra one matched with the
//! cause MODEL.md allows for it ("Non-guarantees").

use std::fmt::Write as _;

use idem_core::record::Reply;
use idem_core::{Outcome, Protection, Recording};

use super::answers::{answers, key_reuse};
use super::grouped::Grouped;
use super::honesty::honesty;
use super::{Cause, Rule, Run, Verdict};
use crate::statement::Charge;

pub(super) fn judge(run: &Run<'_>, verdict: &mut Verdict) {
    effect_count(run, &run.charges, verdict);
    honesty(run, &mut verdict.violations);
    answers(run, &run.charges, &mut verdict.violations);
    key_reuse(run, &mut verdict.violations);
}

/// `I7`: the first charge of a key is its effect; each further one must be explained by a
/// cause the model allows (MODEL.md, "Non-guarantees"), one cause per charge. Each extra
/// charge is counted under the cause that allows it.
fn effect_count(run: &Run<'_>, charges: &Grouped<&Charge<usize>>, verdict: &mut Verdict) {
    for (key, charges) in charges.iter().enumerate() {
        // A key with effects that commit with the record is `T1`'s (`transaction`).
        if charges.len() < 2 || super::transaction::has_commits(run, charges) {
            continue;
        }
        let extras = charges.len() - 1;
        let causes = causes(run, charges);
        let message = run.is_message_key(key);
        for cause in causes.iter().take(extras) {
            verdict.count_extra(*cause, false, message);
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

/// The allowed causes the charges of one key (`charges`, in order) bring with them, one per
/// charge that brings one: a charge explains one extra charge of its key.
pub(super) fn causes(run: &Run<'_>, charges: &[&Charge<usize>]) -> Vec<Cause> {
    let mut causes = Vec::with_capacity(charges.len());
    for (i, charge) in charges.iter().enumerate() {
        let cause = charge
            .by
            .and_then(|who| cause_of(run, who, charges))
            .or_else(|| retention_expired(run, charge, &charges[..i]));
        causes.extend(cause);
    }
    causes
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
    let steps = run.steps_of_record.get(facts.record).unwrap_or(&[]);
    let reply_of = |step: usize| {
        run.history.events[step]
            .kind
            .store_step()
            .and_then(|step| step.answer.reply())
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
