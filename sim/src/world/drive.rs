//! A try from its start: the attempt made (transactional or not), polled until it waits or
//! is done, its commands sent over the network, its action run, and its view of its lease
//! written down.

use std::fmt::Write as _;

use idem_check::{AttemptSpec, EventKind, Received};
use idem_core::{Attempt, Command, Fingerprint, LeaseState, Options, OwnerToken, Step, Timestamp};

use super::World;
use super::events::Event;
use super::worker::Worker;
use crate::faults::Exercised;
use crate::plan::{ActionPlan, Stage};

/// Who makes a call: a client's try, or a consumer's delivery of a message.
pub(super) struct Caller<'p> {
    pub(super) slot: usize,
    pub(super) fingerprint: Fingerprint,
    pub(super) options: &'p Options,
    pub(super) clock_offset: u64,
    pub(super) client: u32,
    pub(super) try_no: u32,
    pub(super) message: Option<u32>,
}

impl World<'_> {
    pub(super) fn try_request(&mut self, client: usize, late: bool) {
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

    pub(super) fn start_try(&mut self, client: usize) {
        let plans = self.plan;
        let plan = &plans.clients[client];
        let state = &mut self.clients[client];
        let try_no = state.tries;
        state.tries += 1;
        let more_tries = state.tries < plan.max_tries;
        let worker = self.workers.len();
        state.current = Some(worker);
        self.report.responses[client].push(None);
        self.report.requests += 1;
        // Tries past the planned ones repeat the last action.
        let action = plan
            .actions
            .get(try_no as usize)
            .or(plan.actions.last())
            .copied()
            .unwrap_or(ActionPlan::charge(0));
        let caller = Caller {
            slot: plan.slot,
            fingerprint: plan.fingerprint,
            options: &plan.options,
            clock_offset: plan.clock_offset,
            client: client as u32,
            try_no,
            message: None,
        };
        self.spawn(caller, action);
        let owner = self.workers[worker].attempt.owner();
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

    /// A new worker for `caller`'s call, running `action` if its attempt says to run:
    /// its owner token and jitter drawn, its attempt made (transactional if its key's
    /// actions are) and written down. Returns the worker.
    pub(super) fn spawn(&mut self, caller: Caller<'_>, action: ActionPlan) -> usize {
        let worker = self.workers.len();
        let owner = OwnerToken::from_u128((u128::from(self.rng.next_u64()) << 64) | worker as u128);
        let jitter = self.rng.next_u64();
        let slot = &self.plan.slots[caller.slot];
        self.history.add_attempt(AttemptSpec {
            label: idem_check::numbered("w", worker),
            key: caller.slot,
            fingerprint: caller.fingerprint,
            owner,
        });
        let now = Timestamp::from_millis(self.now + caller.clock_offset);
        let mut attempt = Attempt::new(
            slot.operation.clone(),
            slot.key.clone(),
            caller.fingerprint,
            owner,
            jitter,
            caller.options.clone(),
            now,
        );
        if slot.transactional {
            attempt = attempt.in_transaction();
            self.note(worker, EventKind::Transactional);
        }
        self.workers.push(Worker {
            client: caller.client,
            try_no: caller.try_no,
            message: caller.message,
            disposed: false,
            clock_offset: caller.clock_offset,
            slot: caller.slot,
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
            fence: None,
            transactional: slot.transactional,
            written: None,
            read_before_landing: false,
            outcome: None,
            last_view: None,
        });
        worker
    }

    /// Polls the attempt until it waits or is done, carrying out each step.
    pub(super) fn drive(&mut self, worker: usize) {
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
    pub(super) fn enter(&mut self, worker: usize, stage: Stage) {
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

    pub(super) fn send(&mut self, worker: usize, command: Command) {
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
    pub(super) fn send_untracked(&mut self, worker: usize, command: Command) {
        trace!(self, "w{worker} sends #0 {} on its own", command.name());
        self.note(worker, EventKind::Sent(command.kind()));
        self.transmit(worker, 0, command);
    }

    pub(super) fn transmit(&mut self, worker: usize, cmd: u32, command: Command) {
        let network = self.plan.network;
        if self.rng.chance(network.request_lost) {
            self.exercised(Exercised::RequestLost);
            trace!(self, "#{cmd} of w{worker} is lost before the store");
            return;
        }
        let delay = self.rng.between(network.min_delay, network.max_delay);
        let command = self.commands.put(command);
        self.at(
            self.now + delay,
            Event::Arrive {
                worker: worker as u32,
                cmd,
                command,
            },
        );
    }

    pub(super) fn run_action(&mut self, worker: usize) {
        let clock = Timestamp::from_millis(self.caller_now(worker));
        let w = &mut self.workers[worker];
        let action = w.action;
        w.running = true;
        w.fence = w.attempt.fence();
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
    pub(super) fn view_lease(&mut self, worker: usize, clock: u64) {
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
}
