//! The pass over every step of a run: each command sent (`sent`) and each store step
//! applied (`applied`) is judged in turn, with what they need carried along (the value that
//! is not a record a key still holds, the lease each holder asked for); here also rule 11
//! for a key that holds no record (the store never answers for it), every lease view
//! (the lease view), and the stuck attempt and the broken driver protocol where they are
//! seen (liveness, driver protocol).

use idem_core::Timestamp;
use idem_core::record::{Command, Record};

use super::applied::{Step, store_step};
use super::fences::Fences;
use super::sent::command_sent;
use super::{Rule, Run, Violation};
use crate::history::{Answer, Event, EventKind, ShortRecord, StoreStep};

pub(super) fn judge(run: &Run<'_>, found: &mut Vec<Violation>) {
    let history = run.history;
    // Whether each record still holds the value that is not a record it started with.
    let mut garbage: Vec<bool> = (0..run.steps_of_record.len())
        .map(|record| {
            history
                .keys
                .iter()
                .enumerate()
                .any(|(k, key)| key.corrupt && run.record_of_key.get(k) == Some(&record))
        })
        .collect();
    // For each attempt, the latest lease end its applied reserves and renewals asked for.
    let mut asked_until: Vec<u64> = vec![0; run.facts.len()];
    let mut view_reported: Vec<bool> = vec![false; run.facts.len()];
    let mut fences = Fences::new(run.steps_of_record.len());
    for &index in &run.notable {
        let event = &history.events[index];
        match &event.kind {
            EventKind::Store(step) => {
                let StoreStep {
                    command,
                    before,
                    answer,
                    after,
                } = &**step;
                command_sent(run, index, event, command, found);
                let record = run.facts.get(event.who).map_or(0, |f| f.record);
                let Answer::Reply(reply) = answer else {
                    continue;
                };
                if let Some(holds_garbage) = garbage.get_mut(record)
                    && *holds_garbage
                {
                    found.push(run.violation(
                        Rule::CorruptRecordRunsNothing,
                        Some(index),
                        format!(
                            "the key of {} holds a value that is not a record, and the store answered its {} with {reply:?}{}",
                            run.label(event.who),
                            command.name(),
                            if after.is_some() { ", writing a record over it" } else { "" }
                        ),
                    ));
                    if after.is_some() {
                        *holds_garbage = false;
                    }
                }
                let step = Step {
                    index,
                    event,
                    command,
                    before: before.as_ref(),
                    reply,
                    after: after.as_ref(),
                };
                store_step(run, &step, &asked_until, found);
                fences.step(run, index, record, after.as_ref(), found);
                if let Command::Reserve { lease, .. } | Command::Renew { lease, .. } = command
                    && let Some(asked) = asked_until.get_mut(event.who)
                {
                    let end = Timestamp::from_millis(event.at).saturating_add(*lease);
                    *asked = (*asked).max(end.as_millis());
                }
            }
            EventKind::LeaseView { until } => {
                if !view_reported.get(event.who).copied().unwrap_or(true)
                    && let Some(violation) = lease_view(run, index, event, *until)
                {
                    view_reported[event.who] = true;
                    found.push(violation);
                }
            }
            EventKind::Stuck(why) => found.push(run.violation(
                Rule::Liveness,
                Some(index),
                format!("{} is stuck: {why}", run.label(event.who)),
            )),
            EventKind::Protocol(why) => found.push(run.violation(
                Rule::DriverProtocol,
                Some(index),
                format!("{}: {why}", run.label(event.who)),
            )),
            _ => {}
        }
    }
}

/// The lease view: when the attempt's machine said its lease was held, confirmed until
/// `until`, the key held the attempt's own reservation, live then and lasting at least
/// until `until`.
fn lease_view(run: &Run<'_>, index: usize, event: &Event, until: u64) -> Option<Violation> {
    let who = event.who;
    let record = run.facts.get(who)?.record;
    let steps = run.steps_of_record.get(record)?;
    // The record's steps are in order: those before the view end where the first at or
    // after it would stand.
    let earlier = steps.partition_point(|&step| step < index);
    let state = steps[..earlier]
        .iter()
        .rev()
        .map(|&step| &run.history.events[step])
        .find(|e| e.at <= event.at)
        .and_then(|e| match &e.kind {
            EventKind::Store(step) => step.after.as_ref(),
            _ => None,
        });
    let owner = run.history.attempts[who].owner;
    let holds = matches!(state, Some(Record::Pending { owner: holder, lease_until, .. })
        if *holder == owner
            && !lease_until_passed(*lease_until, event.at)
            && lease_until.as_millis() >= until);
    (!holds).then(|| {
        run.violation(
            Rule::LeaseView,
            Some(index),
            format!(
                "{}'s machine said at t+{} that its lease was held until t+{until}, but the key then held {}",
                run.label(who),
                event.at,
                ShortRecord(run.history, state)
            ),
        )
    })
}

fn lease_until_passed(lease_until: Timestamp, at: u64) -> bool {
    lease_until.as_millis() <= at
}
