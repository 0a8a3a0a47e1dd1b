//! One client: it drives the real `idem_core::Attempt` exactly as a driver does (poll, send
//! the command, feed the reply, the failure or the corrupt answer, give a hung command up at
//! the attempt's own reply deadline, run the action, feed its result or its panic, abandon
//! the attempt when the caller goes away and pump its settlement, sleep until the machine's
//! wake-up), and retries with a fresh attempt after a client-visible failure.
//!
//! Time: the run has one logical clock, the store's. A caller's own clock is the store's
//! plus its skew; when the machine asks to sleep until an instant of the caller's clock, the
//! caller moves the shared clock forward to it (a sleeping caller is where time passes), and
//! the model checker decides who else runs first, so a lease can run out anywhere.

use idem_check::{ActionEnd, Answer, EventKind, Variant};
use idem_core::record::{CommandKind, Reply};
use idem_core::{
    Abandonment, ActionResult, Attempt, Body, Command, Fingerprint, Key, LeaseState, Operation,
    Options, Outcome, Step, Timestamp,
};

use crate::platform::Platform;
use crate::world::{AttemptId, Delivery, World};

/// The operation every key of the model is scoped to.
pub const OPERATION: &str = "payment.charge";

/// The name of key `key` of a scenario.
pub fn key_name(key: usize) -> String {
    format!("order-{key}")
}

/// How far every caller's clock is ahead of the store's before its skew: callers count
/// from an epoch of their own, and skews stay well inside it, so no clock saturates.
pub const CALLER_EPOCH_MS: u64 = 10_000;

/// The most polls one attempt may take before the run calls it stuck.
pub const MAX_STEPS: usize = 400;

/// What happens in one attempt of a caller once it has the key (or, for
/// [`Action::AbandonMidReserve`], before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Charges the card and succeeds with the provider's answer.
    Succeed,
    /// Is declined: no effect, and the attempt reports a failure (`I5`).
    Fail,
    /// Charges the card, then the caller crashes: it never completes or releases (`I6`).
    Crash,
    /// Charges the card, then panics: the driver feeds `ActionResult::Panicked`, and the key
    /// is completed as "outcome unknown" (rule 11).
    PanicAfterCharge,
    /// Panics before charging: no effect, but the driver cannot tell, so it is fed as
    /// `ActionResult::Panicked` all the same.
    PanicBeforeCharge,
    /// Charges the card; then, when the action would have ended, the caller goes away
    /// (attached mode): the driver abandons the attempt and pumps its settlement, which
    /// leaves the key to its lease. The client then retries.
    AbandonAfterCharge,
    /// As [`Action::AbandonAfterCharge`], but the action is dropped before it charged.
    AbandonBeforeCharge,
    /// The caller goes away while its first reserve is out: the reserve reaches the store
    /// as the faults say, its reply is dropped, and the driver abandons the attempt and
    /// pumps its settlement (a release). The action never runs. The client then retries.
    AbandonMidReserve,
}

/// How a store command fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The command is applied but its reply is lost: the caller sees a store error at once
    /// and feeds it to `handle_store_error`.
    ReplyLost,
    /// The store cannot be reached; nothing is applied.
    Unreachable,
    /// The store never answers: the caller waits until the command's `reply_by` and the
    /// attempt gives the command up itself. When `applied`, the command lands at the moment
    /// the caller stops waiting.
    Hung {
        /// Whether the command is applied.
        applied: bool,
    },
}

/// One injected store failure: the `nth` (from zero) command of kind `command` of attempt
/// `attempt` fails as `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The caller's attempt number.
    pub attempt: u32,
    /// Which command.
    pub command: CommandKind,
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
    /// an unreachable store, or a call it went away from.
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

    fn delivery(&self, attempt: u32, command: CommandKind, nth: u32) -> Delivery {
        let fault = self
            .faults
            .iter()
            .find(|f| f.attempt == attempt && f.command == command && f.nth == nth);
        match fault.map(|f| f.kind) {
            None => Delivery::Normal,
            Some(FaultKind::ReplyLost) => Delivery::ReplyLost,
            Some(FaultKind::Unreachable) => Delivery::Unreachable,
            Some(FaultKind::Hung { applied }) => Delivery::Hung { applied },
        }
    }

    /// The caller's clock when the store's reads `store`: its own epoch
    /// ([`CALLER_EPOCH_MS`] after the store's), plus its skew. The two clocks are never
    /// mixed (MODEL.md, "Time"), so a wrong mix shows up as a violation.
    pub fn caller_clock(&self, store: u64) -> u64 {
        store
            .saturating_add(CALLER_EPOCH_MS)
            .saturating_add_signed(self.skew_ms)
    }

    /// The store's clock when the caller's reads `caller`.
    pub fn store_clock(&self, caller: u64) -> u64 {
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

/// Runs one caller to its end: its attempts, one after another, as `variant`'s driver.
pub fn run_caller<P: Platform>(
    shared: &Shared<P>,
    caller: usize,
    plan: &CallerPlan,
    variant: Variant,
) {
    for attempt in 0..plan.attempts.max(1) {
        let who = AttemptId { caller, attempt };
        let next = Driver {
            shared,
            who,
            plan,
            variant,
            store_time: P::now(&shared.clock),
            believed: None,
            notes: Vec::new(),
        }
        .run();
        if matches!(next, Next::Stop) {
            return;
        }
    }
}

fn key_and_operation(plan: &CallerPlan) -> Option<(Operation, Key)> {
    let operation = Operation::new(OPERATION).ok()?;
    let key = Key::new(key_name(plan.key)).ok()?;
    Some((operation, key))
}

/// How a running action ends once its wake-ups are spent.
#[derive(Debug, Clone)]
pub(crate) enum End {
    /// It returns this result.
    Result(ActionResult),
    /// Its caller goes away first: the driver abandons the attempt.
    Abandon,
}

/// An action that has started and not yet ended.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    pub(crate) wakeups_left: u32,
    pub(crate) end: End,
}

/// How an action that returns `result` ended, whatever the driver then feeds.
pub(crate) fn action_end(result: &ActionResult) -> ActionEnd {
    match result {
        ActionResult::Succeeded(_) => ActionEnd::Succeeded,
        ActionResult::Unrecordable => ActionEnd::Unrecordable,
        ActionResult::Panicked => ActionEnd::Panicked,
        _ => ActionEnd::Failed,
    }
}

/// A command the store does not answer: the caller waits for the attempt to give it up.
#[derive(Debug, Clone)]
pub(crate) struct Hung {
    pub(crate) command: Command,
    pub(crate) applied: bool,
    pub(crate) reply_by: Timestamp,
}

/// Feeds `attempt`, at `now` on its clock, what came back for its command as `variant`'s
/// driver does: the reply, "corrupt" (or, for a driver that takes it for unavailability, a
/// failure), or a failure. A read after a lost commit reply is fed as the variant reads it.
pub(crate) fn feed(
    attempt: &mut Attempt,
    variant: Variant,
    delivery: Delivery,
    answer: Answer,
    now: Timestamp,
) -> Result<(), String> {
    let fed = match (delivery, answer) {
        (Delivery::Normal, Answer::Reply(Reply::Read(read))) => {
            // Only a transactional attempt reads, to learn whether its commit landed.
            let (owner, fingerprint) = (attempt.owner(), attempt.fingerprint());
            let read = variant.fed_commit_read(read, owner, fingerprint, now);
            attempt.handle_reply(Reply::Read(read), now)
        }
        (Delivery::Normal, Answer::Reply(reply)) => attempt.handle_reply(reply, now),
        (Delivery::Normal, Answer::Corrupt) if !variant.feeds_corrupt_as_store_error() => {
            attempt.handle_corrupt_record(now)
        }
        _ => attempt.handle_store_error(now),
    };
    fed.map_err(|error| error.to_string())
}

/// Hands `action` of `who` out at `now` (store's clock): writes the run down, charges the card
/// (or, for a transactional action, makes its uncommitted writes) as the action does, and
/// says how the action will end; `None` for a caller that crashed after its charge.
pub(crate) fn start_action(
    world: &mut World,
    who: AttemptId,
    action: Action,
    unprotected: bool,
    transactional: bool,
    now: u64,
) -> Option<End> {
    world.note(who, now, EventKind::Run { unprotected });
    let charge = |world: &mut World| {
        if transactional {
            Body::new(world.wrote(who, now))
        } else {
            Body::new(world.charge(who, now))
        }
    };
    match action {
        Action::Succeed | Action::AbandonMidReserve => {
            Some(End::Result(ActionResult::Succeeded(charge(world))))
        }
        Action::Fail => Some(End::Result(ActionResult::Failed)),
        Action::Crash => {
            charge(world);
            world.note(who, now, EventKind::Crashed);
            None
        }
        Action::PanicAfterCharge => {
            charge(world);
            Some(End::Result(ActionResult::Panicked))
        }
        Action::PanicBeforeCharge => Some(End::Result(ActionResult::Panicked)),
        Action::AbandonAfterCharge => {
            charge(world);
            Some(End::Abandon)
        }
        Action::AbandonBeforeCharge => Some(End::Abandon),
    }
}

/// One attempt's driver: what `idem`'s driver does with an `Attempt`, with the world as
/// its store and its action.
struct Driver<'a, P: Platform> {
    shared: &'a Shared<P>,
    who: AttemptId,
    plan: &'a CallerPlan,
    variant: Variant,
    /// The store's clock as this caller last saw it.
    store_time: u64,
    /// The latest store time at which the machine said its lease was held, and the end it
    /// counted then (store's clock), not yet written down: it goes into the history with
    /// the caller's next locked step, so checking it adds no step of its own to the
    /// schedules.
    believed: Option<(u64, u64)>,
    /// Events of this caller's own (an abandonment) not yet written down, likewise.
    notes: Vec<EventKind>,
}

impl<P: Platform> Driver<'_, P> {
    fn caller_now(&self, store: u64) -> Timestamp {
        Timestamp::from_millis(self.plan.caller_clock(store))
    }

    /// One step under the checker's lock, with the store's clock read inside it: first the
    /// notes held back, then `f`, given the store time of the step.
    fn locked<R>(&mut self, f: impl FnOnce(&mut World, u64) -> R) -> R {
        let who = self.who;
        let believed = self.believed.take();
        let notes = std::mem::take(&mut self.notes);
        let clock = &self.shared.clock;
        let (result, at) = P::with(&self.shared.world, |w| {
            if let Some((held_at, until)) = believed {
                // Stamped with the time it speaks of: reading the clock here would add a step.
                w.note(who, held_at, EventKind::LeaseView { until });
            }
            let at = P::now(clock);
            for kind in notes {
                w.note(who, at, kind);
            }
            (f(w, at), at)
        });
        self.store_time = at;
        result
    }

    fn note(&mut self, kind: EventKind) {
        let who = self.who;
        self.locked(|w, at| w.note(who, at, kind));
    }

    /// Sends `command` to the world's store at the store's clock, as `delivery` says;
    /// `taken` when the driver takes what comes back (not when the call was dropped).
    fn store(&mut self, command: Command, delivery: Delivery, taken: bool) -> Answer {
        let (who, key, skew) = (self.who, self.plan.key, self.plan.skew_ms);
        self.locked(|w, at| {
            let sender_now = at.saturating_add_signed(skew);
            w.store(who, key, command, at, sender_now, delivery, taken)
        })
    }

    /// The caller goes away: the driver abandons the attempt, and from then on pumps only
    /// its settlement.
    fn abandon(&mut self, attempt: &mut Attempt) {
        attempt.abandon(self.caller_now(self.store_time));
        self.notes.push(EventKind::Abandoned);
    }

    /// Feeds the answer to a command that came back (at once: answered, lost or
    /// unreachable) as the driver does.
    fn feed(
        &self,
        attempt: &mut Attempt,
        delivery: Delivery,
        answer: Answer,
    ) -> Result<(), String> {
        let now = self.caller_now(self.store_time);
        feed(attempt, self.variant, delivery, answer, now)
    }

    fn run(mut self) -> Next {
        let Some((operation, idem_key)) = key_and_operation(self.plan) else {
            self.note(EventKind::Protocol("invalid key or operation".into()));
            return Next::Stop;
        };
        let action = self.plan.action(self.who.attempt);
        let mut attempt = Attempt::new(
            operation,
            idem_key,
            self.plan.fingerprint(),
            self.who.owner(),
            u64::from(self.who.attempt) << 16 | self.who.caller as u64,
            self.plan.options.clone(),
            self.caller_now(self.store_time),
        );
        let mut sent: Vec<(CommandKind, u32)> = Vec::new();
        let mut running: Option<Running> = None;
        let mut hung: Option<Hung> = None;
        for _ in 0..MAX_STEPS {
            if let Some(ended) = running.take_if(|r| r.wakeups_left == 0) {
                let now = self.caller_now(self.store_time);
                match ended.end {
                    End::Result(result) => {
                        self.notes.push(EventKind::ActionEnded(action_end(&result)));
                        let result = match result {
                            ActionResult::Panicked if self.variant.feeds_panic_as_failure() => {
                                ActionResult::Failed
                            }
                            other => other,
                        };
                        if let Err(error) = attempt.handle_action_result(result, now) {
                            self.note(EventKind::Protocol(error.to_string()));
                            return Next::Stop;
                        }
                    }
                    End::Abandon => {
                        self.abandon(&mut attempt);
                        // A command left hanging is dropped with the call: it lands now or
                        // never.
                        if let Some(Hung {
                            command, applied, ..
                        }) = hung.take()
                        {
                            self.store(command, Delivery::Hung { applied }, false);
                        }
                        if self.variant.releases_on_abandon()
                            && attempt.outcome()
                                == Some(&Outcome::Abandoned(Abandonment::ActionDropped))
                        {
                            let release = Command::Release {
                                owner: self.who.owner(),
                            };
                            self.store(release, Delivery::Normal, false);
                        }
                    }
                }
            }
            let now = self.caller_now(self.store_time);
            let step = attempt.poll(now);
            if attempt.lease(now) == LeaseState::Held
                && let Some(until) = attempt.lease_confirmed_until()
            {
                let until = self.plan.store_clock(until.as_millis());
                self.believed = Some((self.store_time, until));
            }
            // While a command is out, the machine only ever asks to wait; anything else (or
            // no command awaited any more) means it gave the hung command up.
            let given_up = !attempt.awaiting_reply() || !matches!(step, Step::Wait { .. });
            if let Some(Hung {
                command, applied, ..
            }) = hung.take_if(|_| given_up)
            {
                // The attempt gave the command up at its reply deadline: the store gets it
                // now, or never.
                self.store(command, Delivery::Hung { applied }, true);
            } else if hung.as_ref().is_some_and(|h| now >= h.reply_by) {
                self.note(EventKind::Protocol(
                    "the attempt still awaits a reply past its own reply deadline".into(),
                ));
                return Next::Stop;
            }
            match step {
                Step::Send { command, reply_by } => {
                    let kind = command.kind();
                    // How many of this command were sent before this one.
                    let nth = match sent.iter_mut().find(|(k, _)| *k == kind) {
                        Some((_, count)) => {
                            *count += 1;
                            *count - 1
                        }
                        None => {
                            sent.push((kind, 1));
                            0
                        }
                    };
                    let delivery = self.plan.delivery(self.who.attempt, kind, nth);
                    let goes_away = action == Action::AbandonMidReserve
                        && kind == CommandKind::Reserve
                        && nth == 0
                        && !attempt.is_abandoned();
                    if let (Delivery::Hung { applied }, false) = (delivery, goes_away) {
                        hung = Some(Hung {
                            command,
                            applied,
                            reply_by,
                        });
                        continue;
                    }
                    let answer = self.store(command, delivery, !goes_away);
                    if goes_away {
                        // The reply (if any) is dropped with the call.
                        self.abandon(&mut attempt);
                        continue;
                    }
                    if let Err(error) = self.feed(&mut attempt, delivery, answer) {
                        self.note(EventKind::Protocol(error));
                        return Next::Stop;
                    }
                }
                Step::Run if attempt.is_abandoned() => {
                    self.note(EventKind::Protocol(
                        "an abandoned attempt handed out Run".into(),
                    ));
                    return Next::Stop;
                }
                Step::Run => {
                    let who = self.who;
                    let unprotected = attempt.lease(now) == LeaseState::Unprotected;
                    let end =
                        self.locked(|w, at| start_action(w, who, action, unprotected, false, at));
                    // A crashed caller never completes or releases.
                    let Some(end) = end else {
                        return Next::Stop;
                    };
                    running = Some(Running {
                        wakeups_left: self.plan.action_wakeups,
                        end,
                    });
                }
                Step::Wait { until: Some(until) } => {
                    self.store_time =
                        P::advance_to(&self.shared.clock, self.plan.store_clock(until.as_millis()));
                    if let Some(action) = running.as_mut() {
                        action.wakeups_left = action.wakeups_left.saturating_sub(1);
                    }
                }
                Step::Wait { until: None } => match running.as_mut() {
                    // Nothing to renew (the lease is lost, or the action runs unprotected):
                    // the action simply finishes.
                    Some(action) => action.wakeups_left = 0,
                    None => {
                        self.note(EventKind::Stuck("the machine waits for nothing".into()));
                        return Next::Stop;
                    }
                },
                Step::Done(outcome) if attempt.is_abandoned() => {
                    // Nobody waits for a settlement's outcome; the client tries again.
                    self.note(EventKind::Settled(outcome));
                    return Next::Retry;
                }
                Step::Done(Outcome::StoreUnavailable) => {
                    // As the driver does after a fail-closed refusal: answer the caller,
                    // then settle what the failed reserves may have left, then retry.
                    self.note(EventKind::Finished(Outcome::StoreUnavailable));
                    self.abandon(&mut attempt);
                }
                Step::Done(outcome) => {
                    let next = match outcome {
                        Outcome::InProgress | Outcome::ActionFailed { .. } => Next::Retry,
                        _ => Next::Stop,
                    };
                    self.note(EventKind::Finished(outcome));
                    return next;
                }
            }
        }
        self.note(EventKind::Stuck(format!(
            "no outcome after {MAX_STEPS} polls"
        )));
        Next::Stop
    }
}
