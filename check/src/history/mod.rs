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
//!   for a **transactional** action, the writes it made uncommitted and their **commit**
//!   with the record (a line of the statement too);
//! - abnormal ends: a holder that **crashed** or **paused**, an attempt **abandoned** by its
//!   driver and how its **settlement** ended, a caller that got **stuck**, a driver that fed
//!   the machine an input it refused;
//! - what the attempt machine said of its own lease (a **lease view**);
//! - each attempt's **outcome**;
//! - for a message consumer (MODEL.md `C1`): the messages the broker holds (each
//!   publication of one, under its key), which **delivery** of which message an attempt
//!   runs, and the consumer's **disposition** of it (acknowledge, deliver again, dead-letter)
//!   with whether the broker got it.
//!
//! Its `Display` is the run as a story, one line per event, which a counterexample prints.

use idem_core::record::{Command, CommandKind, Record, Reply};
use idem_core::{
    Disposition, DownstreamKey, Fence, Fingerprint, Key, Operation, Outcome, OwnerToken,
};

use crate::statement::{Provider, Statement};

mod story;

pub use story::Story;
pub(crate) use story::{ResultLabel, ShortRecord};

/// A name of the `n`th thing of its kind in a history: `prefix` and the decimal digits of `n`
/// (`w12` for an attempt, `m3` for a message, `ch_4` for a charge), written without the
/// formatting machinery, which costs a simulated run more than the rest of making a worker.
pub fn numbered(prefix: &str, n: usize) -> String {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let mut name = String::with_capacity(prefix.len() + digits.len() - at);
    name.push_str(prefix);
    name.extend(digits[at..].iter().copied().map(char::from));
    name
}

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

impl KeySpec {
    /// The downstream key of calls under this key (MODEL.md `D1`), or `None` when its names
    /// are not a valid operation and key. Remembered for the last few keys asked about, in
    /// the whole process: a simulation asks for the same few keys in every run, and a key
    /// of 255 characters is five SHA-256 blocks.
    pub fn downstream_key(&self) -> Option<DownstreamKey> {
        type Remembered = Vec<((String, String), Option<DownstreamKey>)>;
        static REMEMBERED: std::sync::Mutex<Remembered> = std::sync::Mutex::new(Vec::new());
        let mut remembered = REMEMBERED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, key)) = remembered
            .iter()
            .find(|((operation, key), _)| *operation == self.operation && *key == self.key)
        {
            return *key;
        }
        let derived = match (Operation::new(&self.operation), Key::new(&self.key)) {
            (Ok(operation), Ok(key)) => Some(DownstreamKey::derive(&operation, &key)),
            _ => None,
        };
        if remembered.len() >= 64 {
            remembered.remove(0);
        }
        remembered.push(((self.operation.clone(), self.key.clone()), derived));
        derived
    }
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

/// A message the broker holds (MODEL.md `C1`): one publication, delivered until it is
/// acknowledged or dead-lettered. A producer that publishes one message twice makes two,
/// under one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSpec {
    /// How the story names it (`m0`).
    pub label: String,
    /// Its key, an index into [`History::keys`].
    pub key: usize,
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

/// What the store made of one command of an attempt: [`EventKind::Store`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStep {
    /// The command as the store got it.
    pub command: Command,
    /// The stored state before.
    pub before: Option<Record>,
    /// What the store made of it.
    pub answer: Answer,
    /// The stored state after.
    pub after: Option<Record>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The attempt's driver sent a command of this kind.
    Sent(CommandKind),
    /// A command of the attempt reached the store (or was refused by it): the record before
    /// and after, and the answer. Boxed: a store step is four times the size of any other
    /// event, and a run writes ten other events for each one, so an unboxed step would
    /// make every event that size (the simulation copies and the judge reads each of them).
    Store(Box<StoreStep>),
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
    /// The attempt's action is transactional (MODEL.md, "Effects that commit with the
    /// record"): its effect is writes in the store's own database that commit with its
    /// complete, or not at all. Written before anything else of the attempt.
    Transactional,
    /// The transactional action made its writes, uncommitted, naming them `id` (its value):
    /// they become an effect only if the store commits them with the record.
    Wrote {
        /// What the writes are called, and what the action returns.
        id: String,
    },
    /// The store committed the action's writes with the complete it just applied: line
    /// `charge` of the statement, under the id the writes were given.
    Committed {
        /// An index into [`History::statement`]'s lines.
        charge: usize,
    },
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
    /// The attempt runs delivery number `delivery` (1 for the first) of `message`, an index
    /// into [`History::messages`]: a consumer's call under the message's key (MODEL.md
    /// `C1`). Written before the attempt sends anything.
    Delivered {
        /// The message delivered.
        message: usize,
        /// Which delivery of it this is, as the broker counts them.
        delivery: u32,
    },
    /// The consumer's disposition of the delivery the attempt runs: what it tells the
    /// broker. `lost`: the broker never got it (an ack lost with its connection), so the
    /// delivery is still unacknowledged there.
    Disposed {
        /// Acknowledge, deliver again after a delay, or dead-letter with a reason.
        disposition: Disposition,
        /// Whether it was lost on its way to the broker.
        lost: bool,
    },
    /// The attempt could not move on (a livelock, or the run's budget ran out).
    Stuck(String),
    /// The driver fed the attempt machine an input it refused, or did what a driver must
    /// not (a harness or core bug).
    Protocol(String),
}

impl EventKind {
    /// A store step: what the store made of `command`.
    pub fn store(
        command: Command,
        before: Option<Record>,
        answer: Answer,
        after: Option<Record>,
    ) -> Self {
        EventKind::Store(Box::new(StoreStep {
            command,
            before,
            answer,
            after,
        }))
    }

    /// The store step, if this is one.
    pub fn store_step(&self) -> Option<&StoreStep> {
        match self {
            EventKind::Store(step) => Some(step),
            _ => None,
        }
    }
}

/// A whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The keys, by index.
    pub keys: Vec<KeySpec>,
    /// The attempts, by index.
    pub attempts: Vec<AttemptSpec>,
    /// The messages a broker holds, by index (none in a run without a broker).
    pub messages: Vec<MessageSpec>,
    /// Every event, in the order it happened.
    pub events: Vec<Event>,
    /// The card statement, its keys indices into [`History::keys`].
    pub statement: Statement<usize>,
    /// What the provider makes of the requests on the statement: which are effects (MODEL.md
    /// `D1`). [`Provider::Plain`] unless the run says otherwise.
    pub provider: Provider,
}

impl History {
    /// Empties the history, as if new, keeping the room its lists took: a simulation that
    /// writes one history a run on a thread writes each into the last one's buffers.
    pub fn clear(&mut self) {
        self.keys.clear();
        self.attempts.clear();
        self.messages.clear();
        self.events.clear();
        self.statement.clear();
        self.provider = Provider::default();
    }

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

    /// Names a message the broker holds; returns its index.
    pub fn add_message(&mut self, spec: MessageSpec) -> usize {
        self.messages.push(spec);
        self.messages.len() - 1
    }

    /// Writes down an event.
    pub fn push(&mut self, at: u64, who: usize, kind: EventKind) {
        self.events.push(Event { at, who, kind });
    }

    /// The action of attempt `who` charges the card under its key at `at`: a line of the
    /// statement and an event. Returns the charge's id.
    pub fn charge(&mut self, at: u64, who: usize) -> &str {
        self.charge_sending(at, who, None, None)
    }

    /// As [`charge`](Self::charge), the request carrying `downstream` as the provider's own
    /// idempotency key (MODEL.md `D1`) and `fence` as its holder's fence (`F1`).
    pub fn charge_sending(
        &mut self,
        at: u64,
        who: usize,
        downstream: Option<DownstreamKey>,
        fence: Option<Fence>,
    ) -> &str {
        let key = self.attempts.get(who).map_or(0, |attempt| attempt.key);
        self.statement
            .charge_sending(key, Some(who), at, downstream, fence);
        let charge = self.statement.len() - 1;
        self.push(at, who, EventKind::Charged { charge });
        &self.statement.lines()[charge].id
    }

    /// The store commits the writes `id` of attempt `who`'s transaction at `at`: a line of
    /// the statement and an event (MODEL.md, "Effects that commit with the record").
    pub fn commit(&mut self, at: u64, who: usize, id: String) {
        let key = self.attempts.get(who).map_or(0, |attempt| attempt.key);
        self.statement.commit(key, Some(who), at, id);
        let charge = self.statement.len() - 1;
        self.push(at, who, EventKind::Committed { charge });
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
