//! One state of the exhaustive model, and the steps out of it.
//!
//! The state is the store (the [`World`]: records, fences, the run's history), the store's
//! clock, and each caller as a driver holds it: the real `Attempt`, the action running, the
//! command left hanging, and what the caller does next. A caller either **sleeps** until an
//! instant (the attempt said `Wait`), or is **ready** with one step due now: a command to
//! send, its action to hand out or end, an outcome to give. Everything a caller does between
//! two such steps (polls that only say "wait", the lease view it writes down) touches nobody
//! else, so it is done at once: the model's choices are only what another caller could tell
//! apart.
//!
//! The choices out of a state ([`State::choices`]):
//!
//! - a ready caller takes its step; a command it sends reaches the store now and is answered,
//!   or, while the run's budget of store faults lasts, is applied with its reply lost, is not
//!   applied (unreachable), or hangs (applied or not at the instant the attempt gives it up);
//! - while the budgets last, a caller whose action runs crashes there, or pauses (past its
//!   lease) instead of taking its step;
//! - when no caller is ready, the clock moves to the earliest instant a caller sleeps until.
//!
//! Time moves only at a caller's own instants, so every instant the protocol can tell apart
//! is reached: a renewal, a reply deadline, a waiter's next poll, a lease's end as the
//! holder counts it; a paused holder wakes past the store's lease, and a command that hangs
//! lands at the latest instant it can.

use idem_check::{Answer, EventKind, Variant};
use idem_core::record::CommandKind;
use idem_core::{
    Abandonment, ActionResult, Attempt, Command, Key, LeaseState, Operation, Outcome, Step,
    Timestamp,
};

use crate::caller::{
    Action, CallerPlan, End, Hung, MAX_STEPS, OPERATION, Running, action_end, feed, key_name,
    start_action,
};
use crate::world::{AttemptId, Delivery, World};

/// How much of each fault a run may still use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    /// Store commands that fail: a reply lost, the store unreachable, a command that hangs.
    pub store_faults: u8,
    /// Callers that crash while their action runs.
    pub crashes: u8,
    /// Callers that pause, while their action runs, until past their lease.
    pub pauses: u8,
}

/// One way the model moves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Caller `caller` takes its step; a command it sends meets `delivery`.
    Step {
        /// The caller.
        caller: usize,
        /// What becomes of the command it sends (`Normal` when it sends none).
        delivery: Delivery,
    },
    /// Caller `caller` crashes while its action runs.
    Crash {
        /// The caller.
        caller: usize,
    },
    /// Caller `caller` pauses while its action runs, for the scenario's pause.
    Pause {
        /// The caller.
        caller: usize,
    },
    /// Nobody is ready: the clock moves to the earliest instant a caller sleeps until.
    Tick,
}

/// What a caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Next {
    /// Sleeps until this instant of the store's clock.
    Sleep(u64),
    /// Hands its action's result to the attempt, or goes away (the action's end is due).
    EndAction,
    /// Acts on the step the attempt gave, first giving up the hung command when `give_up`.
    Act {
        /// The attempt's step.
        step: Step,
        /// The attempt gave the hung command up.
        give_up: bool,
    },
    /// Its client is done: no more attempts.
    Gone,
}

/// One client: its current attempt, driven as `idem`'s driver drives one.
#[derive(Debug, Clone)]
struct Caller {
    plan: CallerPlan,
    id: AttemptId,
    attempt: Attempt,
    action: Action,
    running: Option<Running>,
    hung: Option<Hung>,
    reserves_sent: u32,
    polls: usize,
    next: Next,
    /// Paused until this instant (store's clock), its due step held until then.
    paused_until: Option<u64>,
    /// The last lease view written down, and when: a poll that says the same at the same
    /// instant writes nothing more.
    last_view: Option<(u64, u64)>,
}

/// One state of the model; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct State {
    variant: Variant,
    /// Whether the callers' actions are transactional: writes that commit with the record.
    transactional: bool,
    world: World,
    now: u64,
    callers: Vec<Caller>,
    budget: Budget,
    pause_ms: u64,
}

fn key_and_operation(plan: &CallerPlan) -> (Operation, Key) {
    // The model's operation and key names are fixed and valid.
    #[allow(clippy::expect_used)]
    (
        Operation::new(OPERATION).expect("the model's operation is valid"),
        Key::new(key_name(plan.key)).expect("the model's keys are valid"),
    )
}

impl Caller {
    fn new(plan: CallerPlan, id: AttemptId, store_now: u64, transactional: bool) -> Self {
        let (operation, key) = key_and_operation(&plan);
        let mut attempt = Attempt::new(
            operation,
            key,
            plan.fingerprint(),
            id.owner(),
            u64::from(id.attempt) << 16 | id.caller as u64,
            plan.options.clone(),
            Timestamp::from_millis(plan.caller_clock(store_now)),
        );
        if transactional {
            attempt = attempt.in_transaction();
        }
        let index = usize::try_from(id.attempt).unwrap_or(usize::MAX);
        let action = plan
            .actions
            .get(index)
            .or(plan.actions.last())
            .copied()
            .unwrap_or(Action::Succeed);
        Self {
            plan,
            id,
            attempt,
            action,
            running: None,
            hung: None,
            reserves_sent: 0,
            polls: 0,
            next: Next::Sleep(store_now),
            paused_until: None,
            last_view: None,
        }
    }

    fn caller_now(&self, store: u64) -> Timestamp {
        Timestamp::from_millis(self.plan.caller_clock(store))
    }

    fn ready(&self) -> bool {
        self.paused_until.is_none() && matches!(self.next, Next::EndAction | Next::Act { .. })
    }

    /// The instant this caller sleeps or is paused until, if it waits for one.
    fn wakes_at(&self) -> Option<u64> {
        match (self.paused_until, &self.next) {
            (Some(at), _) | (None, &Next::Sleep(at)) => Some(at),
            _ => None,
        }
    }

    fn sends(&self) -> bool {
        matches!(
            self.next,
            Next::Act {
                step: Step::Send { .. },
                ..
            }
        )
    }
}

impl State {
    /// The first state of a run of `callers` on `keys` keys (those in `corrupt` holding a
    /// value that is not a record) against `variant`, with `budget` of faults and pauses of
    /// `pause_ms`; the actions make writes that commit with the record when `transactional`.
    pub fn new(
        variant: Variant,
        keys: usize,
        corrupt: &[usize],
        callers: &[CallerPlan],
        budget: Budget,
        pause_ms: u64,
        transactional: bool,
    ) -> Self {
        let mut state = Self {
            variant,
            transactional,
            world: World::new(variant, keys, corrupt, callers),
            now: 0,
            callers: callers
                .iter()
                .enumerate()
                .map(|(caller, plan)| {
                    let id = AttemptId { caller, attempt: 0 };
                    Caller::new(plan.clone(), id, 0, transactional)
                })
                .collect(),
            budget,
            pause_ms,
        };
        for caller in 0..state.callers.len() {
            state.started(caller);
            state.advance(caller);
        }
        state
    }

    /// A caller's attempt has started: a transactional one says so before anything else.
    fn started(&mut self, caller: usize) {
        if self.transactional {
            self.note(caller, EventKind::Transactional);
        }
    }

    /// The run written so far.
    pub fn history(&self) -> &idem_check::History {
        self.world.history()
    }

    /// Every way this state moves on, into `out`; none when the run is over.
    pub fn choices(&self, out: &mut Vec<Choice>) {
        out.clear();
        for (index, caller) in self.callers.iter().enumerate() {
            if !caller.ready() {
                continue;
            }
            out.push(Choice::Step {
                caller: index,
                delivery: Delivery::Normal,
            });
            if caller.sends() && self.budget.store_faults > 0 {
                for delivery in [
                    Delivery::ReplyLost,
                    Delivery::Unreachable,
                    Delivery::Hung { applied: true },
                    Delivery::Hung { applied: false },
                ] {
                    out.push(Choice::Step {
                        caller: index,
                        delivery,
                    });
                }
            }
            if caller.running.is_some() {
                if self.budget.crashes > 0 {
                    out.push(Choice::Crash { caller: index });
                }
                if self.budget.pauses > 0 {
                    out.push(Choice::Pause { caller: index });
                }
            }
        }
        if out.is_empty() && self.wake_at().is_some() {
            out.push(Choice::Tick);
        }
    }

    /// The earliest instant a caller sleeps until, if any still has one.
    fn wake_at(&self) -> Option<u64> {
        self.callers.iter().filter_map(Caller::wakes_at).min()
    }

    /// Moves on by `choice`, one of [`State::choices`].
    pub fn apply(&mut self, choice: Choice) {
        match choice {
            Choice::Tick => {
                if let Some(at) = self.wake_at() {
                    self.now = self.now.max(at);
                }
                let now = self.now;
                for caller in &mut self.callers {
                    caller.paused_until.take_if(|until| *until <= now);
                }
                for caller in 0..self.callers.len() {
                    self.advance(caller);
                }
            }
            Choice::Crash { caller } => {
                self.budget.crashes = self.budget.crashes.saturating_sub(1);
                if let Some(c) = self.callers.get_mut(caller) {
                    c.next = Next::Gone;
                    let who = c.id;
                    self.world.note(who, self.now, EventKind::Crashed);
                }
            }
            Choice::Pause { caller } => {
                self.budget.pauses = self.budget.pauses.saturating_sub(1);
                let until = self.now.saturating_add(self.pause_ms);
                if let Some(c) = self.callers.get_mut(caller) {
                    // The step it was about to take is taken when it wakes.
                    c.paused_until = Some(until);
                    let who = c.id;
                    self.world.note(who, self.now, EventKind::Paused { until });
                }
            }
            Choice::Step { caller, delivery } => {
                if delivery != Delivery::Normal {
                    self.budget.store_faults = self.budget.store_faults.saturating_sub(1);
                }
                self.step(caller, delivery);
                self.advance(caller);
            }
        }
    }

    /// Sends `command` of `caller` to the store now, as `delivery` says.
    fn store(
        &mut self,
        caller: usize,
        command: Command,
        delivery: Delivery,
        taken: bool,
    ) -> Answer {
        let Some(c) = self.callers.get(caller) else {
            return Answer::NotApplied;
        };
        let (who, key, skew) = (c.id, c.plan.key, c.plan.skew_ms);
        let sender_now = self.now.saturating_add_signed(skew);
        self.world
            .store(who, key, command, self.now, sender_now, delivery, taken)
    }

    fn note(&mut self, caller: usize, kind: EventKind) {
        if let Some(c) = self.callers.get(caller) {
            self.world.note(c.id, self.now, kind);
        }
    }

    /// The caller's client is done with this attempt: it tries again with a fresh attempt
    /// when `retry` and it has attempts left, else it is gone.
    fn finish_attempt(&mut self, caller: usize, retry: bool) {
        let now = self.now;
        let Some(c) = self.callers.get_mut(caller) else {
            return;
        };
        let attempt = c.id.attempt + 1;
        if retry && attempt < c.plan.attempts.max(1) {
            let id = AttemptId { caller, attempt };
            *c = Caller::new(c.plan.clone(), id, now, self.transactional);
            self.started(caller);
        } else {
            c.next = Next::Gone;
        }
    }

    /// A protocol breach by the machine (or this driver): written down, and the caller stops.
    fn breach(&mut self, caller: usize, what: String) {
        self.note(caller, EventKind::Protocol(what));
        if let Some(c) = self.callers.get_mut(caller) {
            c.next = Next::Gone;
        }
    }

    /// The caller abandons its attempt: its caller went away, or its call ended fail-closed.
    fn abandon(&mut self, caller: usize) {
        let now = self.now;
        if let Some(c) = self.callers.get_mut(caller) {
            let at = c.caller_now(now);
            c.attempt.abandon(at);
        }
        self.note(caller, EventKind::Abandoned);
    }

    /// Feeds what came back for a command as the driver does.
    fn feed(&mut self, caller: usize, delivery: Delivery, answer: Answer) {
        let (now, variant) = (self.now, self.variant);
        let Some(c) = self.callers.get_mut(caller) else {
            return;
        };
        let at = c.caller_now(now);
        if let Err(error) = feed(&mut c.attempt, variant, delivery, answer, at) {
            self.breach(caller, error);
        }
    }

    /// The caller's due step, with `delivery` for the command it sends.
    fn step(&mut self, caller: usize, delivery: Delivery) {
        let Some(c) = self.callers.get_mut(caller) else {
            return;
        };
        match std::mem::replace(&mut c.next, Next::Sleep(self.now)) {
            Next::EndAction => self.end_action(caller),
            Next::Act { step, give_up } => {
                if give_up && let Some(hung) = c.hung.take() {
                    let applied = Delivery::Hung {
                        applied: hung.applied,
                    };
                    self.store(caller, hung.command, applied, true);
                }
                self.act(caller, step, delivery);
            }
            other => c.next = other,
        }
    }

    fn end_action(&mut self, caller: usize) {
        let now = self.now;
        let variant = self.variant;
        let Some(c) = self.callers.get_mut(caller) else {
            return;
        };
        let Some(running) = c.running.take() else {
            return;
        };
        match running.end {
            End::Result(result) => {
                let ended = action_end(&result);
                let result = match result {
                    ActionResult::Panicked if variant.feeds_panic_as_failure() => {
                        ActionResult::Failed
                    }
                    other => other,
                };
                let at = c.caller_now(now);
                let fed = c.attempt.handle_action_result(result, at);
                self.note(caller, EventKind::ActionEnded(ended));
                if let Err(error) = fed {
                    self.breach(caller, error.to_string());
                }
            }
            End::Abandon => {
                let hung = c.hung.take();
                self.abandon(caller);
                // A command left hanging is dropped with the call: it lands now or never.
                if let Some(hung) = hung {
                    let applied = Delivery::Hung {
                        applied: hung.applied,
                    };
                    self.store(caller, hung.command, applied, false);
                }
                let Some(c) = self.callers.get(caller) else {
                    return;
                };
                if variant.releases_on_abandon()
                    && c.attempt.outcome() == Some(&Outcome::Abandoned(Abandonment::ActionDropped))
                {
                    let release = Command::Release {
                        owner: c.id.owner(),
                    };
                    self.store(caller, release, Delivery::Normal, false);
                }
            }
        }
    }

    fn act(&mut self, caller: usize, step: Step, delivery: Delivery) {
        let now = self.now;
        let Some(c) = self.callers.get_mut(caller) else {
            return;
        };
        match step {
            Step::Send { command, reply_by } => {
                let reserve = command.kind() == CommandKind::Reserve;
                let goes_away = c.action == Action::AbandonMidReserve
                    && reserve
                    && c.reserves_sent == 0
                    && !c.attempt.is_abandoned();
                if reserve {
                    c.reserves_sent += 1;
                }
                if let (Delivery::Hung { applied }, false) = (delivery, goes_away) {
                    c.hung = Some(Hung {
                        command,
                        applied,
                        reply_by,
                    });
                    return;
                }
                let answer = self.store(caller, command, delivery, !goes_away);
                if goes_away {
                    // The reply (if any) is dropped with the call.
                    self.abandon(caller);
                } else {
                    self.feed(caller, delivery, answer);
                }
            }
            Step::Run if c.attempt.is_abandoned() => {
                self.breach(caller, "an abandoned attempt handed out Run".into());
            }
            Step::Run => {
                let at = c.caller_now(now);
                let unprotected = c.attempt.lease(at) == LeaseState::Unprotected;
                let (who, action, wakeups) = (c.id, c.action, c.plan.action_wakeups);
                // A transactional action's effect is its writes, uncommitted until its
                // complete records the result; any other's is a charge.
                let transactional = self.transactional;
                let end = start_action(
                    &mut self.world,
                    who,
                    action,
                    unprotected,
                    transactional,
                    now,
                );
                let Some(c) = self.callers.get_mut(caller) else {
                    return;
                };
                match end {
                    // A crashed caller never completes or releases.
                    None => c.next = Next::Gone,
                    Some(end) => {
                        c.running = Some(Running {
                            wakeups_left: wakeups,
                            end,
                        });
                    }
                }
            }
            Step::Wait { until } => self.sleep(caller, until),
            Step::Done(outcome) if c.attempt.is_abandoned() => {
                // Nobody waits for a settlement's outcome; the client tries again.
                self.note(caller, EventKind::Settled(outcome));
                self.finish_attempt(caller, true);
            }
            Step::Done(Outcome::StoreUnavailable) => {
                // As the driver does after a fail-closed refusal: answer the caller, then
                // settle what the failed reserves may have left, then retry.
                self.note(caller, EventKind::Finished(Outcome::StoreUnavailable));
                self.abandon(caller);
            }
            Step::Done(outcome) => {
                let retry = matches!(outcome, Outcome::InProgress | Outcome::ActionFailed { .. });
                self.note(caller, EventKind::Finished(outcome));
                self.finish_attempt(caller, retry);
            }
        }
    }

    /// The attempt said `Wait`: the caller sleeps until that instant, or, with nothing to
    /// wait for, its running action simply finishes.
    fn sleep(&mut self, caller: usize, until: Option<Timestamp>) {
        let now = self.now;
        let Some(c) = self.callers.get_mut(caller) else {
            return;
        };
        match until {
            Some(until) => {
                c.next = Next::Sleep(c.plan.store_clock(until.as_millis()).max(now));
                if let Some(running) = c.running.as_mut() {
                    running.wakeups_left = running.wakeups_left.saturating_sub(1);
                }
            }
            None => match c.running.as_mut() {
                // Nothing to renew (the lease is lost, or the action runs unprotected).
                Some(running) => running.wakeups_left = 0,
                None => {
                    self.note(
                        caller,
                        EventKind::Stuck("the machine waits for nothing".into()),
                    );
                    if let Some(c) = self.callers.get_mut(caller) {
                        c.next = Next::Gone;
                    }
                }
            },
        }
    }

    /// Moves the caller on by itself until its next step that another caller could tell
    /// apart is due, or until it sleeps past now.
    fn advance(&mut self, caller: usize) {
        loop {
            let now = self.now;
            let Some(c) = self.callers.get_mut(caller) else {
                return;
            };
            match c.next {
                Next::Sleep(at) if at <= now => {}
                _ => return,
            }
            if c.running.as_ref().is_some_and(|r| r.wakeups_left == 0) {
                c.next = Next::EndAction;
                return;
            }
            c.polls += 1;
            if c.polls > MAX_STEPS {
                let stuck = format!("no outcome after {MAX_STEPS} polls");
                self.note(caller, EventKind::Stuck(stuck));
                if let Some(c) = self.callers.get_mut(caller) {
                    c.next = Next::Gone;
                }
                return;
            }
            let at = c.caller_now(now);
            let step = c.attempt.poll(at);
            let believed = if c.attempt.lease(at) == LeaseState::Held {
                c.attempt
                    .lease_confirmed_until()
                    .map(|until| c.plan.store_clock(until.as_millis()))
            } else {
                None
            };
            // While a command is out, the machine only ever asks to wait; anything else (or
            // no command awaited any more) means it gave the hung command up.
            let give_up = c.hung.is_some()
                && (!c.attempt.awaiting_reply() || !matches!(step, Step::Wait { .. }));
            let overdue = !give_up && c.hung.as_ref().is_some_and(|h| at >= h.reply_by);
            if let Some(until) = believed
                && c.last_view != Some((now, until))
            {
                c.last_view = Some((now, until));
                self.note(caller, EventKind::LeaseView { until });
            }
            if overdue {
                let what = "the attempt still awaits a reply past its own reply deadline";
                self.breach(caller, what.into());
                return;
            }
            match step {
                Step::Wait { until } if !give_up => self.sleep(caller, until),
                step => {
                    if let Some(c) = self.callers.get_mut(caller) {
                        c.next = Next::Act { step, give_up };
                    }
                    return;
                }
            }
        }
    }
}
