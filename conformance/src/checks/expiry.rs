//! Expiry by the store's clock (rule 10): a key is polled across the end of a lease, of a
//! renewed lease, and of a retention. Every poll is judged at the instant the store decided
//! it, so a store that grants a millisecond early or late, rounds its times, or judges by
//! another clock than the one it reports, diverges at the boundary.

use std::time::Duration;

use idem_core::record::{Command, Reply};

use super::{LONG, Names, Session, fingerprint, owner, value};
use crate::report::Divergence;
use crate::subject::Subject;

/// Polls stop here: a key still held this long after its end has diverged long before.
const GIVE_UP: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy)]
enum End {
    Lease,
    RenewedLease,
    Retention,
}

pub(crate) async fn run<S: Subject>(subject: &S) -> Result<String, Divergence> {
    let names = Names::new("expiry");
    let mut session = Session::new(subject);
    let mut polls = 0;
    let mut n = 0;
    for end in [End::Lease, End::RenewedLease, End::Retention] {
        // A slow store may answer the first poll after the end already; a longer span then
        // gives the polls room to see both sides.
        let mut span = Duration::from_millis(40);
        let mut seen_both = false;
        for _ in 0..4 {
            let record = names.record(n);
            n += 1;
            let (held, count) = cross(&mut session, &record, end, span).await?;
            polls += count;
            if held > 0 {
                seen_both = true;
                break;
            }
            span *= 3;
        }
        if !seen_both {
            return Err(session.divergence(format!(
                "{end:?}: every poll came after the end, even with a {span:?} span: the boundary \
                 was never crossed under observation"
            )));
        }
    }
    Ok(format!(
        "lease, renewed lease and retention ends crossed by {polls} judged polls"
    ))
}

/// Makes `end` happen `span` from now and polls the key with another caller's identical
/// request until it is granted; answers how many polls found the key still held, and how
/// many were sent.
async fn cross<S: Subject>(
    session: &mut Session<'_, S>,
    record: &(idem_core::Operation, idem_core::Key),
    end: End,
    span: Duration,
) -> Result<(usize, usize), Divergence> {
    let lease = match end {
        End::Retention => LONG,
        End::Lease | End::RenewedLease => span,
    };
    session
        .send(
            record,
            Command::Reserve {
                owner: owner(1),
                fingerprint: fingerprint(1),
                lease,
            },
        )
        .await?;
    match end {
        End::Lease => {}
        End::RenewedLease => {
            tokio::time::sleep(span / 2).await;
            session
                .send(
                    record,
                    Command::Renew {
                        owner: owner(1),
                        lease: span,
                    },
                )
                .await?;
        }
        End::Retention => {
            session
                .send(
                    record,
                    Command::Complete {
                        owner: owner(1),
                        fingerprint: fingerprint(1),
                        result: value(b"kept"),
                        retention: span,
                    },
                )
                .await?;
        }
    }
    let started = tokio::time::Instant::now();
    let (mut held, mut sent) = (0, 0);
    loop {
        let (reply, _) = session
            .send(
                record,
                Command::Reserve {
                    owner: owner(2),
                    fingerprint: fingerprint(1),
                    lease: LONG,
                },
            )
            .await?;
        sent += 1;
        if matches!(reply, Reply::Reserved(_)) {
            return Ok((held, sent));
        }
        held += 1;
        if started.elapsed() > span + GIVE_UP {
            return Err(session.divergence_of(
                &record.0,
                &record.1,
                format!("{end:?}: the key was still held {GIVE_UP:?} after its end"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
