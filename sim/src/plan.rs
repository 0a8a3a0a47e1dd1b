//! What one run will do: the callers, their requests, their actions, the network and the
//! store's outages. Drawn from a seed for exploring, written by hand for the table.

use std::fmt;
use std::time::Duration;

use idem_core::{
    Fingerprint, InFlightPolicy, Key, Operation, Options, OptionsError, Redelivery,
    RedeliveryError, StoreFailurePolicy,
};

use crate::faults::{FaultKind, Faults};
use crate::rng::SimRng;

/// The store's clock starts this far ahead of simulated time, so a protocol that mixed the
/// caller's clock with the store's would be caught by the checks rather than hidden by two
/// clocks that happen to agree.
const STORE_EPOCH_MIN: u64 = 1_000_000;
/// Callers' clocks start near this offset; skew moves each one by up to
/// [`Plan::random`]'s skew either way.
pub(crate) const CALLER_EPOCH: u64 = 10_000_000;

/// One scope of keys: an operation and the keys requests use under it.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The operation.
    pub operation: Operation,
    /// The key.
    pub key: Key,
    /// Whether the store holds a value under this key that is not a record (another type,
    /// garbage bytes) from the start. The store answers every command on it "corrupt" and
    /// never changes it.
    pub corrupt: bool,
    /// Whether the action under this key is transactional (`Attempt::in_transaction`): its
    /// effect is writes in the store's own database that commit with its complete, at the
    /// store node, or roll back (MODEL.md, "Effects that commit with the record").
    pub transactional: bool,
}

/// A point in a try at which its caller goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerGone {
    /// The stage of the try whose start the delay counts from.
    pub stage: Stage,
    /// How long after the try first reaches `stage` the caller goes away, ms.
    pub after: u64,
}

/// A stage of a try, as the service sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// A reserve is out, or due.
    Reserve,
    /// Another holder has the key and the try waits for it.
    Waiting,
    /// The action runs.
    Action,
    /// The result is being recorded.
    Complete,
    /// A failure's reservation is being released.
    Release,
}

impl Stage {
    /// Every stage, in the order of a try.
    pub const ALL: [Stage; 5] = [
        Stage::Reserve,
        Stage::Waiting,
        Stage::Action,
        Stage::Complete,
        Stage::Release,
    ];
}

/// A window of simulated time in which the store is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// The first ms of the window.
    pub start: u64,
    /// The first ms after the window.
    pub end: u64,
    /// How the store fails in it.
    pub kind: OutageKind,
}

/// How an unavailable store fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutageKind {
    /// Every command is refused with an error (a connection refused, a server error).
    Refusing,
    /// Every command is swallowed: not applied, never answered (a hung server, a network
    /// partition). The attempt gives the command up at its reply deadline.
    Silent,
}

impl Outage {
    /// Whether simulated time `now` falls in the window.
    pub fn covers(&self, now: u64) -> bool {
        (self.start..self.end).contains(&now)
    }
}

/// One action as the provider will carry it out, relative to its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionPlan {
    /// How long the provider takes, in ms.
    pub duration: u64,
    /// Whether the provider fails (times out without charging).
    pub fails: bool,
    /// Whether the charge succeeds but its result cannot be encoded for the store
    /// (`ActionResult::Unrecordable`: recorded without a body).
    pub unrecordable: bool,
    /// When, after the start, the charge is made (ignored for a failing action).
    pub effect_at: u64,
    /// When, after the start, the holder crashes, if it does.
    pub crash_at: Option<u64>,
    /// When, after the start, the holder pauses, and for how long.
    pub pause: Option<(u64, u64)>,
    /// When, after the start, the action panics, if it does: it ends there, with its
    /// effect only if that came earlier.
    pub panic_at: Option<u64>,
    /// Where in this try the caller goes away, if it does.
    pub caller_gone: Option<CallerGone>,
}

impl ActionPlan {
    /// A provider call that takes `duration` ms and charges at its end.
    pub fn charge(duration: u64) -> Self {
        Self {
            duration,
            fails: false,
            unrecordable: false,
            effect_at: duration.saturating_sub(1),
            crash_at: None,
            pause: None,
            panic_at: None,
            caller_gone: None,
        }
    }

    /// A provider call that takes `duration` ms and fails without charging.
    pub fn failing(duration: u64) -> Self {
        Self {
            fails: true,
            ..Self::charge(duration)
        }
    }
}

/// One client: a request it sends, retries, and perhaps sends again much later.
#[derive(Debug, Clone)]
pub struct ClientPlan {
    /// When it first sends, in simulated ms.
    pub start: u64,
    /// Which [`Slot`] its request uses.
    pub slot: usize,
    /// The amount charged (the fingerprint's field besides the key).
    pub amount: u32,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// The options its attempts run with (their reply deadline included).
    pub options: Options,
    /// Whether the service runs its tries attached to the caller: a caller that goes away
    /// drops the action with it, and the service abandons the attempt
    /// (`Attempt::abandon`). Detached (the tokio driver's default), the try runs on to its
    /// end and is recorded.
    pub attached: bool,
    /// After how long without an answer it goes away and retries with the same key
    /// (`None`: it waits).
    pub timeout: Option<u64>,
    /// After an answer worth retrying (failure, in progress, unavailable), how long it waits.
    pub retry_delay: u64,
    /// The most tries, retries included (the late retry is extra).
    pub max_tries: u32,
    /// A retry long after a success, by this many ms (the batch job rerun).
    pub late_retry: Option<u64>,
    /// The caller's clock, in ms ahead of simulated time.
    pub clock_offset: u64,
    /// The action of each try, in order; tries past the end reuse the last.
    pub actions: Vec<ActionPlan>,
}

/// One message a broker holds (MODEL.md `C1`): a publication, delivered to consumers until
/// one acknowledges it or dead-letters it. A message published twice (a producer's retry) is
/// two of these with one slot and one body.
#[derive(Debug, Clone)]
pub struct MessagePlan {
    /// When it reaches the broker and is first delivered, in simulated ms.
    pub publish: u64,
    /// Which publication of its message this is (0 for the first; more are duplicates).
    pub copy: u32,
    /// Which [`Slot`] its key is: its message id.
    pub slot: usize,
    /// Its body's fingerprint.
    pub fingerprint: Fingerprint,
    /// The options each delivery's call runs with.
    pub options: Options,
    /// The consumer's redelivery policy: its deliveries, and its delays (the core's
    /// `Redelivery::dispose`).
    pub redelivery: Redelivery,
    /// How long the broker waits for a delivery's ack (or nak) before it delivers the
    /// message again, ms.
    pub ack_wait: u64,
    /// For each delivery, in order, whether its ack (if it sends one) is lost on its way
    /// to the broker; past the end, none is.
    pub acks_lost: Vec<bool>,
    /// The consumer's clock, in ms ahead of simulated time.
    pub clock_offset: u64,
    /// The handler of each delivery, in order; deliveries past the end run a plain
    /// handler (50 ms, one charge), so that a consumer that crashes on every delivery is
    /// not drawn.
    pub actions: Vec<ActionPlan>,
}

/// The network between callers and the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkPlan {
    /// Fastest one-way delay, ms.
    pub min_delay: u64,
    /// Slowest ordinary one-way delay, ms.
    pub max_delay: u64,
    /// Chance (per mille) that a request is lost before the store applies it.
    pub request_lost: u64,
    /// Chance (per mille) that a reply is lost after the store applied the command.
    pub reply_lost: u64,
    /// Chance (per mille) that a reply is delayed past the attempt's reply deadline (by
    /// one to ten of its reply timeouts).
    pub reply_late: u64,
    /// Chance (per mille) that a transactional complete that inserts its record (the key
    /// held none: never written, or swept) commits late: two to ten of its reply timeouts
    /// after the store applied it, so its attempt gives it up and reads the record before
    /// it lands. Until then the insert is invisible: a read finds no record, and every
    /// other command on the key waits for the commit (as PostgreSQL's readers and writers
    /// of an uncommitted row do).
    pub commit_late: u64,
}

impl NetworkPlan {
    /// No loss, a fixed delay.
    pub fn reliable(delay: u64) -> Self {
        Self {
            min_delay: delay,
            max_delay: delay,
            request_lost: 0,
            reply_lost: 0,
            reply_late: 0,
            commit_late: 0,
        }
    }
}

/// Everything one run will do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The keys in play.
    pub slots: Vec<Slot>,
    /// The clients.
    pub clients: Vec<ClientPlan>,
    /// The messages a broker holds (none without the broker).
    pub messages: Vec<MessagePlan>,
    /// The network.
    pub network: NetworkPlan,
    /// Windows of simulated ms in which the store refuses, or swallows, every command.
    pub outages: Vec<Outage>,
    /// The store's clock, in ms ahead of simulated time.
    pub store_offset: u64,
    /// Whether the store notifies other callers of the key when its record is completed,
    /// released or deleted (a waiter then reserves again at once).
    pub notices: bool,
}

/// A plan could not be drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// The options drawn were refused (a bug in the plan's ranges).
    Options(OptionsError),
    /// No key could be built (a bug in the plan's key names).
    NoKeys,
    /// The redelivery policy drawn was refused (a bug in the plan's ranges).
    Redelivery(RedeliveryError),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Options(err) => write!(f, "the plan drew refused options: {err}"),
            PlanError::NoKeys => f.write_str("the plan built no valid key"),
            PlanError::Redelivery(err) => {
                write!(f, "the plan drew a refused redelivery policy: {err}")
            }
        }
    }
}

impl std::error::Error for PlanError {}

/// How big a random run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Clients per run.
    pub callers: u32,
    /// Keys per operation (two operations share the key names).
    pub keys: u32,
    /// Which faults are on.
    pub faults: Faults,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            callers: 8,
            keys: 3,
            faults: Faults::all(),
        }
    }
}

/// The keys a shape names, and the two requests of each of its request keys.
#[derive(Clone)]
struct Named {
    /// The request keys, then the broker's message keys (when the broker is on).
    slots: Vec<Slot>,
    /// How many of the slots are request keys.
    request_slots: usize,
    /// For each slot, its two requests: (amount, fingerprint of operation, key and amount).
    fingerprints: Vec<(u32, Fingerprint)>,
}

/// The keys of `keys` per operation (and the broker's, if `broker`), with their requests.
/// They depend on the shape alone, so each thread names and hashes them once per shape
/// rather than for every run: a key of 255 characters is checked byte by byte and hashed
/// in five SHA-256 blocks, which cost a run as much as a tenth of its own work.
fn named(keys: usize, broker: bool) -> Named {
    thread_local! {
        static NAMED: std::cell::RefCell<Vec<((usize, bool), Named)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    NAMED.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, named)) = cache.iter().find(|(shape, _)| *shape == (keys, broker)) {
            return named.clone();
        }
        let named = name(keys, broker);
        if cache.len() < 16 {
            cache.push(((keys, broker), named.clone()));
        }
        named
    })
}

fn name(keys: usize, broker: bool) -> Named {
    let operations = [
        Operation::new("payment.charge"),
        Operation::new("order.cancel"),
    ];
    let mut slots = Vec::with_capacity(2 * keys + MESSAGE_KEYS);
    for operation in operations.iter().flatten() {
        for k in 0..keys {
            // Keys at the edges of what is accepted: the longest, and every visible ASCII
            // boundary character; what is stored is byte for byte what is sent. The first
            // two share their first 254 characters, so a store that shortens keys would mix
            // them up.
            let key = match k {
                0 => Key::new("~".repeat(255)),
                1 => Key::new(format!("{}!", "~".repeat(254))),
                _ => Key::new(format!("!order-{k}~")),
            };
            if let Ok(key) = key {
                slots.push(Slot {
                    operation: operation.clone(),
                    key,
                    corrupt: false,
                    transactional: false,
                });
            }
        }
    }
    let request_slots = slots.len();
    // The requests' keys; a broker's messages have keys of their own, under an operation of
    // their own, after them.
    if broker && let Ok(operation) = Operation::new("order.ship") {
        for m in 0..MESSAGE_KEYS {
            if let Ok(key) = Key::new(format!("msg-{m}~")) {
                slots.push(Slot {
                    operation: operation.clone(),
                    key,
                    corrupt: false,
                    transactional: false,
                });
            }
        }
    }
    let mut fingerprints = Vec::with_capacity(slots.len() * 2);
    for (i, slot) in slots.iter().enumerate() {
        for extra in 0..2u32 {
            let amount = 100 + i as u32 + extra;
            let text = format!("{}|{}|{amount}", slot.operation.as_str(), slot.key.as_str());
            fingerprints.push((amount, Fingerprint::of_bytes(text.as_bytes())));
        }
    }
    Named {
        slots,
        request_slots,
        fingerprints,
    }
}

impl Plan {
    /// A random plan of `shape`, drawn from `rng`.
    pub fn random(rng: &mut SimRng, shape: Shape) -> Result<Plan, PlanError> {
        let faults = shape.faults;
        let on = |kind| faults.has(kind);
        let keys = shape.keys.max(1) as usize;
        let Named {
            mut slots,
            request_slots,
            fingerprints,
        } = named(keys, on(FaultKind::Broker));
        if slots.is_empty() {
            return Err(PlanError::NoKeys);
        }
        if on(FaultKind::Corrupt) && rng.chance(250) {
            let corrupt = rng.below(slots.len() as u64) as usize;
            slots[corrupt].corrupt = true;
        }
        if on(FaultKind::Transactional) {
            // About a third of the keys: their actions commit with the record.
            for slot in &mut slots {
                slot.transactional = rng.chance(333);
            }
        }

        let network = if on(FaultKind::Network) {
            NetworkPlan {
                min_delay: 1,
                max_delay: 20,
                request_lost: 30,
                reply_lost: 30,
                reply_late: 20,
                commit_late: 300,
            }
        } else {
            NetworkPlan {
                min_delay: 1,
                max_delay: 20,
                ..NetworkPlan::reliable(1)
            }
        };
        let mut outages = Vec::new();
        if on(FaultKind::Outage) {
            for _ in 0..rng.below(3) {
                let start = rng.below(3_000);
                let end = start + rng.between(50, 2_500);
                let kind = if rng.chance(400) {
                    OutageKind::Silent
                } else {
                    OutageKind::Refusing
                };
                outages.push(Outage { start, end, kind });
            }
        }
        let skew = if on(FaultKind::Skew) { 3_000 } else { 0 };

        let mut clients = Vec::with_capacity(shape.callers as usize);
        for _ in 0..shape.callers {
            let slot = rng.below(request_slots as u64) as usize;
            let reuse = on(FaultKind::KeyReuse) && rng.chance(100);
            let (amount, fingerprint) = fingerprints[slot * 2 + usize::from(reuse)];
            let (options, lease) = random_options(rng)?;
            let retries = on(FaultKind::Retries);
            let max_tries = if retries { rng.between(1, 4) as u32 } else { 1 };
            let mut actions = Vec::with_capacity(max_tries as usize + 1);
            for _ in 0..=max_tries {
                actions.push(random_action(rng, faults, lease));
            }
            let attached = on(FaultKind::Abandon) && rng.chance(500);
            clients.push(ClientPlan {
                start: rng.below(1_500),
                slot,
                amount,
                fingerprint,
                options,
                attached,
                timeout: retries.then(|| rng.between(100, 4_000)),
                retry_delay: rng.between(10, 300),
                max_tries,
                late_retry: (on(FaultKind::Retention) && rng.chance(150))
                    .then(|| rng.between(61_000, 120_000)),
                clock_offset: CALLER_EPOCH + rng.between(0, 2 * skew) - skew,
                actions,
            });
        }
        let mut messages = Vec::new();
        for slot in request_slots..slots.len() {
            random_messages(rng, faults, slot, &fingerprints, skew, &mut messages)?;
        }
        Ok(Plan {
            slots,
            clients,
            messages,
            network,
            outages,
            store_offset: STORE_EPOCH_MIN + rng.below(1_000_000),
            notices: rng.chance(500),
        })
    }
}

/// How many keys a broker's messages use (each published one to three times).
const MESSAGE_KEYS: usize = 2;

/// A caller's options, and its lease in ms.
fn random_options(rng: &mut SimRng) -> Result<(Options, u64), PlanError> {
    let lease = 1_000 * rng.between(1, 3);
    let options = Options::builder()
        .in_flight(if rng.chance(200) {
            InFlightPolicy::Raise
        } else {
            InFlightPolicy::Wait
        })
        .on_store_failure(if rng.chance(300) {
            StoreFailurePolicy::FailClosed
        } else {
            StoreFailurePolicy::FailOpen
        })
        .lease(Duration::from_millis(lease))
        .retention(Duration::from_secs(60))
        .wait_deadline(Duration::from_millis(rng.between(1_000, 6_000)))
        .backoff_initial(Duration::from_millis(10))
        .backoff_max(Duration::from_millis(200))
        .store_retries(rng.below(4) as u32)
        .reply_timeout(Duration::from_millis(rng.between(50, 200)))
        .build()
        .map_err(PlanError::Options)?;
    Ok((options, lease))
}

/// The publications of the message whose key is `slot`: one to three, the later ones a
/// producer's retries (now and then with another body, under key reuse), each with its own
/// consumer options, redelivery policy, ack-wait and handlers.
fn random_messages(
    rng: &mut SimRng,
    faults: Faults,
    slot: usize,
    fingerprints: &[(u32, Fingerprint)],
    skew: u64,
    messages: &mut Vec<MessagePlan>,
) -> Result<(), PlanError> {
    let on = |kind| faults.has(kind);
    let first = rng.below(1_500);
    let copies = rng.between(1, 3) as u32;
    for copy in 0..copies {
        let publish = if copy == 0 {
            first
        } else {
            first + rng.between(0, 4_000)
        };
        let reuse = copy > 0 && on(FaultKind::KeyReuse) && rng.chance(100);
        let (_, fingerprint) = fingerprints[slot * 2 + usize::from(reuse)];
        let (options, lease) = random_options(rng)?;
        let initial = rng.between(10, 200);
        let redelivery = Redelivery::new(
            rng.between(2, 6) as u32,
            Duration::from_millis(initial),
            Duration::from_millis(rng.between(initial, 2_000)),
        )
        .map_err(PlanError::Redelivery)?;
        let mut actions = Vec::with_capacity(3);
        let mut acks_lost = Vec::with_capacity(3);
        for _ in 0..3 {
            actions.push(ActionPlan {
                caller_gone: None,
                ..random_action(rng, faults, lease)
            });
            acks_lost.push(rng.chance(100));
        }
        messages.push(MessagePlan {
            publish,
            copy,
            slot,
            fingerprint,
            options,
            redelivery,
            ack_wait: rng.between(500, 6_000),
            acks_lost,
            clock_offset: CALLER_EPOCH + rng.between(0, 2 * skew) - skew,
            actions,
        });
    }
    Ok(())
}

fn random_action(rng: &mut SimRng, faults: Faults, lease: u64) -> ActionPlan {
    let on = |kind| faults.has(kind);
    let duration = if on(FaultKind::Slow) && rng.chance(200) {
        rng.between(lease + 1, lease * 3)
    } else {
        rng.between(5, 400)
    };
    let fails = on(FaultKind::Failure) && rng.chance(100);
    let unrecordable = on(FaultKind::Failure) && rng.chance(20);
    let effect_at = rng.below(duration);
    let crash_at = (on(FaultKind::Crash) && rng.chance(70)).then(|| rng.below(duration));
    let pause = (on(FaultKind::Pause) && rng.chance(80))
        .then(|| (rng.below(duration), lease + rng.between(200, 2_000)));
    let panic_at = (on(FaultKind::Panic) && rng.chance(40)).then(|| rng.below(duration));
    let caller_gone = (on(FaultKind::Abandon) && rng.chance(150)).then(|| {
        let stage = Stage::ALL[rng.below(Stage::ALL.len() as u64) as usize];
        let after = match stage {
            // Most replies come within 40 ms: mostly while the command is out.
            Stage::Reserve | Stage::Complete | Stage::Release => rng.below(30),
            Stage::Waiting => rng.below(400),
            // Before or after the effect, now and then after the action's end.
            Stage::Action => rng.below(duration + 20),
        };
        CallerGone { stage, after }
    });
    ActionPlan {
        duration,
        fails,
        unrecordable,
        effect_at,
        crash_at,
        pause,
        panic_at,
        caller_gone,
    }
}
