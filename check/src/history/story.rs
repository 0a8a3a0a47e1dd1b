//! A history written for a person: its `Display`, the run as a story, one line per event,
//! which a counterexample prints.

use std::fmt;

use idem_core::record::{Command, Record, Reply, StoredResult};
use idem_core::{Fingerprint, Outcome};

use super::{ActionEnd, Answer, EventKind, History, Received, StoreStep};

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.story().fmt(f)
    }
}

/// A history written for a person: its keys, then one line per event.
#[derive(Debug, Clone, Copy)]
pub struct Story<'h>(pub(super) &'h History);

impl fmt::Display for Story<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let history = self.0;
        for (index, key) in history.keys.iter().enumerate() {
            write!(f, "key {index}: {} {}", key.operation, key.key)?;
            if let Some((operation, filed)) = &key.filed {
                write!(f, " (filed as {operation} {filed})")?;
            }
            if key.corrupt {
                write!(f, " (holds a value that is not a record)")?;
            }
            writeln!(f)?;
        }
        for message in &history.messages {
            writeln!(f, "message {}: key {}", message.label, message.key)?;
        }
        for (index, event) in history.events.iter().enumerate() {
            let (label, key) = history
                .attempts
                .get(event.who)
                .map_or(("?", 0), |a| (a.label.as_str(), a.key));
            writeln!(
                f,
                "#{index:<3} t+{:<6} {label} key {key}: {}",
                event.at,
                Explain(history, &event.kind)
            )?;
        }
        Ok(())
    }
}

/// An event kind written for a person.
struct Explain<'a>(&'a History, &'a EventKind);

impl fmt::Display for Explain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let history = self.0;
        match self.1 {
            EventKind::Sent(kind) => write!(f, "sends {kind}"),
            EventKind::Store(step) => {
                let StoreStep {
                    command,
                    before,
                    answer,
                    after,
                } = &**step;
                write!(f, "store gets {} ", ShortCommand(command))?;
                match answer {
                    Answer::NotApplied => write!(f, "-> NOT APPLIED"),
                    Answer::Corrupt => write!(f, "-> CORRUPT (the key holds no record)"),
                    Answer::Reply(reply) => write!(
                        f,
                        "-> {} | {} => {}",
                        ShortReply(history, reply),
                        ShortRecord(history, before.as_ref()),
                        ShortRecord(history, after.as_ref())
                    ),
                }
            }
            EventKind::Received(received) => match received {
                Received::Reply(reply) => write!(f, "receives {}", ShortReply(history, reply)),
                Received::Corrupt => write!(f, "receives CORRUPT"),
                Received::Failed => write!(f, "receives a store failure (reply lost or refused)"),
                Received::GivenUp => write!(f, "gets no reply: HUNG, given up at its deadline"),
            },
            EventKind::Run { unprotected } => {
                if *unprotected {
                    write!(f, "runs its action UNPROTECTED (failed open)")
                } else {
                    write!(f, "runs its action")
                }
            }
            EventKind::Charged { charge } => {
                let id = history
                    .statement
                    .lines()
                    .get(*charge)
                    .map_or("?", |line| line.id.as_str());
                write!(f, "CHARGED {id}")
            }
            EventKind::ActionEnded(end) => match end {
                ActionEnd::Succeeded => write!(f, "action succeeded"),
                ActionEnd::Unrecordable => write!(f, "action succeeded, value not recordable"),
                ActionEnd::Failed => write!(f, "action declined (failed, no effect)"),
                ActionEnd::Panicked => write!(f, "the action PANICKED"),
            },
            EventKind::Transactional => write!(f, "its action commits with its record"),
            EventKind::Wrote { id } => write!(f, "writes {id} in its transaction (uncommitted)"),
            EventKind::Committed { charge } => {
                let id = history
                    .statement
                    .lines()
                    .get(*charge)
                    .map_or("?", |line| line.id.as_str());
                write!(f, "COMMITTED {id} with its record")
            }
            EventKind::LeaseView { until } => {
                write!(f, "(its machine says: lease held, until t+{until})")
            }
            EventKind::Crashed => write!(f, "CRASHED mid-action"),
            EventKind::Paused { until } => write!(f, "PAUSED until t+{until}"),
            EventKind::Abandoned => write!(f, "ABANDONED by its driver: settling from here on"),
            EventKind::Settled(outcome) => {
                write!(f, "settled: {}", ShortOutcome(outcome))
            }
            EventKind::Finished(outcome) => write!(f, "outcome {}", ShortOutcome(outcome)),
            EventKind::Delivered { message, delivery } => {
                let label = history
                    .messages
                    .get(*message)
                    .map_or("?", |m| m.label.as_str());
                write!(f, "runs delivery {delivery} of message {label}")
            }
            EventKind::Disposed { disposition, lost } => {
                match disposition {
                    idem_core::Disposition::Ack => write!(f, "consumer ACKS")?,
                    idem_core::Disposition::Redeliver { after } => {
                        write!(
                            f,
                            "consumer asks for redelivery after {}ms",
                            after.as_millis()
                        )?;
                    }
                    idem_core::Disposition::DeadLetter(reason) => {
                        write!(f, "consumer DEAD-LETTERS ({})", reason.name())?;
                    }
                }
                if *lost {
                    write!(f, ", LOST on its way to the broker")?;
                }
                Ok(())
            }
            EventKind::Stuck(why) => write!(f, "STUCK: {why}"),
            EventKind::Protocol(why) => write!(f, "PROTOCOL ERROR: {why}"),
        }
    }
}

fn fp_label(fingerprint: Fingerprint) -> String {
    fingerprint.to_string().chars().take(6).collect()
}

struct ShortCommand<'a>(&'a Command);

impl fmt::Display for ShortCommand<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Command::Reserve {
                fingerprint, lease, ..
            } => write!(
                f,
                "reserve(fp {}, lease {}ms)",
                fp_label(*fingerprint),
                lease.as_millis()
            ),
            Command::Complete { result, .. } => write!(f, "complete({})", ResultLabel(result)),
            Command::Renew { lease, .. } => write!(f, "renew({}ms)", lease.as_millis()),
            Command::Release { .. } => write!(f, "release"),
            Command::Read => write!(f, "read"),
        }
    }
}

/// A stored result written for a person.
pub(crate) struct ResultLabel<'a>(pub(crate) &'a StoredResult);

impl fmt::Display for ResultLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            StoredResult::Value(body) => {
                write!(f, "{:?}", String::from_utf8_lossy(body.as_bytes()))
            }
            StoredResult::NotStored => write!(f, "no body"),
            StoredResult::Panicked => write!(f, "PANICKED, outcome unknown"),
        }
    }
}

struct ShortReply<'a>(&'a History, &'a Reply);

impl fmt::Display for ShortReply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let history = self.0;
        match self.1 {
            Reply::Reserved(r) => match r.lease_until {
                Some(until) => write!(
                    f,
                    "Reserved({} until t+{})",
                    history.owner_label(r.owner),
                    until.as_millis()
                ),
                None => write!(f, "Reserved({})", history.owner_label(r.owner)),
            },
            Reply::InFlight {
                lease_until: Some(until),
            } => write!(f, "InFlight(until t+{})", until.as_millis()),
            Reply::InFlight { lease_until: None } => write!(f, "InFlight"),
            Reply::Replay { result, .. } => write!(f, "Replay({})", ResultLabel(result)),
            Reply::KeyReuse { stored } => write!(f, "KeyReuse(stored fp {})", fp_label(*stored)),
            Reply::Completed(c) => write!(f, "Completed({c:?})"),
            Reply::Renewed(r) => match r.lease_until {
                Some(until) => write!(f, "Renewed(until t+{})", until.as_millis()),
                None => f.write_str("Renewed"),
            },
            Reply::Released => write!(f, "Released"),
            Reply::Refused(r) => write!(f, "Refused({r:?})"),
            Reply::Read(record) => write!(f, "Read({})", ShortRecord(history, record.as_ref())),
        }
    }
}

/// A record (or an absent key) written for a person.
pub(crate) struct ShortRecord<'a>(pub(crate) &'a History, pub(crate) Option<&'a Record>);

impl fmt::Display for ShortRecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let history = self.0;
        match self.1 {
            None => write!(f, "absent"),
            Some(Record::Pending {
                owner,
                fingerprint,
                lease_until,
                fence,
            }) => {
                write!(
                    f,
                    "Pending({}, fp {}, until t+{}",
                    history.owner_label(*owner),
                    fp_label(*fingerprint),
                    lease_until.as_millis()
                )?;
                if let Some(fence) = fence {
                    write!(f, ", fence {fence}")?;
                }
                f.write_str(")")
            }
            Some(Record::Completed {
                owner,
                fingerprint,
                result,
                expires_at,
            }) => write!(
                f,
                "Completed({}, fp {}, {}, until t+{})",
                history.owner_label(*owner),
                fp_label(*fingerprint),
                ResultLabel(result),
                expires_at.as_millis()
            ),
        }
    }
}

struct ShortOutcome<'a>(&'a Outcome);

impl fmt::Display for ShortOutcome<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Outcome::Replayed { result } => write!(f, "Replayed({})", ResultLabel(result)),
            Outcome::KeyReuse { stored, given } => write!(
                f,
                "KeyReuse(stored fp {}, given fp {})",
                fp_label(*stored),
                fp_label(*given)
            ),
            other => write!(f, "{other:?}"),
        }
    }
}
