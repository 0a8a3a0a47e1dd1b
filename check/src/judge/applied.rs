//! The rules on each store step the store applied, on the store's own clock: one live
//! holder (`I1`), only the owner completes, renews or releases (`I2`), a completed record
//! never changes (`I3`), another request is refused and never replayed (`I4`), a release
//! records nothing (`I5`), a reservation lives no longer than its holder's leases (`I6`),
//! an expired record answers as an absent key (`I9`), a lease never shrinks (`I10`), the
//! holder's repeated reserve is its reservation unchanged (`I11`); and for a result just
//! recorded, `I5`, `I8` and rule 11's "outcome unknown".

use idem_core::Timestamp;
use idem_core::record::{Command, Completion, Record, Refusal, Reply, StoredResult};

use super::{Rule, Run, Violation};
use crate::history::Event;

/// One applied store command.
pub(super) struct Step<'a> {
    pub(super) index: usize,
    pub(super) event: &'a Event,
    pub(super) command: &'a Command,
    pub(super) before: Option<&'a Record>,
    pub(super) reply: &'a Reply,
    pub(super) after: Option<&'a Record>,
}

pub(super) fn store_step(
    run: &Run<'_>,
    step: &Step<'_>,
    asked_until: &[u64],
    found: &mut Vec<Violation>,
) {
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
