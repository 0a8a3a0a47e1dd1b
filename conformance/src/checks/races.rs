//! Reserves racing on one key (`I1`): sent together, on a free key and on one whose holder's
//! lease has run out, exactly one is granted and every other is told the key is in flight;
//! and a holder's late complete racing another caller's takeover never leaves both done.
//!
//! The racing commands are sent at once, each on the store's own connections, and their
//! order is unknown, so they are held to what every order of them must give rather than to
//! the machine step by step; the records they leave are then read and judged.

use std::time::Duration;

use futures::future::join_all;
use idem_core::record::{Command, Completion, Record, Reply};
use idem_core::{Key, Operation};

use super::{LONG, Names, Session, fingerprint, owner, value};
use crate::judge::describe_reply;
use crate::report::Divergence;
use crate::subject::Subject;

/// Callers per race.
const RACERS: u128 = 16;
/// Races of each kind.
const ROUNDS: usize = 4;
/// The lease of a holder whose lease must run out before the race.
const SHORT: Duration = Duration::from_millis(60);

pub(crate) async fn run<S: Subject>(subject: &S) -> Result<String, Divergence> {
    let names = Names::new("races");
    let mut session = Session::new(subject);
    let mut n = 0;
    for _ in 0..ROUNDS {
        let record = names.record(n);
        n += 1;
        reserves(&mut session, &record, "a free key").await?;

        let record = names.record(n);
        n += 1;
        let (_, timing) = session.send(&record, reserve(1_000, SHORT)).await?;
        session
            .wait_until(
                timing
                    .latest()
                    .saturating_add(SHORT + Duration::from_millis(1)),
            )
            .await?;
        reserves(&mut session, &record, "a key whose lease ran out").await?;

        let record = names.record(n);
        n += 1;
        complete_against_takeover(&mut session, &record).await?;
    }
    Ok(format!(
        "{ROUNDS} rounds: {RACERS} reserves on a free key, {RACERS} on an expired one, a late \
         complete against a takeover"
    ))
}

fn reserve(who: u128, lease: Duration) -> Command {
    Command::Reserve {
        owner: owner(who),
        fingerprint: fingerprint(1),
        lease,
    }
}

async fn reserves<S: Subject>(
    session: &mut Session<'_, S>,
    record: &(Operation, Key),
    what: &str,
) -> Result<(), Divergence> {
    let (operation, key) = record;
    let replies = join_all((1..=RACERS).map(|who| {
        session
            .subject
            .apply_timed(operation, key, reserve(who, LONG))
    }))
    .await;
    let mut granted = Vec::new();
    let mut lines = Vec::new();
    for (who, reply) in (1..=RACERS).zip(replies) {
        lines.push(match &reply {
            Ok((reply, timing)) => format!("owner {who}: {} {timing}", describe_reply(reply)),
            Err(error) => format!("owner {who}: error: {error}"),
        });
        match reply {
            Ok((Reply::Reserved(grant), _)) => granted.push(grant.owner),
            Ok((Reply::InFlight { .. }, _)) => {}
            Ok((other, _)) => {
                return Err(Divergence {
                    detail: format!(
                        "{RACERS} racing reserves on {what}: owner {who} was answered {other:?}"
                    ),
                    history: lines,
                });
            }
            Err(error) => {
                return Err(Divergence {
                    detail: format!(
                        "{RACERS} racing reserves on {what}: owner {who}'s failed: {error}"
                    ),
                    history: lines,
                });
            }
        }
    }
    if granted.len() != 1 {
        return Err(Divergence {
            detail: format!(
                "{RACERS} racing reserves on {what} granted the key {} times (I1: exactly once)",
                granted.len()
            ),
            history: lines,
        });
    }
    // The record is the one winner's.
    let (read, _) = session.send_fresh_read(record).await?;
    match read {
        Reply::Read(Some(Record::Pending { owner, .. })) if owner == granted[0] => Ok(()),
        other => Err(Divergence {
            detail: format!(
                "after racing reserves on {what} won by {:?}, the record reads {other:?}",
                granted[0]
            ),
            history: lines,
        }),
    }
}

async fn complete_against_takeover<S: Subject>(
    session: &mut Session<'_, S>,
    record: &(Operation, Key),
) -> Result<(), Divergence> {
    let (_, timing) = session.send(record, reserve(1, SHORT)).await?;
    session
        .wait_until(
            timing
                .latest()
                .saturating_add(SHORT + Duration::from_millis(1)),
        )
        .await?;
    let (operation, key) = record;
    let late = Command::Complete {
        owner: owner(1),
        fingerprint: fingerprint(1),
        result: value(b"late"),
        retention: LONG,
    };
    let (completed, taken) = futures::join!(
        session.subject.apply_timed(operation, key, late),
        session
            .subject
            .apply_timed(operation, key, reserve(2, LONG)),
    );
    let lines = vec![
        format!("late complete by owner 1: {completed:?}"),
        format!("takeover by owner 2: {taken:?}"),
    ];
    let fail = |detail: String| Divergence {
        detail,
        history: lines.clone(),
    };
    let completed = completed
        .map_err(|e| fail(format!("the late complete failed: {e}")))?
        .0;
    let taken = taken
        .map_err(|e| fail(format!("the takeover failed: {e}")))?
        .0;
    let (read, _) = session.send_fresh_read(record).await?;
    let consistent = match (&completed, &taken) {
        // The complete came first: the takeover finds the result and replays it.
        (Reply::Completed(Completion::AfterLeaseExpiry), Reply::Replay { .. }) => {
            matches!(&read, Reply::Read(Some(Record::Completed { owner: o, .. })) if *o == owner(1))
        }
        // The takeover came first: the late complete is refused.
        (Reply::Refused(_), Reply::Reserved(grant)) if grant.owner == owner(2) => {
            matches!(&read, Reply::Read(Some(Record::Pending { owner: o, .. })) if *o == owner(2))
        }
        _ => false,
    };
    if consistent {
        Ok(())
    } else {
        Err(fail(format!(
            "a late complete racing a takeover ended as {completed:?} and {taken:?}, the record \
             reading {read:?}"
        )))
    }
}
