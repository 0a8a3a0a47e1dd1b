//! One call: the attempt machine pumped with real time, a real store and the caller's
//! action.
//!
//! The call owns no decisions. It loops on [`Attempt::poll`] at the caller's clock: it sends
//! the commands the attempt asks for to the [`Store`] and feeds back the replies, gives a
//! command up when the attempt says its reply deadline passed, runs the action when told to,
//! keeps polling for renewals while the action runs (waiting on the action, the outstanding
//! command, a change notice and a timer together), and turns the attempt's outcome into the
//! typed result.
//!
//! Here is the loop, and how a store's answer is fed back; `action` starts the action with
//! its claim, takes what it returned or how it panicked (rule 11), and keeps its claim's
//! lease view; `outcome` turns the attempt's outcome into the typed result, a replay
//! decoded.

mod action;
mod cache;
mod outcome;

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;

use futures::FutureExt;
use futures::future::{Either, Fuse, FusedFuture};
use idem_core::record::{CommandKind, Reply, StoredResult};
use idem_core::{Key, Operation, ProtocolError, Step, Timestamp};

use crate::answer::Answer;
use crate::claim::{Claim, LeasePublisher};
use crate::clock::{self, Clock};
use crate::codec::Codec;
use crate::ending::Ending;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::replay_cache::ReplayCache;
use crate::settle::AttemptGuard;
use crate::store::{Store, StoreError};
use crate::transaction::TransactionSlot;
use crate::watching::Watching;

/// How a call ended: with an answer for the caller, or with the action's panic to resume in
/// the caller once the attempt recorded it.
pub(crate) enum Ended<T, E> {
    Answer(Result<Answer<T>, Error<E>>),
    Panic(Box<dyn Any + Send>),
}

/// Where [`Call::until_run`] stopped.
pub(crate) enum Paused<T, E> {
    /// The call ended without running the action.
    Ended(Ended<T, E>),
    /// The attempt handed out its action, which is to be started next.
    AtRun,
}

/// The action's future, caught for panics, and fused so that it is polled only until done.
/// Boxed: an action's future (an HTTP handler's, say) can be kilobytes, and the call's own
/// future, which would otherwise hold it inline, is moved whole into its task.
type ActionFuture<Fut> = Fuse<futures::future::CatchUnwind<AssertUnwindSafe<Pin<Box<Fut>>>>>;

/// What woke a waiting call.
enum Woke<A> {
    /// The outstanding command's answer.
    Answer(Result<Reply, StoreError>),
    /// The action ended: its output, or its panic.
    Action(A),
    /// The key's record changed (a waiter's notice).
    Notice,
    /// The attempt's timer.
    Timer,
}

impl<T, E> From<Error<E>> for Ended<T, E> {
    fn from(error: Error<E>) -> Self {
        Ended::Answer(Err(error))
    }
}

/// The state of one call while its attempt runs.
pub(crate) struct Call<S: Store, C, T, E> {
    store: Arc<S>,
    codec: C,
    metrics: Arc<Metrics>,
    clock: Clock,
    operation: Operation,
    key: Key,
    guard: AttemptGuard<S>,
    /// The action's value, once it succeeded.
    value: Option<T>,
    /// The action's error, once it failed.
    failure: Option<E>,
    /// The action's error, once it failed with its effect unknown (recorded as a panic is).
    unknown: Option<E>,
    /// The action's panic, resumed once the attempt has recorded it.
    panic: Option<Box<dyn Any + Send>>,
    /// The last store failure, for `StoreUnavailable`.
    store_error: Option<StoreError>,
    /// What the store said of a corrupt record.
    corrupt: Option<String>,
    /// Tells the action's claim about its lease while the action runs.
    lease: Option<LeasePublisher>,
    /// A transactional action's open transaction, which takes the attempt's complete.
    transaction: Option<TransactionSlot>,
    /// Whether the attempt waited for another holder of the key.
    waited: bool,
    /// The coordinator's replay cache, if it has one.
    cache: Option<Arc<ReplayCache>>,
    /// When the last reserve was sent, for a replay's remaining time.
    reserve_sent: Timestamp,
    /// When the first complete was sent, and what it records.
    completing: Option<(Timestamp, StoredResult)>,
}

impl<S: Store, C: Codec<T>, T, E> Call<S, C, T, E> {
    pub(crate) fn new(
        guard: AttemptGuard<S>,
        store: Arc<S>,
        codec: C,
        metrics: Arc<Metrics>,
        clock: Clock,
        cache: Option<Arc<ReplayCache>>,
    ) -> Self {
        let (operation, key) = (
            guard.attempt.operation().clone(),
            guard.attempt.key().clone(),
        );
        Self {
            store,
            codec,
            metrics,
            clock,
            operation,
            key,
            guard,
            value: None,
            failure: None,
            unknown: None,
            panic: None,
            store_error: None,
            corrupt: None,
            lease: None,
            transaction: None,
            waited: false,
            cache,
            reserve_sent: Timestamp::ZERO,
            completing: None,
        }
    }

    /// Gives back the grant of an action the attempt handed out but the driver will not
    /// start (no detached place is free): the action is fed to the attempt as failed before
    /// any effect, so the reservation is released (in the background, as the call is
    /// dropped). Nothing ran.
    pub(crate) fn decline_run(mut self) {
        let now = self.clock.now();
        self.guard.declined = true;
        if let Err(error) = self
            .guard
            .attempt
            .handle_action_result(idem_core::ActionResult::Failed, now)
        {
            tracing::error!(operation = %self.operation, key = %self.key, %error, "declining the action");
        }
    }

    /// The call's operation and key, for logs.
    pub(crate) fn names(&self) -> (Operation, Key) {
        (self.operation.clone(), self.key.clone())
    }

    /// Routes the attempt's complete into the transaction the action leaves in `slot`.
    pub(crate) fn in_transaction(mut self, slot: TransactionSlot) -> Self {
        self.transaction = Some(slot);
        self
    }

    /// Drives the call to its end, running `action` when the attempt says so.
    ///
    /// By reference, as [`finish`](Self::finish): a call taken by value would be held twice
    /// in the future (an async fn keeps its arguments apart from the locals it moves them
    /// to), several hundred bytes more in every call in flight.
    pub(crate) async fn drive<F, Fut>(&mut self, action: F) -> Ended<T, E>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output: Into<Ending<T, E>>>,
    {
        match self.pump(Some(action), false).await {
            Ok(Paused::Ended(ended)) => ended,
            Ok(Paused::AtRun) => Error::from(ProtocolError::ActionNotRunning).into(),
            Err(error) => error.into(),
        }
    }

    /// Drives the call until the attempt hands out its action (which is not started) or
    /// ends without it: a replay, a refusal or waiting need no task of their own.
    pub(crate) async fn until_run<F, Fut>(&mut self) -> Paused<T, E>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output: Into<Ending<T, E>>>,
    {
        match self.pump::<F, Fut>(None, false).await {
            Ok(paused) => paused,
            Err(error) => Paused::Ended(error.into()),
        }
    }

    /// Drives a call that [`until_run`](Self::until_run) paused at its action: starts
    /// `action` at once, then goes on to the end.
    pub(crate) async fn finish<F, Fut>(&mut self, action: F) -> Ended<T, E>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output: Into<Ending<T, E>>>,
    {
        match self.pump(Some(action), true).await {
            Ok(Paused::Ended(ended)) => ended,
            Ok(Paused::AtRun) => Error::from(ProtocolError::ActionNotRunning).into(),
            Err(error) => error.into(),
        }
    }

    /// The call's loop. With no `action`, it pauses where the attempt hands the action out;
    /// with `run_now`, the attempt has already handed it out and it starts at once.
    async fn pump<F, Fut>(
        &mut self,
        mut action: Option<F>,
        run_now: bool,
    ) -> Result<Paused<T, E>, Error<E>>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output: Into<Ending<T, E>>>,
    {
        let store = Arc::clone(&self.store);
        let (operation, key) = (self.operation.clone(), self.key.clone());
        let mut running = pin!(Fuse::terminated());
        let mut command = pin!(Fuse::terminated());
        let mut sent: Option<CommandKind> = None;
        let mut watching = Watching::default();
        let mut timer = pin!(None);
        // The clock is read once each time the call wakes, and that reading serves every step
        // taken before the next await: they are microseconds apart, and the attempt only
        // needs `now` not to run backwards.
        let mut now = self.clock.now();
        if run_now {
            let action = action.take().ok_or(ProtocolError::ActionNotRunning)?;
            self.start(action, now, running.as_mut())?;
        }
        loop {
            let step = self.guard.attempt.poll(now);
            if let Some(kind) = self.guard.attempt.take_given_up() {
                // Rule 12: the attempt gave the command up at its reply deadline (and may
                // have sent the next one in the same poll).
                command.set(Fuse::terminated());
                sent = None;
                self.metrics.store_error(kind);
                tracing::warn!(
                    operation = %self.operation,
                    key = %self.key,
                    command = %kind,
                    "no reply by the attempt's deadline; the command's effect is unknown"
                );
            }
            self.publish_lease(now);
            match step {
                Step::Done(outcome) => return Ok(Paused::Ended(self.conclude(outcome, now))),
                Step::Run => match action.take() {
                    Some(action) => self.start(action, now, running.as_mut())?,
                    None => return Ok(Paused::AtRun),
                },
                Step::Send {
                    command: next,
                    reply_by,
                } => {
                    if self.answered_from_cache(&next, now)? {
                        continue;
                    }
                    self.sending(&next, now);
                    sent = Some(next.kind());
                    if self.waited && next.kind() == CommandKind::Reserve {
                        watching.before_reserve(|| store.watch(&operation, &key));
                    }
                    let transaction = match (&next, &self.transaction) {
                        (idem_core::Command::Complete { .. }, Some(slot)) => {
                            slot.complete(operation.clone(), key.clone(), next.clone())
                        }
                        _ => None,
                    };
                    match transaction {
                        Some(completing) => command.set(Either::Right(completing).fuse()),
                        // The loop's timer gives the command up at `reply_by` (rule 12):
                        // the store's own backstop is not needed then.
                        None if self.clock.instant(reply_by).is_some() => command.set(
                            Either::Left(Either::Left(store.apply_bounded(&operation, &key, next)))
                                .fuse(),
                        ),
                        None => command.set(
                            Either::Left(Either::Right(store.apply(&operation, &key, next))).fuse(),
                        ),
                    }
                }
                Step::Wait { until } => {
                    // A waiter listens for the holder's end from the instant the attempt
                    // gives; the watch is registered now, before sleeping, so a change in
                    // between still wakes it (the store's contract for `changed`).
                    let notices = running
                        .is_terminated()
                        .then(|| self.guard.attempt.notices_from(now))
                        .flatten();
                    if until.is_none()
                        && notices.is_none()
                        && running.is_terminated()
                        && command.is_terminated()
                    {
                        // Nothing could ever move the attempt again; the machine never asks
                        // for this.
                        return Err(ProtocolError::ActionNotRunning.into());
                    }
                    self.waited |= notices.is_some();
                    let watch =
                        watching.for_wait(notices.is_some(), || store.changed(&operation, &key));
                    let clock = self.clock;
                    let notice = async move {
                        match (notices, watch) {
                            (Some(from), Some(changed)) => {
                                if from > now {
                                    clock.sleep_until(Some(from)).await;
                                }
                                changed.await;
                            }
                            _ => std::future::pending().await,
                        }
                    };
                    // An instant past what a tokio timer can hold is the end of time.
                    let deadline = until.and_then(|at| self.clock.instant(at));
                    let woke = tokio::select! {
                        biased;
                        answer = command.as_mut(), if !command.is_terminated() => {
                            Woke::Answer(answer)
                        }
                        result = running.as_mut(), if !running.is_terminated() => {
                            Woke::Action(result)
                        }
                        () = notice => Woke::Notice,
                        () = clock::fired(timer.as_mut(), deadline), if deadline.is_some() => {
                            Woke::Timer
                        }
                    };
                    now = self.clock.now();
                    match woke {
                        Woke::Answer(answer) => {
                            let kind = sent.take().ok_or(ProtocolError::NoCommandOutstanding)?;
                            self.answered(kind, answer, now)?;
                        }
                        Woke::Action(result) => self.action_finished(result, now)?,
                        Woke::Notice => {
                            if self.guard.attempt.handle_record_changed(now) {
                                tracing::trace!(
                                    operation = %self.operation,
                                    key = %self.key,
                                    "the holder's record changed; reserving again"
                                );
                            }
                        }
                        Woke::Timer => {}
                    }
                }
            }
        }
    }

    /// Feeds the store's answer to the attempt.
    fn answered(
        &mut self,
        command: CommandKind,
        answer: Result<Reply, StoreError>,
        now: Timestamp,
    ) -> Result<(), Error<E>> {
        match answer {
            Ok(reply) => {
                tracing::trace!(
                    operation = %self.operation,
                    key = %self.key,
                    %command,
                    ?reply,
                    "store replied"
                );
                self.store_replied(command, &reply, now);
                self.guard.attempt.handle_reply(reply, now)?;
            }
            Err(StoreError::Corrupt { detail, .. }) => {
                tracing::error!(
                    operation = %self.operation,
                    key = %self.key,
                    %command,
                    %detail,
                    "the key holds a value that is not a record; nothing is run or written"
                );
                self.corrupt = Some(detail);
                self.guard.attempt.handle_corrupt_record(now)?;
            }
            Err(error) => {
                self.metrics.store_error(command);
                tracing::warn!(
                    operation = %self.operation,
                    key = %self.key,
                    %command,
                    %error,
                    "store command failed"
                );
                self.store_error = Some(error);
                self.guard.attempt.handle_store_error(now)?;
            }
        }
        Ok(())
    }
}
