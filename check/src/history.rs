//! What happened in one run, in order, every event stamped with the store's clock: the one
//! vocabulary in which the simulation and the model checkers write their runs down, and
//! which the [judge](mod@crate::judge) reads.
//!
//! A history names its keys and its attempts once (what each key is called and whether it
//! starts out holding a value that is not a record; each attempt's key, request and owner
//! token) and then lists what happened:
//!
//! - each command an attempt **sent**, what the **store** made of it (the record before and
//!   after, and the reply, or that the key holds no record, or that the command was never
//!   applied), and what the attempt **received** back (the reply, a failure, "corrupt", or
//!   nothing by its reply deadline);
//! - the action: when it was handed out (**run**, under a reservation or unprotected), its
//!   **charge** (a line of the card statement, which the history keeps), how it **ended**;
//! - abnormal ends: a holder that **crashed** or **paused**, an attempt **abandoned** by its
//!   driver and how its **settlement** ended, a caller that got **stuck**, a driver that fed
//!   the machine an input it refused;
//! - what the attempt machine said of its own lease (a **lease view**);
//! - each attempt's **outcome**.
//!
//! Its `Display` is the run as a story, one line per event, which a counterexample prints.

use std::fmt;

use idem_core::record::{Command, CommandKind, Record, Reply, StoredResult};
use idem_core::{Fingerprint, Outcome, OwnerToken};

use crate::statement::Statement;

/// A key of the run, as the callers name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// The operation the key is scoped to.
    pub operation: String,
    /// The key, as the callers give it.
    pub key: String,
    /// What the store files the record under, when that is not `(operation, key)` byte for
    /// byte (a store that rewrites keys, `I12`). Keys filed alike share one record.
    pub filed: Option<(String, String)>,
    /// Whether the key holds a value that is not a record when the run starts.
    pub corrupt: bool,
}

/// An attempt of the run: one try of one caller, with an owner token of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptSpec {
    /// How the story names it (`c0.1`, `w3`).
    pub label: String,
    /// Its key, an index into [`History::keys`].
    pub key: usize,
    /// The fingerprint of its request.
    pub fingerprint: Fingerprint,
    /// Its owner token.
    pub owner: OwnerToken,
}

/// What the store made of a command that reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The record machine's (or a broken variant's) reply.
    Reply(Reply),
    /// The key holds a value that is not a record: the store said so and changed nothing.
    Corrupt,
    /// The store did not apply the command (it was down, or the command never arrived).
    NotApplied,
}

impl Answer {
    /// The reply, if the command was applied to a record.
    pub fn reply(&self) -> Option<&Reply> {
        match self {
            Answer::Reply(reply) => Some(reply),
            Answer::Corrupt | Answer::NotApplied => None,
        }
    }
}

/// What came back to an attempt for the command it was waiting on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// The store's reply.
    Reply(Reply),
    /// The store's answer that the key holds a value that is not a record.
    Corrupt,
    /// A failure whose effect is unknown: the store refused, or the reply was lost.
    Failed,
    /// Nothing by the command's reply deadline: the attempt gave it up.
    GivenUp,
}

/// How an action ended, whatever the driver then fed the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionEnd {
    /// It succeeded, with its charge's id as its value.
    Succeeded,
    /// It succeeded (and charged), but its value cannot be recorded.
    Unrecordable,
    /// It failed without an effect (the provider declined or timed out).
    Failed,
    /// It panicked, before or after its charge.
    Panicked,
}

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The store's clock when it happened, in ms (for a [`EventKind::LeaseView`], the
    /// instant the view speaks of).
    pub at: u64,
    /// The attempt it happened to, an index into [`History::attempts`].
    pub who: usize,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
// Histories are written once and read once; boxing the store step would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The attempt's driver sent a command of this kind.
    Sent(CommandKind),
    /// A command of the attempt reached the store (or was refused by it): the record before
    /// and after, and the answer.
    Store {
        /// The command as the store got it.
        command: Command,
        /// The stored state before.
        before: Option<Record>,
        /// What the store made of it.
        answer: Answer,
        /// The stored state after.
        after: Option<Record>,
    },
    /// What came back for the command the attempt last sent.
    Received(Received),
    /// The attempt handed out its action: under its reservation, or unprotected (the store
    /// could not be reached and the policy is fail-open).
    Run {
        /// Whether the action runs without a reservation.
        unprotected: bool,
    },
    /// The action charged the card: line `charge` of the history's statement.
    Charged {
        /// An index into [`History::statement`]'s lines.
        charge: usize,
    },
    /// The action ended.
    ActionEnded(ActionEnd),
    /// The attempt machine said its lease was held (`LeaseState::Held`) at this event's
    /// time, confirmed until `until` (both on the store's clock).
    LeaseView {
        /// The end of the lease as the machine counts it, on the store's clock.
        until: u64,
    },
    /// The caller's process crashed while its action ran: it never completes or releases.
    Crashed,
    /// The caller's process paused until `until` (store's clock).
    Paused {
        /// When it resumes.
        until: u64,
    },
    /// The caller went away (an attached call dropped) or its call ended fail-closed, and
    /// the driver abandoned the attempt: from here on it only settles.
    Abandoned,
    /// The settlement of an abandoned attempt ended, with this outcome. Nobody waits for it.
    Settled(Outcome),
    /// The attempt ended with this outcome, given to its caller.
    Finished(Outcome),
    /// The attempt could not move on (a livelock, or the run's budget ran out).
    Stuck(String),
    /// The driver fed the attempt machine an input it refused, or did what a driver must
    /// not (a harness or core bug).
    Protocol(String),
}

/// A whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The keys, by index.
    pub keys: Vec<KeySpec>,
    /// The attempts, by index.
    pub attempts: Vec<AttemptSpec>,
    /// Every event, in the order it happened.
    pub events: Vec<Event>,
    /// The card statement, its keys indices into [`History::keys`].
    pub statement: Statement<usize>,
}

impl History {
    /// Names a key; returns its index.
    pub fn add_key(&mut self, spec: KeySpec) -> usize {
        self.keys.push(spec);
        self.keys.len() - 1
    }

    /// Names an attempt; returns its index.
    pub fn add_attempt(&mut self, spec: AttemptSpec) -> usize {
        self.attempts.push(spec);
        self.attempts.len() - 1
    }

    /// Writes down an event.
    pub fn push(&mut self, at: u64, who: usize, kind: EventKind) {
        self.events.push(Event { at, who, kind });
    }

    /// The action of attempt `who` charges the card under its key at `at`: a line of the
    /// statement and an event. Returns the charge's id.
    pub fn charge(&mut self, at: u64, who: usize) -> &str {
        let key = self.attempts.get(who).map_or(0, |attempt| attempt.key);
        self.statement.charge(key, Some(who), at);
        let charge = self.statement.len() - 1;
        self.push(at, who, EventKind::Charged { charge });
        &self.statement.lines()[charge].id
    }

    /// The attempt whose owner token is `owner`, if any.
    pub fn attempt_of(&self, owner: OwnerToken) -> Option<usize> {
        self.attempts.iter().position(|a| a.owner == owner)
    }

    /// How the story names the holder of `owner`.
    pub fn owner_label(&self, owner: OwnerToken) -> String {
        self.attempt_of(owner)
            .map_or_else(|| owner.to_string(), |who| self.attempts[who].label.clone())
    }

    /// The outcome the attempt's caller was given, if any.
    pub fn outcome(&self, who: usize) -> Option<&Outcome> {
        self.events.iter().find_map(|e| match &e.kind {
            EventKind::Finished(outcome) if e.who == who => Some(outcome),
            _ => None,
        })
    }

    /// Every outcome given to a caller, with its event.
    pub fn outcomes(&self) -> impl Iterator<Item = (&Event, &Outcome)> {
        self.events.iter().filter_map(|e| match &e.kind {
            EventKind::Finished(outcome) => Some((e, outcome)),
            _ => None,
        })
    }

    /// The run as a story, one line per event.
    pub fn story(&self) -> Story<'_> {
        Story(self)
    }
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.story().fmt(f)
    }
}

/// A history written for a person: its keys, then one line per event.
#[derive(Debug, Clone, Copy)]
pub struct Story<'h>(&'h History);

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
            EventKind::Store {
                command,
                before,
                answer,
                after,
            } => {
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
            Reply::InFlight { lease_until } => {
                write!(f, "InFlight(until t+{})", lease_until.as_millis())
            }
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
            }) => write!(
                f,
                "Pending({}, fp {}, until t+{})",
                history.owner_label(*owner),
                fp_label(*fingerprint),
                lease_until.as_millis()
            ),
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
