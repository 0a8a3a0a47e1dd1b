//! The discrete-event engine: callers, the network, the store node and the provider on
//! simulated milliseconds, driving the real `idem_core::Attempt` and the real
//! `idem_core::record::apply` (or a deliberately broken [`Variant`]). The run is written
//! down as it happens, in `idem_check`'s [`History`] (every event stamped with the store's
//! clock), and judged at its end by `idem_check`'s judge of MODEL.md's rules.

use std::fmt::Write as _;

use idem_check::{EventKind, History, KeySpec, Provider, Variant, numbered};
use idem_core::{Command, DownstreamKey, Record};

use crate::faults::Exercised;
use crate::plan::Plan;
use crate::report::RunReport;
use crate::rng::SimRng;

/// A run that processes more events than this is stuck (a livelock): every attempt still
/// going is written down as stuck, which breaks the rule "liveness".
const EVENT_BUDGET: u64 = 2_000_000;

/// History events a run has room for from its start: a run at the default shape writes about
/// 360 (many more now and then), so its history is rarely copied as it grows.
const HISTORY_RESERVED: usize = 1_024;

/// Events a run's queue has room for from its start: it holds a few dozen at a time.
const QUEUE_RESERVED: usize = 64;

macro_rules! trace {
    ($world:expr, $($arg:tt)*) => {
        if let Some(out) = $world.trace.as_mut() {
            let _ = writeln!(out, "{:>9} {}", $world.now, format_args!($($arg)*));
        }
    };
}

mod answer;
mod broker;
mod drive;
mod events;
mod gone;
mod store_node;
mod worker;

use broker::Held;
use events::{Answer, Event, Parcels, Queue};
use store_node::storage_slots;
use worker::{Client, Worker};

/// Workers a run of `plan` is likely to make, reserved at its start: a worker holds its
/// attempt and is large, and moving them all as the vector grows cost a run more than any
/// of its events did. Each client's tries and its late retry, and a few deliveries of each
/// message (the vector still grows past that, should a run need it).
fn expected_workers(plan: &Plan) -> usize {
    let tries: usize = plan
        .clients
        .iter()
        .map(|client| client.max_tries as usize + 1)
        .sum();
    tries + plan.messages.len() * 4
}

/// What a run leaves for the next one on its thread: its largest buffers, emptied. A run
/// at the default shape writes about 360 history events and makes about twenty workers (and
/// reserves room for more), some 150 KB between them with the history's reserve; a run that
/// allocates them afresh pays for memory no cache holds (and the allocator's slow path for
/// blocks that large), where the last run's are still warm.
#[derive(Default)]
pub(crate) struct Spare {
    history: History,
    workers: Vec<Worker>,
    queue: Queue,
    commands: Parcels<Command>,
    answers: Parcels<Answer>,
}

impl Spare {
    /// Keeps a finished run's history for the next run, which empties it as it empties
    /// every other buffer ([`World::reusing`]).
    pub(crate) fn keep_history(&mut self, history: History) {
        self.history = history;
    }
}

/// One run of a plan.
pub(crate) struct World<'p> {
    plan: &'p Plan,
    variant: Variant,
    rng: SimRng,
    now: u64,
    queue: Queue,
    /// The commands on their way to the store, named by their events.
    commands: Parcels<Command>,
    /// The answers on their way back, named by their events.
    answers: Parcels<Answer>,
    /// The store's records, by storage slot.
    records: Vec<Option<Record>>,
    /// Whether a storage slot still holds the value that is not a record it started with.
    garbage: Vec<bool>,
    /// The storage slot of each plan slot: the slot itself, unless the store files two
    /// keys under one (a broken variant).
    storage: Vec<usize>,
    /// For each storage slot, how many times its record was written.
    versions: Vec<u64>,
    /// For each storage slot, the store's fences (MODEL.md `F1`): counted per record, from
    /// its clock.
    fences: Vec<idem_core::FenceCounter>,
    /// For each storage slot, while a transactional insert applied to it is committing:
    /// when it lands, and whose it is. Reads meanwhile find no record; other commands wait.
    committing: Vec<Option<(u64, usize)>>,
    workers: Vec<Worker>,
    clients: Vec<Client>,
    /// What the broker holds of each message (MODEL.md `C1`).
    held: Vec<Held>,
    report: RunReport,
    /// What happened, for the judge.
    history: History,
    trace: Option<String>,
    /// Events allowed before the run counts as stuck.
    budget: u64,
    /// Transactional writes made so far, committed or not (their ids are `tx_N`).
    writes: usize,
    /// Each plan slot's downstream key (MODEL.md `D1`), derived once per run.
    downstream: Vec<DownstreamKey>,
}

impl<'p> World<'p> {
    pub(crate) fn new(plan: &'p Plan, variant: Variant, rng: SimRng, trace: bool) -> Self {
        Self::reusing(plan, variant, rng, trace, Spare::default())
    }

    /// A run of `plan` in the buffers an earlier run left (emptied; the run is the same as
    /// in new ones).
    pub(crate) fn reusing(
        plan: &'p Plan,
        variant: Variant,
        rng: SimRng,
        trace: bool,
        spare: Spare,
    ) -> Self {
        let Spare {
            mut history,
            mut workers,
            mut queue,
            mut commands,
            mut answers,
        } = spare;
        commands.clear();
        answers.clear();
        history.clear();
        history.events.reserve(HISTORY_RESERVED);
        workers.clear();
        workers.reserve(expected_workers(plan));
        queue.clear();
        queue.reserve(QUEUE_RESERVED);
        let mut world = World {
            plan,
            variant,
            rng,
            now: 0,
            queue,
            commands,
            answers,
            records: vec![None; plan.slots.len()],
            garbage: plan.slots.iter().map(|slot| slot.corrupt).collect(),
            storage: storage_slots(plan, variant),
            versions: vec![0; plan.slots.len()],
            fences: vec![idem_core::FenceCounter::default(); plan.slots.len()],
            committing: vec![None; plan.slots.len()],
            workers,
            clients: plan.clients.iter().map(|_| Client::default()).collect(),
            held: plan.messages.iter().map(|_| Held::default()).collect(),
            report: RunReport {
                responses: vec![Vec::new(); plan.clients.len()],
                ..RunReport::default()
            },
            history,
            trace: trace.then(String::new),
            budget: EVENT_BUDGET,
            writes: 0,
            downstream: Vec::with_capacity(plan.slots.len()),
        };
        for slot in &plan.slots {
            let (operation, key) = (slot.operation.as_str(), slot.key.as_str());
            let filed = variant.files_as(operation, key);
            let spec = KeySpec {
                operation: operation.to_owned(),
                key: key.to_owned(),
                filed: (filed != (operation, key))
                    .then(|| (filed.0.to_owned(), filed.1.to_owned())),
                corrupt: slot.corrupt,
            };
            // The judge's derivation of the same names (remembered across runs); the slot's
            // names are a valid operation and key, so it always has one.
            let downstream = spec
                .downstream_key()
                .unwrap_or_else(|| DownstreamKey::derive(&slot.operation, &slot.key));
            world.history.add_key(spec);
            world.downstream.push(downstream);
        }
        world.trace_plan();
        for (m, message) in plan.messages.iter().enumerate() {
            world.history.add_message(idem_check::MessageSpec {
                label: numbered("m", m),
                key: message.slot,
            });
            world.report.broker.messages += 1;
            world.at(
                message.publish,
                Event::Deliver {
                    message: m as u32,
                    published: true,
                },
            );
        }
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
        for (m, message) in plan.messages.iter().enumerate() {
            let options = &message.options;
            let _ = writeln!(
                out,
                "  m{m}: at {}ms key {} publication {} clock +{}ms, {:?} {:?}, lease {:?}, \
                 wait {:?}, store retries {}, reply timeout {:?}, {:?}, ack-wait {}ms, \
                 acks lost {:?}",
                message.publish,
                message.slot,
                message.copy + 1,
                message.clock_offset,
                options.in_flight(),
                options.on_store_failure(),
                options.lease(),
                options.wait_deadline(),
                options.store_retries(),
                options.reply_timeout(),
                message.redelivery,
                message.ack_wait,
                message.acks_lost
            );
        }
    }

    /// Runs to the end and checks what is left to check.
    pub(crate) fn run(self) -> RunReport {
        self.run_sparing().0
    }

    /// As [`run`](Self::run), and gives back the run's buffers for the next (its history is
    /// the report's).
    pub(crate) fn run_sparing(mut self) -> (RunReport, Spare) {
        while let Some((at, event)) = self.queue.pop() {
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
        self.queue.push(at, event);
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
        self.now + self.workers[worker].clock_offset
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
            } => {
                if let Some(command) = self.commands.take(command) {
                    self.store_receives(worker as usize, cmd, command);
                }
            }
            Event::CommitLands {
                worker,
                cmd,
                command,
            } => {
                if let Some(command) = self.commands.take(command) {
                    self.commit_lands(worker as usize, cmd, command);
                }
            }
            Event::Effect { worker } => self.effect(worker as usize),
            Event::Deliver { message, published } => self.deliver(message as usize, published),
            Event::AckWait { message, delivery } => self.ack_wait(message as usize, delivery),
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

    /// The provider model the run's requests are judged at (MODEL.md `D1`).
    pub(crate) fn with_provider(mut self, provider: Provider) -> Self {
        self.history.provider = provider;
        self
    }

    /// End of run: the judge reads the run's history; what it found, and the cause of every
    /// extra effect, go into the report.
    fn finish(mut self) -> (RunReport, Spare) {
        for line in self.history.statement.lines() {
            if self.plan.messages.iter().any(|m| m.slot == line.key) {
                self.report.broker.message_effects += 1;
                if self.plan.slots[line.key].transactional {
                    self.report.broker.transactional_message_effects += 1;
                }
            }
        }
        let verdict = idem_check::judge(&self.history);
        for violation in &verdict.violations {
            trace!(self, "VIOLATION {violation}");
        }
        self.report.violations = verdict.violations;
        self.report.extra = verdict.extra;
        self.report.extra_transactional = verdict.extra_transactional;
        self.report.extra_at_provider = verdict.extra_at_provider;
        self.report.absorbed = verdict.absorbed;
        self.report.stale_at_provider = verdict.stale_at_provider;
        self.report.broker.extra_messages = verdict.extra_messages;
        self.report.broker.extra_transactional_messages = verdict.extra_transactional_messages;
        self.report.trace = self.trace.take();
        self.report.history = self.history;
        let spare = Spare {
            history: History::default(),
            workers: self.workers,
            queue: self.queue,
            commands: self.commands,
            answers: self.answers,
        };
        (self.report, spare)
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
        world.budget = 60;
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
