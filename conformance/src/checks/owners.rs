//! Owner checks (rule 4, `I2`): an owner that does not hold the key can neither complete,
//! renew nor release it, whether the holder is still running or has completed; and the record
//! is the holder's afterwards.

use idem_core::record::{Command, Refusal, Reply};

use super::{LONG, Names, Session, fingerprint, owner, value};
use crate::report::Divergence;
use crate::subject::Subject;

pub(crate) async fn run<S: Subject>(subject: &S) -> Result<String, Divergence> {
    let names = Names::new("owners");
    let mut session = Session::new(subject);
    let intruders = [
        Command::Complete {
            owner: owner(2),
            fingerprint: fingerprint(1),
            result: value(b"intruder"),
            retention: LONG,
        },
        Command::Renew {
            owner: owner(2),
            lease: LONG,
        },
        Command::Release { owner: owner(2) },
    ];
    let mut tried = 0;
    for (n, completed) in [false, true].into_iter().enumerate() {
        for (i, intruder) in intruders.iter().enumerate() {
            let record = names.record(n * intruders.len() + i);
            session
                .send(
                    &record,
                    Command::Reserve {
                        owner: owner(1),
                        fingerprint: fingerprint(1),
                        lease: LONG,
                    },
                )
                .await?;
            if completed {
                session
                    .send(
                        &record,
                        Command::Complete {
                            owner: owner(1),
                            fingerprint: fingerprint(1),
                            result: value(b"holder"),
                            retention: LONG,
                        },
                    )
                    .await?;
            }
            let (reply, _) = session.send(&record, intruder.clone()).await?;
            // The judge holds the reply to the machine; say plainly what it must be, too.
            if reply != Reply::Refused(Refusal::NotOwner) {
                return Err(session.divergence_of(
                    &record.0,
                    &record.1,
                    format!("an owner that does not hold the key was answered {reply:?}"),
                ));
            }
            let (read, _) = session.send(&record, Command::Read).await?;
            let holder = matches!(&read, Reply::Read(Some(r)) if r.owner() == owner(1));
            if !holder {
                return Err(session.divergence_of(
                    &record.0,
                    &record.1,
                    format!("after a refused intruder the record reads {read:?}"),
                ));
            }
            tried += 1;
        }
    }
    Ok(format!(
        "{tried} commands by a non-holder on held and completed keys, each refused"
    ))
}
