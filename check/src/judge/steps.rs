//! The rules judged at each step: every store step on the store's clock (`I1`-`I6`,
//! `I9`-`I12`, and what a complete or release may carry after a panic or a dropped action),
//! the key that holds no record, and every lease view.

use idem_core::Timestamp;
use idem_core::record::{Command, Completion, Record, Refusal, Reply, StoredResult};

use super::{Rule, Run, Violation};
use crate::history::{ActionEnd, Answer, Event, EventKind, ShortRecord};

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
    for (index, event) in history.events.iter().enumerate() {
        match &event.kind {
            EventKind::Store {
                command,
                before,
                answer,
                after,
            } => {
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

/// What a command may carry, whether or not the store applied it: `I12` for a reserve's
/// key; rule 11 for a release after a panic or a dropped action; and `I5` and rule 11 for
/// what a complete records.
fn command_sent(
    run: &Run<'_>,
    index: usize,
    event: &Event,
    command: &Command,
    found: &mut Vec<Violation>,
) {
    let who = event.who;
    let Some(facts) = run.facts.get(who) else {
        return;
    };
    let label = run.label(who);
    match command {
        Command::Reserve { .. } => {
            let key = run.history.attempts[who].key;
            if let Some(spec) = run.history.keys.get(key)
                && let Some((operation, filed)) = &spec.filed
            {
                found.push(run.violation(
                    Rule::I12,
                    Some(index),
                    format!(
                        "{label}'s key {} {} ({} characters) is filed as {operation:?} {} ({} characters)",
                        spec.operation,
                        spec.key,
                        spec.key.len(),
                        filed,
                        filed.len()
                    ),
                ));
            }
        }
        Command::Release { .. } => {
            if run.panicked(who) {
                found.push(run.violation(
                    Rule::PanicIsOutcomeUnknown,
                    Some(index),
                    format!(
                        "{label}'s action panicked (its effect may have happened), and it sent a release of the key"
                    ),
                ));
            }
            // A transactional action dropped mid-run took its writes with it (`T1`).
            if facts.dropped && !facts.transactional && facts.abandoned.is_some_and(|at| at < index)
            {
                found.push(run.violation(
                    Rule::DroppedActionKeepsKey,
                    Some(index),
                    format!(
                        "{label}'s action was dropped while it ran (its effect may have happened), and it sent a release of the key"
                    ),
                ));
            }
        }
        Command::Complete { result, .. } => {
            let ended = facts.ended.map(|(_, end)| end);
            let charge = run.effect_id(who);
            let (rule, fine) = match result {
                StoredResult::Panicked => (
                    Rule::PanicIsOutcomeUnknown,
                    ended == Some(ActionEnd::Panicked),
                ),
                _ if ended == Some(ActionEnd::Panicked) => (Rule::PanicIsOutcomeUnknown, false),
                StoredResult::Value(body) => (
                    Rule::I5,
                    ended == Some(ActionEnd::Succeeded)
                        && charge.is_some_and(|id| id.as_bytes() == body.as_bytes()),
                ),
                StoredResult::NotStored => (
                    Rule::I5,
                    ended == Some(ActionEnd::Unrecordable) && charge.is_some(),
                ),
            };
            if !fine {
                found.push(run.violation(
                    rule,
                    Some(index),
                    format!(
                        "{label} records {result:?} after its action ended {ended:?} with charge {:?}",
                        charge
                    ),
                ));
            }
        }
        Command::Renew { .. } | Command::Read => {}
    }
}

/// One applied store command.
struct Step<'a> {
    index: usize,
    event: &'a Event,
    command: &'a Command,
    before: Option<&'a Record>,
    reply: &'a Reply,
    after: Option<&'a Record>,
}

fn store_step(run: &Run<'_>, step: &Step<'_>, asked_until: &[u64], found: &mut Vec<Violation>) {
    let history = run.history;
    let who = step.event.who;
    let label = run.label(who);
    let now = Timestamp::from_millis(step.event.at);
    let live = step.before.filter(|record| !record.is_expired(now));
    let changed = step.before != step.after;
    let fingerprint = history.attempts[who].fingerprint;
    let mut violate = |rule, detail: String| {
        found.push(run.violation(rule, Some(step.index), detail));
    };
    let command_owner = match step.command {
        Command::Reserve { owner, .. }
        | Command::Complete { owner, .. }
        | Command::Renew { owner, .. }
        | Command::Release { owner } => Some(*owner),
        Command::Read => None,
    };

    // I1: nobody is granted the key, and no reservation is written over it, while another
    // owner's record is live.
    if let (Reply::Reserved(granted), Some(record)) = (step.reply, live)
        && record.owner() != granted.owner
    {
        violate(
            Rule::I1,
            format!(
                "{label} was granted the key while {} held it, live until t+{}",
                run.owner_label(record.owner()),
                record.expires_at().as_millis()
            ),
        );
    }
    if let (Some(Record::Pending { owner: holder, .. }), Some(Record::Pending { owner, .. })) =
        (live, step.after)
        && owner != holder
    {
        violate(
            Rule::I1,
            format!(
                "{label}'s {} wrote a reservation of {} over the live one of {}",
                step.command.name(),
                run.owner_label(*owner),
                run.owner_label(*holder)
            ),
        );
    }
    // I2: a complete, renew or release by another than the owner changes nothing and is
    // not told it succeeded.
    let fenced = matches!(
        step.command,
        Command::Complete { .. } | Command::Renew { .. } | Command::Release { .. }
    );
    if let (true, Some(record), Some(owner)) = (fenced, live, command_owner)
        && record.owner() != owner
    {
        let succeeded = matches!(
            step.reply,
            Reply::Renewed(_) | Reply::Released | Reply::Completed(_)
        );
        if changed || succeeded {
            violate(
                Rule::I2,
                format!(
                    "{label}'s {} changed, or was told it changed, the live record of {}",
                    step.command.name(),
                    run.owner_label(record.owner())
                ),
            );
        }
    }
    // I3: a live completed record never changes.
    if let (Some(record @ Record::Completed { .. }), true) = (live, changed) {
        violate(
            Rule::I3,
            format!(
                "{label}'s {} changed a completed record before it expired at t+{}",
                step.command.name(),
                record.expires_at().as_millis()
            ),
        );
    }
    // I4: another request is refused, never replayed.
    if let Reply::Replay { .. } = step.reply
        && live.map(Record::fingerprint) != Some(fingerprint)
    {
        violate(
            Rule::I4,
            format!("{label} was replayed a record of another request"),
        );
    }
    if let (Command::Reserve { fingerprint, .. }, Some(record)) = (step.command, live)
        && record.fingerprint() != *fingerprint
        && !matches!(step.reply, Reply::KeyReuse { .. })
    {
        violate(
            Rule::I4,
            format!(
                "{label}'s reserve under another fingerprint than the record's was answered {:?}",
                step.reply
            ),
        );
    }
    // I5: a release never records anything.
    if let (Command::Release { .. }, Some(Record::Completed { .. }), true) =
        (step.command, step.after, changed)
    {
        violate(
            Rule::I5,
            format!("{label}'s release recorded a result: a failure was cached"),
        );
    }
    // I9: an expired record answers every command exactly as an absent key; and I6 when
    // it is a reservation, whose holder then blocks its key past its lease.
    if step.before.is_some() && live.is_none() && !answers_as_absent(step.command, step.reply) {
        let detail = format!(
            "an expired record answered {label}'s {} with {:?}, not as an absent key",
            step.command.name(),
            step.reply
        );
        if let Some(Record::Pending { .. }) = step.before {
            violate(Rule::I6, detail.clone());
        }
        violate(Rule::I9, detail);
    }
    // I6: a reservation lives no longer than the leases its holder asked for, counted from
    // when the store applied each of its reserves and renewals: one that stopped renewing
    // (it crashed, or its action was dropped) frees its key within one lease.
    if let Some(Record::Pending {
        owner: holder,
        lease_until,
        ..
    }) = live
        && let Some(holder_attempt) = run.attempt_of(*holder)
        && let Some(&asked) = asked_until.get(holder_attempt)
        && asked > 0
        && step.event.at >= asked
    {
        violate(
            Rule::I6,
            format!(
                "the reservation of {} is live at t+{} (until t+{}), but every lease it asked for ended by t+{asked}",
                run.label(holder_attempt),
                step.event.at,
                lease_until.as_millis()
            ),
        );
    }
    // I10: a lease never shrinks.
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
        violate(
            Rule::I10,
            format!(
                "the lease of {} shrank from t+{} to t+{}",
                run.owner_label(*held_by),
                old.as_millis(),
                new.as_millis()
            ),
        );
    }
    if let (
        Command::Renew { .. },
        Some(Record::Pending { lease_until, .. }),
        Reply::Renewed(renewed),
    ) = (step.command, live, step.reply)
        && renewed.lease_until.is_none_or(|until| until < *lease_until)
    {
        violate(
            Rule::I10,
            format!(
                "{label}'s renewal was answered {:?}, short of the live lease until t+{}",
                renewed.lease_until,
                lease_until.as_millis()
            ),
        );
    }
    // I11: the holder's repeated reserve is its reservation, unchanged.
    if let (
        Command::Reserve { owner, .. },
        Some(Record::Pending {
            owner: holder,
            lease_until,
            ..
        }),
    ) = (step.command, live)
        && holder == owner
    {
        let same = matches!(step.reply, Reply::Reserved(r) if r.owner == *owner && r.lease_until == Some(*lease_until));
        if !same || changed {
            violate(
                Rule::I11,
                format!(
                    "{label}'s repeated reserve was answered {:?} or changed the record",
                    step.reply
                ),
            );
        }
    }
    // I5, I8 and rule 11 for a record that just became completed.
    if let (
        Some(Record::Completed {
            owner: by, result, ..
        }),
        true,
    ) = (step.after, changed)
    {
        recorded_result(run, *by, result, &mut violate);
    }
}

/// `I5` and `I8` for a record that just became `Completed`: it holds the charge of a
/// succeeded action of its owner; and rule 11: "outcome unknown" is recorded for an action
/// that panicked, and only for one.
fn recorded_result(
    run: &Run<'_>,
    by: idem_core::OwnerToken,
    result: &StoredResult,
    violate: &mut impl FnMut(Rule, String),
) {
    let Some(writer) = run.attempt_of(by) else {
        violate(
            Rule::I5,
            format!("a result was recorded for the unknown owner {by}"),
        );
        return;
    };
    let label = run.label(writer);
    match (result, run.panicked(writer)) {
        (StoredResult::Panicked, true) => return,
        (StoredResult::Panicked, false) => {
            violate(
                Rule::PanicIsOutcomeUnknown,
                format!("\"outcome unknown\" was recorded for {label}, whose action did not panic"),
            );
            return;
        }
        (_, true) => {
            violate(
                Rule::PanicIsOutcomeUnknown,
                format!("{label}'s action panicked, but its record holds {result:?}"),
            );
            return;
        }
        (_, false) => {}
    }
    let charge = run.facts[writer]
        .charge
        .and_then(|(_, line)| run.history.statement.lines().get(line));
    match (charge, result.value()) {
        (None, _) => violate(
            Rule::I5,
            format!("a result was recorded for {label}, whose action did not succeed"),
        ),
        (Some(charge), Some(stored)) if charge.id.as_bytes() != stored.as_bytes() => violate(
            Rule::I8,
            format!(
                "{label}'s record holds a body that is not its charge {}",
                charge.id
            ),
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
            matches!(reply, Reply::Refused(Refusal::LeaseLost))
        }
        Command::Read => matches!(reply, Reply::Read(None)),
    }
}

/// The lease view: when the attempt's machine said its lease was held, confirmed until
/// `until`, the key held the attempt's own reservation, live then and lasting at least
/// until `until`.
fn lease_view(run: &Run<'_>, index: usize, event: &Event, until: u64) -> Option<Violation> {
    let who = event.who;
    let record = run.facts.get(who)?.record;
    let steps = run.steps_of_record.get(record)?;
    let state = steps
        .iter()
        .rev()
        .filter(|&&step| step < index)
        .map(|&step| &run.history.events[step])
        .find(|e| e.at <= event.at)
        .and_then(|e| match &e.kind {
            EventKind::Store { after, .. } => after.as_ref(),
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
