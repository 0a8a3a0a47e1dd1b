//! The discrete-event engine: callers, the network, the store node and the provider on
//! simulated milliseconds, driving the real `idem_core::Attempt` and the real
//! `idem_core::record::apply` (or a deliberately broken [`Variant`]). The run is written
//! down as it happens, in `idem_check`'s [`History`] (every event stamped with the store's
//! clock), and judged at its end by `idem_check`'s judge of MODEL.md's rules.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

use idem_check::{
    ActionEnd, Answer as StoreAnswer, AttemptSpec, EventKind, History, KeySpec, Received, Variant,
};
use idem_core::record::{Completion, Write};
use idem_core::{
    ActionResult, Attempt, Body, Command, LeaseState, Outcome, OwnerToken, Record, Reply, Step,
    Timestamp,
};

use crate::faults::Exercised;
use crate::plan::{ActionPlan, CALLER_EPOCH, Outage, OutageKind, Plan, Stage};
use crate::report::RunReport;
use crate::rng::SimRng;

/// A run that processes more events than this is stuck (a livelock): every attempt still
/// going is written down as stuck, which breaks the rule "liveness".
const EVENT_BUDGET: u64 = 2_000_000;

macro_rules! trace {
    ($world:expr, $($arg:tt)*) => {
        if let Some(out) = $world.trace.as_mut() {
            let _ = writeln!(out, "{:>9} {}", $world.now, format_args!($($arg)*));
        }
    };
}

mod answer;
mod gone;

#[derive(Debug)]
enum Event {
    Try {
        client: u32,
        late: bool,
    },
    ClientTimeout {
        client: u32,
        try_no: u32,
    },
    /// The caller of a try goes away at the point its plan names.
    CallerGone {
        worker: u32,
    },
    Wake {
        worker: u32,
    },
    Resume {
        worker: u32,
    },
    Arrive {
        worker: u32,
        cmd: u32,
        command: Command,
    },
    Reply {
        worker: u32,
        cmd: u32,
        answer: Answer,
    },
    Effect {
        worker: u32,
    },
    ActionDone {
        worker: u32,
    },
    Crash {
        worker: u32,
    },
    Pause {
        worker: u32,
        length: u64,
    },
    Notice {
        worker: u32,
    },
}

/// What comes back to a caller for one command.
#[derive(Debug)]
enum Answer {
    /// The store applied the command and answered.
    Reply(Reply),
    /// The store refused the command (an outage): its effect is unknown to the caller.
    Refused,
    /// The key holds a value that is not a record: the store changed nothing.
    Corrupt,
}

#[derive(Debug)]
struct Queued {
    at: u64,
    seq: u64,
    event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    // Reversed: the heap pops the earliest (time, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Where the store files each of the plan's keys: plan slots whose stored operation and key
/// are equal share the first such slot's record.
fn storage_slots(plan: &Plan, variant: Variant) -> Vec<usize> {
    let filed = |i: usize| {
        let slot = &plan.slots[i];
        variant.files_as(slot.operation.as_str(), slot.key.as_str())
    };
    (0..plan.slots.len())
        .map(|i| (0..i).find(|&j| filed(j) == filed(i)).unwrap_or(i))
        .collect()
}

/// One try of one client: the service process that drives its attempt.
#[derive(Debug)]
struct Worker {
    /// The client whose try this is, and which try.
    client: u32,
    try_no: u32,
    /// The key, as an index into the plan's slots.
    slot: usize,
    /// The real attempt machine.
    attempt: Attempt,
    /// What the provider does when the action runs, and where the caller goes away.
    action: ActionPlan,
    /// The command awaiting a reply (replies to older ones, or to one the attempt gave up
    /// at its reply deadline, are late).
    outstanding: Option<u32>,
    next_cmd: u32,
    /// The one wake-up that counts; other queued wake-ups are stale.
    wake_at: Option<u64>,
    /// While simulated time is before this, the process is paused and handles nothing.
    paused_until: u64,
    /// When the process crashed; it handles nothing after.
    crashed_at: Option<u64>,
    /// The stage of the try, as the service sees it (`None` before its first poll).
    stage: Option<Stage>,
    /// The action runs: handed out, not ended, not dropped.
    running: bool,
    /// The provider's charge is still to come.
    effect_pending: bool,
    /// The provider's charge will not land: the action was dropped before sending it.
    charge_dropped: bool,
    /// The caller of this attached try went away in this stage, and the attempt was
    /// abandoned.
    abandoned_in: Option<Stage>,
    /// The caller was answered (a fail-closed try answers, then settles).
    answered: bool,
    /// The charge its action made, as an index into the statement (for a transactional
    /// action, its writes once committed).
    charge: Option<usize>,
    /// Its action is transactional: its effect is writes that commit with its complete.
    transactional: bool,
    /// The id of the writes its transactional action made, uncommitted.
    written: Option<String>,
    /// How the attempt ended.
    outcome: Option<Outcome>,
    /// The last lease view written down: its end on the store's clock, and the version of
    /// the record it was judged against (a view that says the same of an unchanged record
    /// says nothing new).
    last_view: Option<(u64, u64)>,
}

impl Worker {
    /// Whether the process still handles events: not crashed, attempt not over.
    fn live(&self) -> bool {
        self.crashed_at.is_none() && self.outcome.is_none()
    }
}

/// A client's progress through its tries.
#[derive(Debug, Default)]
struct Client {
    /// Tries started.
    tries: u32,
    /// The worker of its latest try.
    current: Option<usize>,
    /// It has its answer (a result or a refusal) and retries no more.
    done: bool,
    /// Its one late retry is scheduled.
    late_used: bool,
}

/// One run of a plan.
pub(crate) struct World<'p> {
    plan: &'p Plan,
    variant: Variant,
    rng: SimRng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Queued>,
    /// The store's records, by storage slot.
    records: Vec<Option<Record>>,
    /// Whether a storage slot still holds the value that is not a record it started with.
    garbage: Vec<bool>,
    /// The storage slot of each plan slot: the slot itself, unless the store files two
    /// keys under one (a broken variant).
    storage: Vec<usize>,
    /// For each storage slot, how many times its record was written.
    versions: Vec<u64>,
    workers: Vec<Worker>,
    clients: Vec<Client>,
    report: RunReport,
    /// What happened, for the judge.
    history: History,
    trace: Option<String>,
    /// Events allowed before the run counts as stuck.
    budget: u64,
    /// Transactional writes made so far, committed or not (their ids are `tx_N`).
    writes: u64,
}

impl<'p> World<'p> {
    pub(crate) fn new(plan: &'p Plan, variant: Variant, rng: SimRng, trace: bool) -> Self {
        let mut world = World {
            plan,
            variant,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::with_capacity(64),
            records: vec![None; plan.slots.len()],
            garbage: plan.slots.iter().map(|slot| slot.corrupt).collect(),
            storage: storage_slots(plan, variant),
            versions: vec![0; plan.slots.len()],
            workers: Vec::with_capacity(plan.clients.len() * 2),
            clients: plan.clients.iter().map(|_| Client::default()).collect(),
            report: RunReport {
                responses: vec![Vec::new(); plan.clients.len()],
                ..RunReport::default()
            },
            history: History::default(),
            trace: trace.then(String::new),
            budget: EVENT_BUDGET,
            writes: 0,
        };
        for slot in &plan.slots {
            let (operation, key) = (slot.operation.as_str(), slot.key.as_str());
            let filed = variant.files_as(operation, key);
            world.history.add_key(KeySpec {
                operation: operation.to_owned(),
                key: key.to_owned(),
                filed: (filed != (operation, key))
                    .then(|| (filed.0.to_owned(), filed.1.to_owned())),
                corrupt: slot.corrupt,
            });
        }
        world.trace_plan();
        for (i, client) in plan.clients.iter().enumerate() {
            world.at(
                client.start,
                Event::Try {
                    client: i as u32,
                    late: false,
                },
            );
        }
        world
    }

    /// The plan, at the head of a trace: what each client will do and what the store and
    /// network will do to it.
    fn trace_plan(&mut self) {
        let Some(out) = self.trace.as_mut() else {
            return;
        };
        let plan = self.plan;
        let _ = writeln!(
            out,
            "plan: store clock +{}ms, outages {:?}, notices {}, {:?}",
            plan.store_offset, plan.outages, plan.notices, plan.network
        );
        for (i, slot) in plan.slots.iter().enumerate() {
            let _ = writeln!(
                out,
                "  key {i}: {} {}{}{}",
                slot.operation.as_str(),
                slot.key.as_str(),
                if slot.corrupt {
                    " (holds a value that is not a record)"
                } else {
                    ""
                },
                if slot.transactional {
                    " (transactional)"
                } else {
                    ""
                }
            );
        }
        for (i, client) in plan.clients.iter().enumerate() {
            let options = &client.options;
            let _ = writeln!(
                out,
                "  c{i}: at {}ms key {} amount {} clock +{}ms, {}, {:?} {:?}, lease {:?}, \
                 wait {:?}, store retries {}, reply timeout {:?}, timeout {:?}, tries {}, \
                 late retry {:?}",
                client.start,
                client.slot,
                client.amount,
                client.clock_offset,
                if client.attached {
                    "attached"
                } else {
                    "detached"
                },
                options.in_flight(),
                options.on_store_failure(),
                options.lease(),
                options.wait_deadline(),
                options.store_retries(),
                options.reply_timeout(),
                client.timeout,
                client.max_tries,
                client.late_retry
            );
        }
    }

    /// Runs to the end and checks what is left to check.
    pub(crate) fn run(mut self) -> RunReport {
        while let Some(Queued { at, event, .. }) = self.queue.pop() {
            self.now = at;
            self.report.events += 1;
            if self.report.events > self.budget {
                let why = format!("the run's event budget of {} ran out", self.budget);
                for worker in 0..self.workers.len() {
                    if self.workers[worker].live() {
                        self.note(worker, EventKind::Stuck(why.clone()));
                    }
                }
                break;
            }
            self.handle(event);
        }
        self.finish()
    }

    fn at(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.queue.push(Queued {
            at,
            seq: self.seq,
            event,
        });
    }

    /// Writes down what happened to `worker`'s attempt, now.
    fn note(&mut self, worker: usize, kind: EventKind) {
        let at = self.store_now();
        self.history.push(at, worker, kind);
    }

    /// The driver did what a driver must not: written down for the judge.
    fn protocol(&mut self, worker: usize, why: String) {
        trace!(self, "w{worker}: PROTOCOL ERROR: {why}");
        self.note(worker, EventKind::Protocol(why));
    }

    fn exercised(&mut self, class: Exercised) {
        self.report.exercised.add(class);
    }

    fn store_now(&self) -> u64 {
        self.now + self.plan.store_offset
    }

    fn caller_now(&self, worker: usize) -> u64 {
        let client = self.workers[worker].client as usize;
        self.now + self.plan.clients[client].clock_offset
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Try { client, late } => self.try_request(client as usize, late),
            Event::ClientTimeout { client, try_no } => {
                let plan = &self.plan.clients[client as usize];
                let state = &self.clients[client as usize];
                let unanswered = self.report.responses[client as usize]
                    .get(try_no as usize)
                    .is_some_and(Option::is_none);
                if !state.done
                    && state.tries == try_no + 1
                    && state.tries < plan.max_tries
                    && unanswered
                {
                    let current = state.current;
                    self.exercised(Exercised::ClientRetry);
                    trace!(self, "c{client} times out and retries with the same key");
                    if let Some(worker) = current {
                        self.caller_goes_away(worker, "timed out");
                    }
                    self.start_try(client as usize);
                }
            }
            Event::Arrive {
                worker,
                cmd,
                command,
            } => self.store_receives(worker as usize, cmd, command),
            Event::Effect { worker } => self.effect(worker as usize),
            Event::Crash { worker } => {
                let w = &mut self.workers[worker as usize];
                if w.live() {
                    w.crashed_at = Some(self.now);
                    w.running = false;
                    let class = if w.transactional {
                        // The transaction dies with the process: nothing commits.
                        Exercised::TransactionCrashed
                    } else if w.charge.is_some() {
                        Exercised::CrashAfterEffect
                    } else {
                        Exercised::CrashBeforeEffect
                    };
                    self.exercised(class);
                    trace!(self, "w{worker} crashes ({})", class.name());
                    self.note(worker as usize, EventKind::Crashed);
                }
            }
            other => self.worker_event(other),
        }
    }

    /// The provider's charge lands, unless the process crashed or the action was dropped
    /// before its request was sent.
    fn effect(&mut self, worker: usize) {
        let w = &mut self.workers[worker];
        w.effect_pending = false;
        if w.crashed_at.is_some() {
            return;
        }
        if w.charge_dropped {
            trace!(
                self,
                "the dropped action of w{worker} never reaches the provider"
            );
            return;
        }
        if w.transactional {
            // Writes in the transaction: an effect only if the store commits them.
            self.writes += 1;
            let id = format!("tx_{}", self.writes);
            trace!(self, "w{worker} writes {id} in its transaction");
            self.workers[worker].written = Some(id.clone());
            self.note(worker, EventKind::Wrote { id });
            return;
        }
        w.charge = Some(self.history.statement.len());
        self.report.effects += 1;
        let at = self.store_now();
        let id = self.history.charge(at, worker);
        if let Some(out) = self.trace.as_mut() {
            let _ = writeln!(out, "{:>9} provider charges {id} for w{worker}", self.now);
        }
    }

    /// Events the holder's own process handles: ignored once it crashed, held back while
    /// it is paused.
    fn worker_event(&mut self, event: Event) {
        let worker = match &event {
            Event::Wake { worker }
            | Event::Resume { worker }
            | Event::Reply { worker, .. }
            | Event::ActionDone { worker }
            | Event::Pause { worker, .. }
            | Event::Notice { worker }
            | Event::CallerGone { worker } => *worker as usize,
            _ => return,
        };
        // A crashed process handles nothing; a finished attempt has nothing left to do
        // (its stale wake-ups and late replies are dropped).
        if !self.workers[worker].live() {
            return;
        }
        let paused_until = self.workers[worker].paused_until;
        if paused_until > self.now {
            if !matches!(event, Event::Wake { .. } | Event::Notice { .. }) {
                self.at(paused_until, event);
            }
            return;
        }
        match event {
            Event::Wake { .. } if self.workers[worker].wake_at == Some(self.now) => {
                self.workers[worker].wake_at = None;
                self.drive(worker);
            }
            Event::Notice { .. } => {
                let now = Timestamp::from_millis(self.caller_now(worker));
                if self.workers[worker].attempt.handle_record_changed(now) {
                    self.exercised(Exercised::ChangeNotice);
                    trace!(self, "w{worker} is told the record changed");
                    self.drive(worker);
                }
            }
            Event::Resume { .. } => {
                trace!(self, "w{worker} resumes");
                self.workers[worker].wake_at = None;
                self.drive(worker);
            }
            Event::Reply { cmd, answer, .. } => {
                if self.workers[worker].outstanding != Some(cmd) {
                    trace!(self, "w{worker} ignores the late reply to #{cmd}");
                    return;
                }
                self.workers[worker].outstanding = None;
                self.feed_answer(worker, answer);
                self.drive(worker);
            }
            Event::ActionDone { .. } => self.action_done(worker),
            Event::Pause { length, .. } => {
                self.exercised(Exercised::PausePastLease);
                trace!(self, "w{worker} pauses for {length}ms");
                let until = self.store_now() + length;
                self.note(worker, EventKind::Paused { until });
                self.workers[worker].paused_until = self.now + length;
                self.at(
                    self.now + length,
                    Event::Resume {
                        worker: worker as u32,
                    },
                );
            }
            Event::CallerGone { .. } => self.planned_caller_gone(worker),
            _ => {}
        }
    }

    /// Feeds the attempt what came back for its outstanding command.
    fn feed_answer(&mut self, worker: usize, answer: Answer) {
        let now = Timestamp::from_millis(self.caller_now(worker));
        let received = match &answer {
            Answer::Reply(reply) => Received::Reply(reply.clone()),
            Answer::Refused => Received::Failed,
            Answer::Corrupt => Received::Corrupt,
        };
        self.note(worker, EventKind::Received(received));
        let fed = match answer {
            Answer::Reply(reply) => self.workers[worker].attempt.handle_reply(reply, now),
            Answer::Refused => self.workers[worker].attempt.handle_store_error(now),
            Answer::Corrupt => {
                if self.variant.feeds_corrupt_as_store_error() {
                    trace!(
                        self,
                        "w{worker} takes the corrupt record for a store failure"
                    );
                    self.workers[worker].attempt.handle_store_error(now)
                } else {
                    self.workers[worker].attempt.handle_corrupt_record(now)
                }
            }
        };
        self.fed(worker, fed);
    }

    /// The action ends: succeeded, failed, unrecordable, or panicked. A dropped action's
    /// end is nobody's to feed.
    fn action_done(&mut self, worker: usize) {
        let w = &mut self.workers[worker];
        if !w.running {
            return;
        }
        w.running = false;
        let made = if w.transactional {
            w.written.clone()
        } else {
            w.charge
                .map(|charge| self.history.statement.lines()[charge].id.clone())
        };
        let result = if w.action.panic_at.is_some() {
            let class = if w.transactional {
                Exercised::TransactionPanicked
            } else if w.charge.is_some() {
                Exercised::PanicAfterEffect
            } else {
                Exercised::PanicBeforeEffect
            };
            self.exercised(class);
            trace!(self, "w{worker}'s action panics ({})", class.name());
            if self.variant.feeds_panic_as_failure() {
                ActionResult::Failed
            } else {
                ActionResult::Panicked
            }
        } else {
            match (w.action.fails, w.action.unrecordable, made) {
                (false, false, Some(id)) => ActionResult::Succeeded(Body::new(id.as_bytes())),
                (false, true, Some(_)) => {
                    self.exercised(Exercised::Unrecordable);
                    ActionResult::Unrecordable
                }
                _ => ActionResult::Failed,
            }
        };
        trace!(self, "w{worker} action ends: {result:?}");
        let end = if self.workers[worker].action.panic_at.is_some() {
            ActionEnd::Panicked
        } else {
            match result {
                ActionResult::Succeeded(_) => ActionEnd::Succeeded,
                ActionResult::Unrecordable => ActionEnd::Unrecordable,
                _ => ActionEnd::Failed,
            }
        };
        self.note(worker, EventKind::ActionEnded(end));
        let stage = if result == ActionResult::Failed {
            Stage::Release
        } else {
            Stage::Complete
        };
        self.enter(worker, stage);
        let now = Timestamp::from_millis(self.caller_now(worker));
        let fed = self.workers[worker]
            .attempt
            .handle_action_result(result, now);
        self.fed(worker, fed);
        self.drive(worker);
    }

    fn fed(&mut self, worker: usize, fed: Result<(), idem_core::ProtocolError>) {
        if let Err(err) = fed {
            self.protocol(worker, err.to_string());
        }
    }

    fn try_request(&mut self, client: usize, late: bool) {
        let plan = &self.plan.clients[client];
        let state = &mut self.clients[client];
        if late {
            self.exercised(Exercised::LateRetry);
            trace!(self, "c{client} sends its request again, long after");
        } else if state.done || state.tries >= plan.max_tries {
            return;
        }
        self.start_try(client);
    }

    fn start_try(&mut self, client: usize) {
        let plan = &self.plan.clients[client];
        let state = &mut self.clients[client];
        let try_no = state.tries;
        state.tries += 1;
        let more_tries = state.tries < plan.max_tries;
        let worker = self.workers.len();
        state.current = Some(worker);
        self.report.responses[client].push(None);
        self.report.requests += 1;
        let owner = OwnerToken::from_u128((u128::from(self.rng.next_u64()) << 64) | worker as u128);
        let jitter = self.rng.next_u64();
        let slot = &self.plan.slots[plan.slot];
        self.history.add_attempt(AttemptSpec {
            label: format!("w{worker}"),
            key: plan.slot,
            fingerprint: plan.fingerprint,
            owner,
        });
        let now = Timestamp::from_millis(self.now + plan.clock_offset);
        let mut attempt = Attempt::new(
            slot.operation.clone(),
            slot.key.clone(),
            plan.fingerprint,
            owner,
            jitter,
            plan.options.clone(),
            now,
        );
        if slot.transactional {
            attempt = attempt.in_transaction();
            self.note(worker, EventKind::Transactional);
        }
        // Tries past the planned ones repeat the last action.
        let action = plan
            .actions
            .get(try_no as usize)
            .or(plan.actions.last())
            .copied()
            .unwrap_or(ActionPlan::charge(0));
        self.workers.push(Worker {
            client: client as u32,
            try_no,
            slot: plan.slot,
            attempt,
            action,
            outstanding: None,
            next_cmd: 0,
            wake_at: None,
            paused_until: 0,
            crashed_at: None,
            stage: None,
            running: false,
            effect_pending: false,
            charge_dropped: false,
            abandoned_in: None,
            answered: false,
            charge: None,
            transactional: slot.transactional,
            written: None,
            outcome: None,
            last_view: None,
        });
        trace!(
            self,
            "c{client} try {try_no} -> w{worker} amount={} owner={owner}", plan.amount
        );
        if let (Some(timeout), true) = (plan.timeout, more_tries) {
            self.at(
                self.now + timeout,
                Event::ClientTimeout {
                    client: client as u32,
                    try_no,
                },
            );
        }
        self.drive(worker);
    }

    /// Polls the attempt until it waits or is done, carrying out each step.
    fn drive(&mut self, worker: usize) {
        loop {
            let clock = self.caller_now(worker);
            let step = self.workers[worker]
                .attempt
                .poll(Timestamp::from_millis(clock));
            if !self.workers[worker].attempt.awaiting_reply()
                && let Some(cmd) = self.workers[worker].outstanding.take()
            {
                // The attempt gave the command up at its reply deadline: a reply to it is
                // late from now on.
                trace!(self, "w{worker} gives #{cmd} up at its reply deadline");
                self.note(worker, EventKind::Received(Received::GivenUp));
            }
            self.view_lease(worker, clock);
            match step {
                Step::Send { command, .. } => {
                    let stage = match command {
                        Command::Reserve { .. } => Stage::Reserve,
                        Command::Complete { .. } => Stage::Complete,
                        Command::Release { .. } => Stage::Release,
                        Command::Renew { .. } | Command::Read => Stage::Action,
                    };
                    self.enter(worker, stage);
                    self.send(worker, command);
                }
                Step::Run if self.workers[worker].abandoned_in.is_some() => {
                    self.protocol(worker, "abandoned, but told to run".into());
                    return;
                }
                Step::Run => {
                    self.enter(worker, Stage::Action);
                    self.run_action(worker);
                }
                Step::Wait { until } => {
                    let now = Timestamp::from_millis(clock);
                    if self.workers[worker].attempt.notices_from(now).is_some() {
                        self.enter(worker, Stage::Waiting);
                    }
                    if let Some(until) = until {
                        let offset = clock - self.now;
                        let at = until.as_millis().saturating_sub(offset).max(self.now);
                        if self.workers[worker].wake_at != Some(at) {
                            self.workers[worker].wake_at = Some(at);
                            self.at(
                                at,
                                Event::Wake {
                                    worker: worker as u32,
                                },
                            );
                        }
                    }
                    return;
                }
                Step::Done(outcome) => {
                    if !self.done(worker, outcome) {
                        return;
                    }
                }
            }
        }
    }

    /// The try reaches `stage`; the first time it reaches the stage its plan names, the
    /// caller's going away is scheduled.
    fn enter(&mut self, worker: usize, stage: Stage) {
        let w = &mut self.workers[worker];
        if w.stage == Some(stage) || w.abandoned_in.is_some() {
            return;
        }
        // A reserve sent again while waiting for a holder is still waiting.
        if stage == Stage::Reserve && w.stage == Some(Stage::Waiting) {
            return;
        }
        w.stage = Some(stage);
        if let Some(gone) = w.action.caller_gone
            && gone.stage == stage
        {
            // Reached once: a stage is not entered twice (waiting is left only for the
            // action or the end).
            self.at(
                self.now + gone.after,
                Event::CallerGone {
                    worker: worker as u32,
                },
            );
        }
    }

    fn send(&mut self, worker: usize, command: Command) {
        let w = &mut self.workers[worker];
        w.next_cmd += 1;
        let cmd = w.next_cmd;
        w.outstanding = Some(cmd);
        if command == Command::Read {
            self.exercised(Exercised::CommitRead);
        }
        trace!(self, "w{worker} sends #{cmd} {}", command.name());
        self.note(worker, EventKind::Sent(command.kind()));
        self.transmit(worker, cmd, command);
    }

    /// A command the attempt did not ask for (a broken driver's): numbered `#0`, so its
    /// reply is never taken for the attempt's.
    fn send_untracked(&mut self, worker: usize, command: Command) {
        trace!(self, "w{worker} sends #0 {} on its own", command.name());
        self.note(worker, EventKind::Sent(command.kind()));
        self.transmit(worker, 0, command);
    }

    fn transmit(&mut self, worker: usize, cmd: u32, command: Command) {
        let network = self.plan.network;
        if self.rng.chance(network.request_lost) {
            self.exercised(Exercised::RequestLost);
            trace!(self, "#{cmd} of w{worker} is lost before the store");
            return;
        }
        let delay = self.rng.between(network.min_delay, network.max_delay);
        self.at(
            self.now + delay,
            Event::Arrive {
                worker: worker as u32,
                cmd,
                command,
            },
        );
    }

    fn run_action(&mut self, worker: usize) {
        let clock = Timestamp::from_millis(self.caller_now(worker));
        let w = &mut self.workers[worker];
        let action = w.action;
        w.running = true;
        let unprotected = w.attempt.lease(clock) == LeaseState::Unprotected;
        // The charge comes at its time, unless the action fails or panics first.
        w.effect_pending = !action.fails && action.panic_at.is_none_or(|p| action.effect_at < p);
        let effect_pending = w.effect_pending;
        let lease = w.attempt.options().lease().as_millis() as u64;
        trace!(self, "w{worker} runs the action: {action:?}");
        self.note(worker, EventKind::Run { unprotected });
        if action.duration > lease {
            self.exercised(Exercised::SlowAction);
        }
        let id = worker as u32;
        if effect_pending {
            self.at(self.now + action.effect_at, Event::Effect { worker: id });
        }
        let ends_at = action.panic_at.unwrap_or(action.duration);
        self.at(self.now + ends_at, Event::ActionDone { worker: id });
        if let Some(crash_at) = action.crash_at {
            self.at(self.now + crash_at, Event::Crash { worker: id });
        }
        if let Some((pause_at, length)) = action.pause {
            self.at(self.now + pause_at, Event::Pause { worker: id, length });
        }
    }

    /// The lease view: while the attempt says its lease is held, what it believes is
    /// written down (its confirmed end, on the store's clock) for the judge to hold against
    /// the record. A view that says the same as the last one of an unchanged record is not
    /// written again.
    fn view_lease(&mut self, worker: usize, clock: u64) {
        let w = &self.workers[worker];
        if w.attempt.lease(Timestamp::from_millis(clock)) != LeaseState::Held {
            return;
        }
        let Some(until) = w.attempt.lease_confirmed_until() else {
            return;
        };
        // The caller's clock runs `clock - now` ahead of simulated time, the store's
        // `store_offset`.
        let until = until.as_millis().saturating_sub(clock - self.now) + self.plan.store_offset;
        let seen = (until, self.versions[self.storage[w.slot]]);
        if w.last_view != Some(seen) {
            self.workers[worker].last_view = Some(seen);
            self.note(worker, EventKind::LeaseView { until });
        }
    }

    /// The store node: applies one command at its own clock, writes the step down, replies.
    fn store_receives(&mut self, worker: usize, cmd: u32, command: Command) {
        let network = self.plan.network;
        match self.plan.outages.iter().find(|o| o.covers(self.now)) {
            Some(Outage {
                kind: OutageKind::Refusing,
                ..
            }) => {
                self.exercised(Exercised::StoreDown);
                trace!(self, "store is down: #{cmd} of w{worker} refused");
                self.stored(worker, command, None, StoreAnswer::NotApplied, None);
                let delay = self.rng.between(network.min_delay, network.max_delay);
                self.at(
                    self.now + delay,
                    Event::Reply {
                        worker: worker as u32,
                        cmd,
                        answer: Answer::Refused,
                    },
                );
                return;
            }
            Some(Outage {
                kind: OutageKind::Silent,
                ..
            }) => {
                self.exercised(Exercised::StoreSilent);
                trace!(self, "store does not answer: #{cmd} of w{worker} swallowed");
                self.stored(worker, command, None, StoreAnswer::NotApplied, None);
                return;
            }
            None => {}
        }
        let slot = self.workers[worker].slot;
        let store_now = Timestamp::from_millis(self.store_now());
        let judged_at = if self.variant.judges_by_caller_clock() {
            // The caller's reading of the same wall time as the store's, off by its skew.
            let skew = self.caller_now(worker) - self.now;
            Timestamp::from_millis((store_now.as_millis() + skew).saturating_sub(CALLER_EPOCH))
        } else {
            store_now
        };
        let stored = self.storage[slot];
        let name = command.name();
        if self.garbage[stored] {
            let Some(transition) = self.variant.apply_to_garbage(command.clone(), judged_at) else {
                self.exercised(Exercised::CorruptRecord);
                trace!(
                    self,
                    "store applies #{cmd} {name} of w{worker}: the key holds no record"
                );
                self.stored(worker, command, None, StoreAnswer::Corrupt, None);
                self.reply(worker, cmd, Answer::Corrupt);
                return;
            };
            trace!(
                self,
                "store applies #{cmd} {name} of w{worker} to a value that is not a record: {:?}",
                transition.reply
            );
            let written = match transition.write {
                Write::Put(record) => {
                    self.garbage[stored] = false;
                    self.versions[stored] += 1;
                    self.records[stored] = Some(record.clone());
                    Some(record)
                }
                Write::Unchanged | Write::Delete => None,
            };
            let reply = StoreAnswer::Reply(transition.reply.clone());
            let complete = matches!(command, Command::Complete { .. });
            self.stored(worker, command, None, reply, written);
            if complete {
                self.commit_or_roll_back(worker, &transition.reply);
            }
            self.reply(worker, cmd, Answer::Reply(transition.reply));
            return;
        }
        let before = self.records[stored].take();
        let transition = self
            .variant
            .apply(before.as_ref(), command.clone(), judged_at);
        self.exercise_step(before.as_ref(), &command, &transition.reply);
        trace!(
            self,
            "store applies #{cmd} {name} of w{worker}: {:?}", transition.reply
        );
        let notify = self.plan.notices
            && matches!(
                transition.write,
                Write::Delete | Write::Put(Record::Completed { .. })
            );
        if transition.write != Write::Unchanged {
            self.versions[stored] += 1;
        }
        self.records[stored] = match transition.write {
            Write::Unchanged => before.clone(),
            Write::Put(record) => Some(record),
            Write::Delete => None,
        };
        let after = self.records[stored].clone();
        let answer = StoreAnswer::Reply(transition.reply.clone());
        let complete = matches!(command, Command::Complete { .. });
        self.stored(worker, command, before, answer, after);
        if complete {
            self.commit_or_roll_back(worker, &transition.reply);
        }
        if notify {
            self.notify(stored, worker);
        }
        self.reply(worker, cmd, Answer::Reply(transition.reply));
    }

    /// A transactional complete was applied inside its action's transaction, at this very
    /// step: the store commits the writes with it if the record machine recorded the result
    /// (`record::commits`, or the variant's rule), else the transaction rolls back.
    fn commit_or_roll_back(&mut self, worker: usize, reply: &Reply) {
        let w = &self.workers[worker];
        if !w.transactional {
            return;
        }
        let Some(id) = w.written.clone() else {
            return;
        };
        if !self.variant.commits(reply) {
            self.exercised(Exercised::CommitRefused);
            trace!(
                self,
                "store rolls back the transaction of w{worker}: {id} never happened"
            );
            return;
        }
        self.exercised(Exercised::TransactionCommitted);
        self.workers[worker].charge = Some(self.history.statement.len());
        self.report.effects += 1;
        self.report.transactional_effects += 1;
        let at = self.store_now();
        self.history.commit(at, worker, id.clone());
        trace!(self, "store commits {id} of w{worker} with its record");
    }

    /// Writes a store step down.
    fn stored(
        &mut self,
        worker: usize,
        command: Command,
        before: Option<Record>,
        answer: StoreAnswer,
        after: Option<Record>,
    ) {
        self.note(
            worker,
            EventKind::Store {
                command,
                before,
                answer,
                after,
            },
        );
    }

    /// The paths a store step took, counted (the checks are the judge's).
    fn exercise_step(&mut self, before: Option<&Record>, command: &Command, reply: &Reply) {
        let store_now = Timestamp::from_millis(self.store_now());
        let expired = before.is_some_and(|record| record.is_expired(store_now));
        if let Command::Reserve { owner, .. } = command {
            match (reply, before) {
                (Reply::Reserved(_), Some(Record::Pending { owner: holder, .. }))
                    if expired && holder != owner =>
                {
                    self.exercised(Exercised::LeaseTakeover);
                }
                (Reply::Reserved(_), Some(Record::Completed { .. })) if expired => {
                    self.exercised(Exercised::RetentionExpired);
                }
                (Reply::InFlight { .. }, _) => self.exercised(Exercised::InFlight),
                (Reply::KeyReuse { .. }, _) => self.exercised(Exercised::KeyReuse),
                _ => {}
            }
        }
        match reply {
            Reply::Completed(Completion::AfterLeaseExpiry) => {
                self.exercised(Exercised::LateComplete);
            }
            Reply::Completed(Completion::Repeated) => {
                self.exercised(Exercised::RepeatedComplete);
            }
            Reply::Refused(_) => self.exercised(Exercised::Refused),
            _ => {}
        }
    }

    /// Sends an answer back over the network, which may lose or delay it.
    fn reply(&mut self, worker: usize, cmd: u32, answer: Answer) {
        let network = self.plan.network;
        if self.rng.chance(network.reply_lost) {
            self.exercised(Exercised::ReplyLost);
            trace!(self, "the reply to #{cmd} of w{worker} is lost");
            return;
        }
        let mut delay = self.rng.between(network.min_delay, network.max_delay);
        if self.rng.chance(network.reply_late) {
            self.exercised(Exercised::ReplyLate);
            // Past the attempt's own reply deadline: by one to ten reply timeouts.
            let timeout = self.workers[worker].attempt.options().reply_timeout();
            let timeout = timeout.as_millis() as u64;
            delay += self.rng.between(timeout, timeout * 10);
        }
        self.at(
            self.now + delay,
            Event::Reply {
                worker: worker as u32,
                cmd,
                answer,
            },
        );
    }

    /// The store tells every other live caller of the key that its record changed; each
    /// notice travels (and may be lost) like any message.
    fn notify(&mut self, stored: usize, writer: usize) {
        let network = self.plan.network;
        for other in 0..self.workers.len() {
            let w = &self.workers[other];
            if other == writer || self.storage[w.slot] != stored || !w.live() {
                continue;
            }
            if self.rng.chance(network.request_lost) {
                continue;
            }
            let delay = self.rng.between(network.min_delay, network.max_delay);
            self.at(
                self.now + delay,
                Event::Notice {
                    worker: other as u32,
                },
            );
        }
    }

    /// End of run: the judge reads the run's history; what it found, and the cause of every
    /// extra effect, go into the report.
    fn finish(mut self) -> RunReport {
        let verdict = idem_check::judge(&self.history);
        for violation in &verdict.violations {
            trace!(self, "VIOLATION {violation}");
        }
        self.report.violations = verdict.violations;
        self.report.extra = verdict.extra;
        self.report.extra_transactional = verdict.extra_transactional;
        self.report.trace = self.trace.take();
        self.report.history = self.history;
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Shape;
    use idem_check::Rule;

    /// The liveness check fails when a run does not finish within its budget (here a
    /// budget far too small for any run), and reports every unfinished attempt.
    #[test]
    fn a_run_that_does_not_finish_is_reported() {
        let mut rng = SimRng::new(4);
        let plan = Plan::random(&mut rng, Shape::default()).unwrap();
        let mut world = World::new(&plan, Variant::Correct, rng.clone(), false);
        world.budget = 20;
        let report = world.run();
        let stuck = report
            .violations
            .iter()
            .filter(|v| v.rule == Rule::Liveness)
            .count();
        assert!(stuck >= 2, "{:?}", report.violations);
        let finished = World::new(&plan, Variant::Correct, rng, false).run();
        assert!(finished.violations.is_empty(), "{:?}", finished.violations);
    }
}
