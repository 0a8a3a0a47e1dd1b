//! The discrete-event engine: callers, the network, the store node and the provider on
//! simulated milliseconds, driving the real `idem_core::Attempt` and the real
//! `idem_core::record::apply` (or a deliberately broken [`Variant`]), checking every store
//! step and every answer as it happens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

use idem_core::record::Write;
use idem_core::{
    ActionResult, Attempt, Body, Command, Execution, Outcome, OwnerToken, Protection, Record,
    Recording, Reply, Step, StoredResult, Timestamp,
};

use crate::faults::Exercised;
use crate::plan::{ActionPlan, CALLER_EPOCH, Plan};
use crate::report::{Charge, Check, Response, RunReport, Violation};
use crate::rng::SimRng;
use crate::variant::Variant;

mod checks;

use checks::CommandSummary;

/// A run that processes more events than this is stuck (a livelock): the check
/// [`Check::EveryAttemptFinishes`] fails.
const EVENT_BUDGET: u64 = 2_000_000;

macro_rules! trace {
    ($world:expr, $($arg:tt)*) => {
        if let Some(out) = $world.trace.as_mut() {
            let _ = writeln!(out, "{:>9} {}", $world.now, format_args!($($arg)*));
        }
    };
}

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
        reply: Option<Reply>,
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
        (
            slot.operation.as_str(),
            variant.stored_key(slot.key.as_str()),
        )
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
    /// What the provider does when the action runs.
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
    /// The charge its action made, as an index into the statement.
    charge: Option<usize>,
    /// How the attempt ended.
    outcome: Option<Outcome>,
    /// When the result this worker recorded expires, on the store's clock.
    recorded_until: Option<u64>,
    /// The store found this worker's reservation gone when it completed or renewed.
    lapsed: bool,
    /// A [`Check::HeldLeaseIsLive`] failure was reported (once per worker is enough).
    lease_misreported: bool,
}

/// A client's progress through its tries.
#[derive(Debug, Default)]
struct Client {
    /// Tries started.
    tries: u32,
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
    /// The storage slot of each plan slot: the slot itself, unless the store files two
    /// keys under one (a broken variant).
    storage: Vec<usize>,
    workers: Vec<Worker>,
    clients: Vec<Client>,
    report: RunReport,
    trace: Option<String>,
    /// Events allowed before the run counts as stuck.
    budget: u64,
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
            storage: storage_slots(plan, variant),
            workers: Vec::with_capacity(plan.clients.len() * 2),
            clients: plan.clients.iter().map(|_| Client::default()).collect(),
            report: RunReport {
                responses: vec![Vec::new(); plan.clients.len()],
                ..RunReport::default()
            },
            trace: trace.then(String::new),
            budget: EVENT_BUDGET,
        };
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
                "  key {i}: {} {}",
                slot.operation.as_str(),
                slot.key.as_str()
            );
        }
        for (i, client) in plan.clients.iter().enumerate() {
            let options = &client.options;
            let _ = writeln!(
                out,
                "  c{i}: at {}ms key {} amount {} clock +{}ms, {:?} {:?}, lease {:?}, \
                 wait {:?}, store retries {}, reply timeout {:?}, timeout {:?}, tries {}, \
                 late retry {:?}",
                client.start,
                client.slot,
                client.amount,
                client.clock_offset,
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
                let detail = format!("event budget of {} exhausted", self.budget);
                self.violation(Check::EveryAttemptFinishes, detail);
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

    fn violation(&mut self, check: Check, detail: String) {
        trace!(self, "VIOLATION {}: {detail}", check.name());
        self.report.violations.push(Violation {
            check,
            at: self.now,
            detail,
        });
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
                    self.exercised(Exercised::ClientRetry);
                    trace!(self, "c{client} times out and retries with the same key");
                    self.start_try(client as usize);
                }
            }
            Event::Arrive {
                worker,
                cmd,
                command,
            } => self.store_receives(worker as usize, cmd, command),
            Event::Effect { worker } => {
                let w = &self.workers[worker as usize];
                if w.crashed_at.is_none() {
                    let number = self.report.charges.len() as u32 + 1;
                    let charge = Charge {
                        number,
                        slot: w.slot,
                        worker,
                        at: self.now,
                    };
                    self.workers[worker as usize].charge = Some(self.report.charges.len());
                    self.report.charges.push(charge);
                    self.report.effects += 1;
                    trace!(self, "provider charges ch_{number} for w{worker}");
                }
            }
            Event::Crash { worker } => {
                let w = &mut self.workers[worker as usize];
                if w.crashed_at.is_none() && w.outcome.is_none() {
                    w.crashed_at = Some(self.now);
                    let class = if w.charge.is_some() {
                        Exercised::CrashAfterEffect
                    } else {
                        Exercised::CrashBeforeEffect
                    };
                    self.exercised(class);
                    trace!(self, "w{worker} crashes ({})", class.name());
                }
            }
            other => self.worker_event(other),
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
            | Event::Notice { worker } => *worker as usize,
            _ => return,
        };
        let w = &self.workers[worker];
        // A crashed process handles nothing; a finished attempt has nothing left to do
        // (its stale wake-ups and late replies are dropped).
        if w.crashed_at.is_some() || w.outcome.is_some() {
            return;
        }
        if w.paused_until > self.now {
            let until = w.paused_until;
            if !matches!(event, Event::Wake { .. } | Event::Notice { .. }) {
                self.at(until, event);
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
            Event::Reply { cmd, reply, .. } => {
                if self.workers[worker].outstanding != Some(cmd) {
                    trace!(self, "w{worker} ignores the late reply to #{cmd}");
                    return;
                }
                self.workers[worker].outstanding = None;
                let now = Timestamp::from_millis(self.caller_now(worker));
                let fed = match reply {
                    Some(reply) => self.workers[worker].attempt.handle_reply(reply, now),
                    None => self.workers[worker].attempt.handle_store_error(now),
                };
                self.fed(worker, fed);
                self.drive(worker);
            }
            Event::ActionDone { .. } => {
                let w = &self.workers[worker];
                let result = match (w.action.fails, w.action.unrecordable, w.charge) {
                    (false, false, Some(charge)) => {
                        ActionResult::Succeeded(Body::new(self.report.charges[charge].id()))
                    }
                    (false, true, Some(_)) => {
                        self.report.exercised.add(Exercised::Unrecordable);
                        ActionResult::Unrecordable
                    }
                    _ => ActionResult::Failed,
                };
                trace!(self, "w{worker} action ends: {result:?}");
                let now = Timestamp::from_millis(self.caller_now(worker));
                let fed = self.workers[worker]
                    .attempt
                    .handle_action_result(result, now);
                self.fed(worker, fed);
                self.drive(worker);
            }
            Event::Pause { length, .. } if self.workers[worker].outcome.is_none() => {
                self.exercised(Exercised::PausePastLease);
                trace!(self, "w{worker} pauses for {length}ms");
                self.workers[worker].paused_until = self.now + length;
                self.at(
                    self.now + length,
                    Event::Resume {
                        worker: worker as u32,
                    },
                );
            }
            _ => {}
        }
    }

    fn fed(&mut self, worker: usize, fed: Result<(), idem_core::ProtocolError>) {
        if let Err(err) = fed {
            self.violation(Check::DriverProtocol, format!("w{worker}: {err}"));
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
        self.report.responses[client].push(None);
        self.report.requests += 1;
        let worker = self.workers.len();
        let owner = OwnerToken::from_u128((u128::from(self.rng.next_u64()) << 64) | worker as u128);
        let jitter = self.rng.next_u64();
        let slot = &self.plan.slots[plan.slot];
        let now = Timestamp::from_millis(self.now + plan.clock_offset);
        let attempt = Attempt::new(
            slot.operation.clone(),
            slot.key.clone(),
            plan.fingerprint,
            owner,
            jitter,
            plan.options.clone(),
            now,
        );
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
            charge: None,
            outcome: None,
            recorded_until: None,
            lapsed: false,
            lease_misreported: false,
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
            }
            self.check_lease(worker, clock);
            match step {
                Step::Send { command, .. } => self.send(worker, command),
                Step::Run => self.run_action(worker),
                Step::Wait { until } => {
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
                    self.done(worker, outcome);
                    return;
                }
            }
        }
    }

    fn send(&mut self, worker: usize, command: Command) {
        let network = self.plan.network;
        let w = &mut self.workers[worker];
        w.next_cmd += 1;
        let cmd = w.next_cmd;
        w.outstanding = Some(cmd);
        trace!(self, "w{worker} sends #{cmd} {}", command.name());
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
        let w = &self.workers[worker];
        let action = w.action;
        let lease = w.attempt.options().lease().as_millis() as u64;
        trace!(self, "w{worker} runs the action: {action:?}");
        if action.duration > lease {
            self.exercised(Exercised::SlowAction);
        }
        let id = worker as u32;
        if !action.fails {
            self.at(self.now + action.effect_at, Event::Effect { worker: id });
        }
        self.at(self.now + action.duration, Event::ActionDone { worker: id });
        if let Some(crash_at) = action.crash_at {
            self.at(self.now + crash_at, Event::Crash { worker: id });
        }
        if let Some((pause_at, length)) = action.pause {
            self.at(self.now + pause_at, Event::Pause { worker: id, length });
        }
    }

    fn worker_of(&self, owner: OwnerToken) -> Option<usize> {
        let index = (owner.as_u128() & u128::from(u64::MAX)) as usize;
        self.workers
            .get(index)
            .filter(|w| w.attempt.owner() == owner)
            .map(|_| index)
    }

    /// The store node: applies one command at its own clock, checks the step, replies.
    fn store_receives(&mut self, worker: usize, cmd: u32, command: Command) {
        let network = self.plan.network;
        let reply_delay = |rng: &mut SimRng| rng.between(network.min_delay, network.max_delay);
        if self
            .plan
            .outages
            .iter()
            .any(|(start, end)| (*start..*end).contains(&self.now))
        {
            self.exercised(Exercised::StoreDown);
            trace!(self, "store is down: #{cmd} of w{worker} refused");
            let delay = reply_delay(&mut self.rng);
            self.at(
                self.now + delay,
                Event::Reply {
                    worker: worker as u32,
                    cmd,
                    reply: None,
                },
            );
            return;
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
        if matches!(command, Command::Reserve { .. }) {
            self.check_key_verbatim(worker);
        }
        let before = self.records[stored].take();
        self.check_recorded_result(worker, &command);
        let summary = CommandSummary::of(&command);
        let transition = self.variant.apply(before.as_ref(), command, judged_at);
        self.check_step(
            worker,
            before.as_ref(),
            &summary,
            &transition.reply,
            &transition.write,
        );
        trace!(
            self,
            "store applies #{cmd} {} of w{worker}: {:?}", summary.name, transition.reply
        );
        if let Write::Put(Record::Completed {
            owner, expires_at, ..
        }) = &transition.write
            && let Some(writer) = self.worker_of(*owner)
        {
            self.workers[writer].recorded_until = Some(expires_at.as_millis());
        }
        let notify = self.plan.notices
            && matches!(
                transition.write,
                Write::Delete | Write::Put(Record::Completed { .. })
            );
        self.records[stored] = match transition.write {
            Write::Unchanged => before,
            Write::Put(record) => Some(record),
            Write::Delete => None,
        };
        if notify {
            self.notify(stored, worker);
        }
        if self.rng.chance(network.reply_lost) {
            self.exercised(Exercised::ReplyLost);
            trace!(self, "the reply to #{cmd} of w{worker} is lost");
            return;
        }
        let mut delay = reply_delay(&mut self.rng);
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
                reply: Some(transition.reply),
            },
        );
    }

    /// The store tells every other live caller of the key that its record changed; each
    /// notice travels (and may be lost) like any message.
    fn notify(&mut self, stored: usize, writer: usize) {
        let network = self.plan.network;
        for other in 0..self.workers.len() {
            let w = &self.workers[other];
            if other == writer
                || self.storage[w.slot] != stored
                || w.outcome.is_some()
                || w.crashed_at.is_some()
            {
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

    fn done(&mut self, worker: usize, outcome: Outcome) {
        if self.workers[worker].outcome.is_some() {
            self.violation(Check::DriverProtocol, format!("w{worker} finished twice"));
            return;
        }
        trace!(self, "w{worker} done: {outcome:?}");
        let w = &self.workers[worker];
        let (client, try_no, slot) = (w.client as usize, w.try_no as usize, w.slot);
        let fingerprint = w.attempt.fingerprint();
        let own = w.charge.map(|charge| self.report.charges[charge].id());
        let lapsed = w.lapsed;
        let response = match &outcome {
            Outcome::Executed(execution) => {
                self.executed(execution);
                if lapsed && execution.protection == Protection::Reserved && !execution.lease_lost {
                    self.violation(
                        Check::LeaseLossReported,
                        format!("w{worker}'s lease lapsed at the store, but {execution:?}"),
                    );
                }
                if self.variant.answers_from_store() {
                    match &self.records[self.storage[slot]] {
                        Some(Record::Completed {
                            result: StoredResult::Value(body),
                            ..
                        }) => {
                            Response::Result(String::from_utf8_lossy(body.as_bytes()).into_owned())
                        }
                        _ => own.map_or(Response::NoBody, Response::Result),
                    }
                } else {
                    own.map_or(Response::NoBody, Response::Result)
                }
            }
            Outcome::Replayed { result } => {
                self.exercised(Exercised::Replay);
                match result.value() {
                    Some(body) => {
                        let text = String::from_utf8_lossy(body.as_bytes()).into_owned();
                        self.check_replay(worker, slot, fingerprint, &text);
                        Response::Result(text)
                    }
                    None => {
                        self.check_bodiless_replay(worker, slot, fingerprint);
                        Response::NoBody
                    }
                }
            }
            Outcome::ActionFailed { .. } => {
                self.exercised(Exercised::ActionFailed);
                Response::ActionFailed
            }
            Outcome::KeyReuse { stored, given } => {
                // A refusal is genuine: another request under this very key holds it.
                let genuine = stored != given
                    && self
                        .plan
                        .clients
                        .iter()
                        .any(|c| c.slot == slot && c.fingerprint == *stored);
                if !genuine {
                    self.violation(
                        Check::KeyReuseRefused,
                        format!(
                            "w{worker} refused as key reuse, but no other request used its key"
                        ),
                    );
                }
                Response::KeyReuse
            }
            Outcome::InProgress => {
                self.exercised(Exercised::InProgress);
                Response::InProgress
            }
            Outcome::StoreUnavailable => {
                self.exercised(Exercised::FailClosed);
                Response::StoreUnavailable
            }
            Outcome::Panicked(_) | Outcome::CorruptRecord | Outcome::Abandoned(_) => {
                self.violation(
                    Check::DriverProtocol,
                    format!("w{worker} ended in an outcome this world never causes: {outcome:?}"),
                );
                Response::NoBody
            }
        };
        let retry = matches!(
            response,
            Response::ActionFailed | Response::InProgress | Response::StoreUnavailable
        );
        self.workers[worker].outcome = Some(outcome);
        self.report.responses[client][try_no] = Some(response);
        let plan = &self.plan.clients[client];
        let state = &mut self.clients[client];
        if !retry {
            state.done = true;
            if let (Some(after), false) = (plan.late_retry, state.late_used) {
                state.late_used = true;
                self.at(
                    self.now + after,
                    Event::Try {
                        client: client as u32,
                        late: true,
                    },
                );
            }
        } else if !state.done && try_no as u32 + 1 == state.tries && state.tries < plan.max_tries {
            self.at(
                self.now + plan.retry_delay,
                Event::Try {
                    client: client as u32,
                    late: false,
                },
            );
        }
    }

    fn executed(&mut self, execution: &Execution) {
        if execution.protection == Protection::FailedOpen {
            self.exercised(Exercised::FailOpen);
        }
        if execution.record == Recording::Unknown {
            self.exercised(Exercised::CompleteUnknown);
        }
    }

    /// End of run: every attempt finished, and every extra effect has a cause.
    fn finish(mut self) -> RunReport {
        for worker in 0..self.workers.len() {
            let w = &self.workers[worker];
            if w.crashed_at.is_none() && w.outcome.is_none() {
                let detail = format!("w{worker} never finished: {:?}", w.attempt);
                self.violation(Check::EveryAttemptFinishes, detail);
            }
        }
        for slot in 0..self.plan.slots.len() {
            self.classify_effects(slot);
        }
        self.report.trace = self.trace.take();
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Shape;

    /// The liveness check fails when a run does not finish within its budget (here a
    /// budget far too small for any run), and reports every unfinished attempt.
    #[test]
    fn a_run_that_does_not_finish_is_reported() {
        let mut rng = SimRng::new(3);
        let plan = Plan::random(&mut rng, Shape::default()).unwrap();
        let mut world = World::new(&plan, Variant::Correct, rng.clone(), false);
        world.budget = 20;
        let report = world.run();
        let stuck = report
            .violations
            .iter()
            .filter(|v| v.check == Check::EveryAttemptFinishes)
            .count();
        assert!(stuck >= 2, "{:?}", report.violations);
        let finished = World::new(&plan, Variant::Correct, rng, false).run();
        assert!(finished.violations.is_empty(), "{:?}", finished.violations);
    }
}
