//! What happened in one run, in the order the checker's lock saw it.
//!
//! Every event is stamped with the store's logical clock at the moment it happened, so a
//! person can read a counterexample as a story: who sent what, what the record was before
//! and after (or that the key held a corrupt value), which commands hung or lost their
//! replies, who charged the card, whose action panicked, who crashed or went away, how an
//! abandoned attempt settled, and what each caller was told.

use std::fmt;

use idem_core::record::{Command, Record, Reply, StoredResult};
use idem_core::{Fingerprint, Outcome, OwnerToken};

use crate::world::{Answer, Delivery};

/// One attempt: the caller that made it and its number among that caller's attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId {
    /// The caller (a thread of the model).
    pub caller: usize,
    /// The attempt's number, from zero; a client retry is the next number.
    pub attempt: u32,
}

impl AttemptId {
    /// The owner token of this attempt: unique per attempt, as the protocol requires.
    pub fn owner(self) -> OwnerToken {
        OwnerToken::from_u128((u128::from(self.caller as u64) << 32) | u128::from(self.attempt + 1))
    }

    /// The attempt that holds `owner`, if the token was made by [`AttemptId::owner`].
    pub fn of_owner(owner: OwnerToken) -> Option<Self> {
        let bits = owner.as_u128();
        let caller = usize::try_from(bits >> 32).ok()?;
        let attempt = u32::try_from(bits & 0xffff_ffff).ok()?.checked_sub(1)?;
        Some(Self { caller, attempt })
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}.{}", self.caller, self.attempt)
    }
}

/// One thing that happened.
#[derive(Debug, Clone)]
pub struct Event {
    /// The store's logical clock, in milliseconds, when it happened (for
    /// [`EventKind::BelievedHeld`], the time it speaks of).
    pub at: u64,
    /// Who did it.
    pub who: AttemptId,
    /// The key it concerned (an index into the scenario's keys).
    pub key: usize,
    /// The fingerprint of the request the attempt carries.
    pub fingerprint: Fingerprint,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
// Histories are short and written once; boxing the store step would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum EventKind {
    /// The store applied `command`, found the key corrupt, or never got the command.
    Store {
        /// The command as sent.
        command: Command,
        /// The stored state before.
        before: Option<Record>,
        /// What the store made of it.
        answer: Answer,
        /// The stored state after.
        after: Option<Record>,
        /// How the answer reached the caller: only [`Delivery::Normal`] delivers it; a lost
        /// reply or an unreachable store is a store error at once; a hung command is given
        /// up by the attempt at its reply deadline (this event is then written when the
        /// caller stops waiting, which is also when an applied hung command lands).
        delivery: Delivery,
    },
    /// The action ran and charged the card (the provider's statement has the line).
    Charged {
        /// The charge's result, returned to the caller and recorded.
        body: Vec<u8>,
    },
    /// The action ran and was declined: no effect, a failure for the caller.
    Declined,
    /// The attempt's machine said its lease was held (`LeaseState::Held`) when the store's
    /// clock read `held_at` (written down with the caller's next step).
    BelievedHeld {
        /// The store's clock when the machine said so.
        held_at: u64,
    },
    /// The caller crashed while its action ran: it never completes or releases.
    Crashed,
    /// The action panicked (written when it started, after its charge if it made one; the
    /// attempt learns of it when the action's wake-ups end).
    Panicked,
    /// The caller went away (attached mode) or its call ended fail-closed, and the driver
    /// abandoned the attempt (`Attempt::abandon`): from here on it only settles.
    Abandoned,
    /// The settlement of an abandoned attempt ended, with this outcome. Nobody waits for it.
    Settled(Outcome),
    /// The attempt ended with this outcome, given to its caller.
    Finished(Outcome),
    /// The attempt neither finished nor could move (a livelock or a stall).
    Stuck(String),
    /// The driver fed the machine an input it refused (a harness or core bug).
    Protocol(String),
}

/// A whole run.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Every event, in the order of the checker's lock.
    pub events: Vec<Event>,
}

impl History {
    /// The outcome of an attempt, if it finished.
    pub fn outcome(&self, who: AttemptId) -> Option<&Outcome> {
        self.events.iter().find_map(|e| match &e.kind {
            EventKind::Finished(outcome) if e.who == who => Some(outcome),
            _ => None,
        })
    }

    /// Whether the attempt crashed.
    pub fn crashed(&self, who: AttemptId) -> bool {
        self.events
            .iter()
            .any(|e| e.who == who && matches!(e.kind, EventKind::Crashed))
    }

    /// Whether the attempt's action panicked.
    pub fn panicked(&self, who: AttemptId) -> bool {
        self.events
            .iter()
            .any(|e| e.who == who && matches!(e.kind, EventKind::Panicked))
    }

    /// Whether the attempt was abandoned.
    pub fn abandoned(&self, who: AttemptId) -> bool {
        self.events
            .iter()
            .any(|e| e.who == who && matches!(e.kind, EventKind::Abandoned))
    }

    /// How the settlement of an abandoned attempt ended, if it did.
    pub fn settlement(&self, who: AttemptId) -> Option<&Outcome> {
        self.events.iter().find_map(|e| match &e.kind {
            EventKind::Settled(outcome) if e.who == who => Some(outcome),
            _ => None,
        })
    }

    /// Every outcome, with the attempt that got it.
    pub fn outcomes(&self) -> impl Iterator<Item = (&Event, &Outcome)> {
        self.events.iter().filter_map(|e| match &e.kind {
            EventKind::Finished(outcome) => Some((e, outcome)),
            _ => None,
        })
    }

    /// The number of charges on `key`: the card statement's line count.
    pub fn charges(&self, key: usize) -> usize {
        self.events
            .iter()
            .filter(|e| e.key == key && matches!(e.kind, EventKind::Charged { .. }))
            .count()
    }
}

impl fmt::Display for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, event) in self.events.iter().enumerate() {
            writeln!(
                f,
                "#{index:<3} t+{:<6} {} key {}: {}",
                event.at,
                event.who,
                event.key,
                Explain(&event.kind)
            )?;
        }
        Ok(())
    }
}

/// An event kind written for a person.
struct Explain<'a>(&'a EventKind);

impl fmt::Display for Explain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            EventKind::Store {
                command,
                before,
                answer,
                after,
                delivery,
            } => {
                write!(f, "{} ", ShortCommand(command))?;
                match answer {
                    Answer::NotApplied if *delivery == Delivery::Unreachable => {
                        return write!(f, "-> store unreachable (not applied)");
                    }
                    Answer::NotApplied => {
                        return write!(f, "-> HUNG, given up at its reply deadline (not applied)");
                    }
                    Answer::Corrupt => write!(f, "-> CORRUPT (the key holds no record)")?,
                    Answer::Reply(reply) => write!(f, "-> {}", ShortReply(reply))?,
                }
                match delivery {
                    Delivery::Normal => {}
                    Delivery::ReplyLost | Delivery::Unreachable => write!(f, " (reply lost)")?,
                    Delivery::Hung { .. } => {
                        write!(
                            f,
                            " (HUNG: applied as the caller gave it up, never answered)"
                        )?;
                    }
                }
                if *answer == Answer::Corrupt {
                    return Ok(());
                }
                write!(f, " | {} => {}", ShortRecord(before), ShortRecord(after))
            }
            EventKind::Charged { body } => {
                write!(f, "CHARGED {:?}", String::from_utf8_lossy(body))
            }
            EventKind::Declined => write!(f, "action declined (failed, no effect)"),
            EventKind::Crashed => write!(f, "CRASHED mid-action"),
            EventKind::Panicked => write!(f, "the action PANICKED"),
            EventKind::Abandoned => write!(f, "ABANDONED by its driver: settling from here on"),
            EventKind::Settled(outcome) => write!(f, "settled: {}", ShortOutcome(outcome)),
            EventKind::BelievedHeld { held_at } => {
                write!(f, "(its machine said at t+{held_at}: lease held)")
            }
            EventKind::Finished(outcome) => write!(f, "outcome {}", ShortOutcome(outcome)),
            EventKind::Stuck(why) => write!(f, "STUCK: {why}"),
            EventKind::Protocol(why) => write!(f, "PROTOCOL ERROR: {why}"),
        }
    }
}

fn owner_label(owner: OwnerToken) -> String {
    AttemptId::of_owner(owner).map_or_else(|| owner.to_string(), |who| who.to_string())
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

struct ResultLabel<'a>(&'a StoredResult);

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

struct ShortReply<'a>(&'a Reply);

impl fmt::Display for ShortReply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Reply::Reserved(r) => match r.lease_until {
                Some(until) => write!(
                    f,
                    "Reserved({} until t+{})",
                    owner_label(r.owner),
                    until.as_millis()
                ),
                None => write!(f, "Reserved({})", owner_label(r.owner)),
            },
            Reply::InFlight { lease_until } => {
                write!(f, "InFlight(until t+{})", lease_until.as_millis())
            }
            Reply::Replay { result } => write!(f, "Replay({})", ResultLabel(result)),
            Reply::KeyReuse { stored } => write!(f, "KeyReuse(stored fp {})", fp_label(*stored)),
            Reply::Completed(c) => write!(f, "Completed({c:?})"),
            Reply::Renewed(r) => match r.lease_until {
                Some(until) => write!(f, "Renewed(until t+{})", until.as_millis()),
                None => f.write_str("Renewed"),
            },
            Reply::Released => write!(f, "Released"),
            Reply::Refused(r) => write!(f, "Refused({r:?})"),
            Reply::Read(record) => write!(f, "Read({})", ShortRecord(record)),
        }
    }
}

/// A record (or an absent key) written for a person.
pub(crate) struct ShortRecord<'a>(pub(crate) &'a Option<Record>);

impl fmt::Display for ShortRecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => write!(f, "absent"),
            Some(Record::Pending {
                owner,
                fingerprint,
                lease_until,
            }) => write!(
                f,
                "Pending({}, fp {}, until t+{})",
                owner_label(*owner),
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
                owner_label(*owner),
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
