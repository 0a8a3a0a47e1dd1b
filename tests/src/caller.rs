//! One client: it drives the real `idem_core::Attempt` exactly as a driver does (poll, send
//! the command, feed the reply or the failure, run the action, feed its result, sleep until
//! the machine's wake-up), and retries with a fresh attempt after a client-visible failure.
//!
//! Time: the run has one logical clock, the store's. A caller's own clock is the store's
//! plus its skew; when the machine asks to sleep until an instant of the caller's clock, the
//! caller moves the shared clock forward to it (a sleeping caller is where time passes), and
//! the model checker decides who else runs first, so a lease can run out anywhere.

use idem_core::record::Reply;
use idem_core::{
    ActionResult, Attempt, Body, Execution, Fingerprint, Key, LeaseState, Operation, Options,
    Outcome, Protection, Recording, Step, Timestamp,
};

use crate::history::{AttemptId, EventKind};
use crate::platform::Platform;
use crate::world::Delivery;

/// How far every caller's clock is ahead of the store's before its skew: callers count
/// from an epoch of their own, and skews stay well inside it, so no clock saturates.
pub const CALLER_EPOCH_MS: u64 = 10_000;

/// The most polls one attempt may take before the run calls it stuck.
pub const MAX_STEPS: usize = 400;

/// What a caller's action does when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Charges the card and succeeds with the provider's answer.
    Succeed,
    /// Is declined: no effect, and the attempt reports a failure (`I5`).
    Fail,
    /// Charges the card, then the caller crashes: it never completes or releases (`I6`).
    Crash,
}

/// How a store command fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The command is applied but its reply is lost (a client timeout).
    ReplyLost,
    /// The store cannot be reached; nothing is applied.
    Unreachable,
}

/// One injected store failure: the `nth` (from zero) command named `command` of attempt
/// `attempt` fails as `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The caller's attempt number.
    pub attempt: u32,
    /// The command's name (`Command::name`): "reserve", "renew", "complete", "release".
    pub command: &'static str,
    /// Which send of that command, from zero.
    pub nth: u32,
    /// How it fails.
    pub kind: FaultKind,
}

/// What one caller does.
#[derive(Debug, Clone)]
pub struct CallerPlan {
    /// The key, an index into the scenario's keys.
    pub key: usize,
    /// The request: callers with the same number send the same fingerprint.
    pub request: u8,
    /// The options of every attempt (policy, lease, renewal, waiting, backoff, retries).
    pub options: Options,
    /// What the action does in each attempt; the last entry repeats.
    pub actions: Vec<Action>,
    /// How many timer wake-ups the action spans: with two or more the holder renews.
    pub action_wakeups: u32,
    /// How far the caller's clock is ahead of the store's (negative: behind), in ms, beyond
    /// the callers' common epoch; within ±[`CALLER_EPOCH_MS`].
    pub skew_ms: i64,
    /// Injected store failures.
    pub faults: Vec<Fault>,
    /// How many attempts the client makes: it retries after `InProgress`, a failed action,
    /// or an unreachable store.
    pub attempts: u32,
}

impl CallerPlan {
    /// A caller of `request` on `key` whose action succeeds once, with no faults.
    pub fn new(key: usize, request: u8, options: Options) -> Self {
        Self {
            key,
            request,
            options,
            actions: vec![Action::Succeed],
            action_wakeups: 0,
            skew_ms: 0,
            faults: Vec::new(),
            attempts: 1,
        }
    }

    /// The request's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of_bytes(&[b'r', self.request])
    }

    fn action(&self, attempt: u32) -> Action {
        let index = usize::try_from(attempt).unwrap_or(usize::MAX);
        self.actions
            .get(index)
            .or(self.actions.last())
            .copied()
            .unwrap_or(Action::Succeed)
    }

    fn delivery(&self, attempt: u32, command: &str, nth: u32) -> Delivery {
        let fault = self
            .faults
            .iter()
            .find(|f| f.attempt == attempt && f.command == command && f.nth == nth);
        match fault.map(|f| f.kind) {
            None => Delivery::Normal,
            Some(FaultKind::ReplyLost) => Delivery::ReplyLost,
            Some(FaultKind::Unreachable) => Delivery::Unreachable,
        }
    }

    /// The caller's clock when the store's reads `store`: its own epoch
    /// ([`CALLER_EPOCH_MS`] after the store's), plus its skew. The two clocks are never
    /// mixed (MODEL.md, "Time"), so a wrong mix shows up as a violation.
    fn caller_clock(&self, store: u64) -> u64 {
        store
            .saturating_add(CALLER_EPOCH_MS)
            .saturating_add_signed(self.skew_ms)
    }

    /// The store's clock when the caller's reads `caller`.
    fn store_clock(&self, caller: u64) -> u64 {
        caller
            .saturating_sub(CALLER_EPOCH_MS)
            .saturating_add_signed(self.skew_ms.saturating_neg())
    }
}

/// The state every caller of a run shares.
#[derive(Debug)]
pub struct Shared<P: Platform> {
    /// The checker's lock around the world.
    pub world: P::Lock,
    /// The store's logical clock.
    pub clock: P::Clock,
}

/// Whether the client goes on with another attempt.
enum Next {
    Retry,
    Stop,
}

/// Runs one caller to its end: its attempts, one after another.
pub fn run_caller<P: Platform>(shared: &Shared<P>, caller: usize, plan: &CallerPlan, naive: bool) {
    for attempt in 0..plan.attempts.max(1) {
        let who = AttemptId { caller, attempt };
        let next = if naive {
            run_naive(shared, who, plan)
        } else {
            run_attempt(shared, who, plan)
        };
        if matches!(next, Next::Stop) {
            return;
        }
    }
}

fn key_and_operation(plan: &CallerPlan) -> Option<(Operation, Key)> {
    let operation = Operation::new("payment.charge").ok()?;
    let key = Key::new(format!("order-{}", plan.key)).ok()?;
    Some((operation, key))
}

/// An action that has started and not yet been fed back.
struct Running {
    wakeups_left: u32,
    result: ActionResult,
}

fn run_attempt<P: Platform>(shared: &Shared<P>, who: AttemptId, plan: &CallerPlan) -> Next {
    let key = plan.key;
    let fingerprint = plan.fingerprint();
    let note = |at: u64, kind: EventKind| {
        P::with(&shared.world, |w| w.note(who, key, fingerprint, at, kind));
    };
    let mut store_time = P::now(&shared.clock);
    let Some((operation, idem_key)) = key_and_operation(plan) else {
        note(
            store_time,
            EventKind::Protocol("invalid key or operation".into()),
        );
        return Next::Stop;
    };
    let caller_now = |store: u64| Timestamp::from_millis(plan.caller_clock(store));
    let mut attempt = Attempt::new(
        operation,
        idem_key,
        fingerprint,
        who.owner(),
        u64::from(who.attempt) << 16 | who.caller as u64,
        plan.options.clone(),
        caller_now(store_time),
    );
    let mut sent: Vec<(&'static str, u32)> = Vec::new();
    let mut running: Option<Running> = None;
    // The latest store time at which the machine said its lease was held, not yet written
    // down: it goes into the history with the caller's next locked step, so checking it
    // adds no step of its own to the schedules.
    let mut believed: Option<u64> = None;
    let belief = |w: &mut crate::world::World, held_at: Option<u64>| {
        if let Some(held_at) = held_at {
            // Stamped with the time it speaks of: reading the clock here would add a step.
            let kind = EventKind::BelievedHeld { held_at };
            w.note(who, key, fingerprint, held_at, kind);
        }
    };
    for _ in 0..MAX_STEPS {
        if let Some(action) = running.take_if(|r| r.wakeups_left == 0)
            && let Err(error) = attempt.handle_action_result(action.result, caller_now(store_time))
        {
            note(store_time, EventKind::Protocol(error.to_string()));
            return Next::Stop;
        }
        let step = attempt.poll(caller_now(store_time));
        if attempt.lease(caller_now(store_time)) == LeaseState::Held {
            believed = Some(store_time);
        }
        match step {
            Step::Send { command, .. } => {
                let name = command.name();
                // How many of this command were sent before this one.
                let nth = match sent.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, count)) => {
                        *count += 1;
                        *count - 1
                    }
                    None => {
                        sent.push((name, 1));
                        0
                    }
                };
                let delivery = plan.delivery(who.attempt, name, nth);
                let held_at = believed.take();
                let (reply, at) = P::with(&shared.world, |w| {
                    belief(w, held_at);
                    let at = P::now(&shared.clock);
                    let reply = w.store(who, key, fingerprint, command, at, plan.skew_ms, delivery);
                    (reply, at)
                });
                store_time = at;
                let fed = match (delivery, reply) {
                    (Delivery::Normal, Some(reply)) => attempt.handle_reply(reply, caller_now(at)),
                    _ => attempt.handle_store_error(caller_now(at)),
                };
                if let Err(error) = fed {
                    note(store_time, EventKind::Protocol(error.to_string()));
                    return Next::Stop;
                }
            }
            Step::Run => {
                let action = plan.action(who.attempt);
                let held_at = believed.take();
                let (result, at) = P::with(&shared.world, |w| {
                    belief(w, held_at);
                    let at = P::now(&shared.clock);
                    let result = match action {
                        Action::Succeed | Action::Crash => {
                            ActionResult::Succeeded(Body::new(w.charge(who, key, fingerprint, at)))
                        }
                        Action::Fail => {
                            w.note(who, key, fingerprint, at, EventKind::Declined);
                            ActionResult::Failed
                        }
                    };
                    if action == Action::Crash {
                        w.note(who, key, fingerprint, at, EventKind::Crashed);
                    }
                    (result, at)
                });
                if action == Action::Crash {
                    return Next::Stop;
                }
                store_time = at;
                running = Some(Running {
                    wakeups_left: plan.action_wakeups,
                    result,
                });
            }
            Step::Wait { until: Some(until) } => {
                store_time = P::advance_to(&shared.clock, plan.store_clock(until.as_millis()));
                if let Some(action) = running.as_mut() {
                    action.wakeups_left = action.wakeups_left.saturating_sub(1);
                }
            }
            Step::Wait { until: None } => match running.as_mut() {
                // Nothing to renew (the lease is lost, or the action runs unprotected): the
                // action simply finishes.
                Some(action) => action.wakeups_left = 0,
                None => {
                    note(
                        store_time,
                        EventKind::Stuck("the machine waits for nothing".into()),
                    );
                    return Next::Stop;
                }
            },
            Step::Done(outcome) => {
                let next = match outcome {
                    Outcome::InProgress
                    | Outcome::ActionFailed { .. }
                    | Outcome::StoreUnavailable => Next::Retry,
                    _ => Next::Stop,
                };
                let held_at = believed.take();
                P::with(&shared.world, |w| {
                    belief(w, held_at);
                    let at = P::now(&shared.clock);
                    w.finish(who, key, fingerprint, at, outcome);
                });
                return next;
            }
        }
    }
    note(
        store_time,
        EventKind::Stuck(format!("no outcome after {MAX_STEPS} polls")),
    );
    Next::Stop
}

/// The naive protocol of a result cache: read the key; if a result is there, return it;
/// otherwise run the action and store its result. No reservation is ever held while the
/// action runs, which is the whole bug.
fn run_naive<P: Platform>(shared: &Shared<P>, who: AttemptId, plan: &CallerPlan) -> Next {
    let key = plan.key;
    let fingerprint = plan.fingerprint();
    let owner = who.owner();
    let options = &plan.options;
    let found = P::with(&shared.world, |w| {
        let at = P::now(&shared.clock);
        let reply = w.store(
            who,
            key,
            fingerprint,
            idem_core::Command::Read,
            at,
            plan.skew_ms,
            Delivery::Normal,
        );
        match reply {
            Some(Reply::Read(Some(idem_core::Record::Completed {
                fingerprint: stored,
                result,
                ..
            }))) => Some(if stored == fingerprint {
                Outcome::Replayed { result }
            } else {
                Outcome::KeyReuse {
                    stored,
                    given: fingerprint,
                }
            }),
            _ => None,
        }
    });
    P::with(&shared.world, |w| {
        let at = P::now(&shared.clock);
        let outcome = match found {
            Some(outcome) => outcome,
            None => {
                let body = Body::new(w.charge(who, key, fingerprint, at));
                // Store the result: put it under the key, in one step.
                let reserve = idem_core::Command::Reserve {
                    owner,
                    fingerprint,
                    lease: options.lease(),
                };
                let complete = idem_core::Command::Complete {
                    owner,
                    fingerprint,
                    result: idem_core::StoredResult::Value(body),
                    retention: options.retention(),
                };
                for command in [reserve, complete] {
                    let _ = w.store(
                        who,
                        key,
                        fingerprint,
                        command,
                        at,
                        plan.skew_ms,
                        Delivery::Normal,
                    );
                }
                Outcome::Executed(Execution {
                    protection: Protection::Reserved,
                    record: Recording::Stored,
                    lease_lost: false,
                })
            }
        };
        w.finish(who, key, fingerprint, at, outcome);
    });
    Next::Stop
}
