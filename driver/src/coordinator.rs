//! `Coordinator`: runs actions under idempotency keys by driving the attempt machine.
//!
//! The coordinator owns no decisions. For each call it builds an [`Attempt`] and loops on
//! [`Attempt::poll`] at the caller's clock: it sends the commands the attempt asks for to the
//! [`Store`] and feeds back the replies, runs the action when told to, keeps polling for
//! renewals while the action runs (waiting on the action, the outstanding command and a
//! timer together), and turns the attempt's outcome into the typed result.
//!
//! The caller's clock is [`tokio::time::Instant`] counted from the coordinator's creation,
//! so tests with paused time control it.

use std::any::Any;
use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{Fuse, FusedFuture};
use idem_core::record::{Body, Reply};
use idem_core::{
    ActionResult, Attempt, Execution, Fingerprint, Key, LeaseState, Operation, Options,
    OptionsBuilder, OptionsError, Protection, ProtocolError, Step,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::claim::{Claim, LeaseStatus};
use crate::entropy::Entropy;
use crate::error::Error;
use crate::guard::AttemptGuard;
use crate::memory::millis;
use crate::metrics::{Counter, Metrics, MetricsSnapshot};
use crate::outcome::{Outcome, Provenance};
use crate::store::{Store, StoreError};

/// Runs actions under idempotency keys, with one [`Store`] and one set of [`Options`].
///
/// Cloning is cheap and clones share the store, the clock and the counters.
#[derive(Debug)]
pub struct Coordinator<S> {
    store: Arc<S>,
    options: Options,
    metrics: Arc<Metrics>,
    entropy: Arc<Entropy>,
    epoch: Instant,
}

impl<S> Clone for Coordinator<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            options: self.options.clone(),
            metrics: Arc::clone(&self.metrics),
            entropy: Arc::clone(&self.entropy),
            epoch: self.epoch,
        }
    }
}

/// The action's future, caught for panics, and fused so that it is polled only until done.
type Running<Fut> = Fuse<futures::future::CatchUnwind<AssertUnwindSafe<Fut>>>;

impl<S: Store> Coordinator<S> {
    /// A coordinator over `store` with validated `options`.
    pub fn new(store: S, options: Options) -> Self {
        Self::from_shared(Arc::new(store), options)
    }

    /// A coordinator over a store shared with others (several coordinators with different
    /// options, or a test that inspects the store).
    pub fn from_shared(store: Arc<S>, options: Options) -> Self {
        Self {
            store,
            options,
            metrics: Arc::default(),
            entropy: Arc::new(Entropy::Os),
            epoch: Instant::now(),
        }
    }

    /// A coordinator over `store` with the options `builder` describes, or the first option
    /// rule they break.
    pub fn build(store: S, builder: OptionsBuilder) -> Result<Self, OptionsError> {
        Ok(Self::new(store, builder.build()?))
    }

    /// Draws owner tokens and backoff jitter from a fixed sequence for `seed` instead of the
    /// operating system, so that a test runs the same way every time. Such tokens are
    /// predictable: never use this in production.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.entropy = Arc::new(Entropy::Seeded(seed.into()));
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The options every call runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The counters so far, shared by all clones of this coordinator.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Runs `action` once for the request that `fingerprint` describes under `key`, scoped to
    /// `operation`, and returns its value; or, if an identical request already ran, returns
    /// that request's stored value without running `action`.
    ///
    /// The action receives a [`Claim`] with the key and the owner token. Its `Ok` value is
    /// stored as JSON and returned identically to every replay (`I8`); its `Err` releases the
    /// reservation, so a retry runs it again (`I5`), and comes back as
    /// [`Error::Action`]. If `action` panics, the reservation is released and the panic
    /// resumes in the caller. See [`Error`] for every refusal and its HTTP status.
    pub async fn execute<T, E, F, Fut>(
        &self,
        operation: impl AsRef<str>,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<T, Error<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.execute_with_provenance(operation, key, fingerprint, action)
            .await
            .map(|outcome| outcome.value)
    }

    /// As [`execute`](Self::execute), and says where the value came from: executed in this
    /// call (and whether its lease lapsed), replayed, or executed unprotected because the
    /// store failed open.
    pub async fn execute_with_provenance<T, E, F, Fut>(
        &self,
        operation: impl AsRef<str>,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Outcome<T>, Error<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let (operation, key) = self.validate(operation.as_ref(), key.as_ref())?;
        let attempt = Attempt::new(
            operation.clone(),
            key.clone(),
            fingerprint,
            self.entropy.owner_token(),
            self.entropy.next_u64(),
            self.options.clone(),
            self.now(),
        );
        let mut call = Call {
            coordinator: self,
            operation: &operation,
            key: &key,
            guard: AttemptGuard::new(attempt, Arc::clone(&self.store)),
            value: None,
            failure: None,
            panic: None,
            store_error: None,
            lease: None,
        };
        let running: Pin<&mut Running<Fut>> = pin!(Fuse::terminated());
        call.drive(action, running).await
    }

    fn validate<E>(&self, operation: &str, key: &str) -> Result<(Operation, Key), Error<E>> {
        let refused = |error: &dyn std::error::Error| {
            self.metrics.count(Counter::InvalidInput);
            tracing::debug!(operation, key, %error, "refused: invalid input");
        };
        let operation = Operation::new(operation).inspect_err(|error| refused(error))?;
        let key = Key::new(key).inspect_err(|error| refused(error))?;
        Ok((operation, key))
    }

    /// The caller's clock.
    fn now(&self) -> idem_core::Timestamp {
        idem_core::Timestamp::from_millis(millis(self.epoch.elapsed()))
    }

    /// Sleeps until `floor` on the caller's clock; `None` returns at once.
    async fn sleep_until_floor(&self, floor: Option<idem_core::Timestamp>) {
        if floor.is_some() {
            self.sleep_until(floor).await;
        }
    }

    /// Sleeps until `until` on the caller's clock; `None` never wakes.
    async fn sleep_until(&self, until: Option<idem_core::Timestamp>) {
        let Some(until) = until else {
            return std::future::pending().await;
        };
        let deadline = self
            .epoch
            .checked_add(Duration::from_millis(until.as_millis()))
            // The end of time, as far as a tokio timer can tell.
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(60 * 60 * 24 * 365 * 30));
        tokio::time::sleep_until(deadline).await;
    }
}

/// The state of one call while its attempt runs.
struct Call<'c, S: Store, T, E> {
    coordinator: &'c Coordinator<S>,
    operation: &'c Operation,
    key: &'c Key,
    guard: AttemptGuard<S>,
    /// The action's value, once it succeeded.
    value: Option<T>,
    /// The action's error, once it failed.
    failure: Option<E>,
    /// The action's panic, resumed once the reservation is released.
    panic: Option<Box<dyn Any + Send>>,
    /// The last store failure, for `StoreUnavailable`.
    store_error: Option<StoreError>,
    /// Tells the action's claim about its lease while the action runs.
    lease: Option<watch::Sender<LeaseStatus>>,
}

impl<S: Store, T, E> Call<'_, S, T, E>
where
    T: Serialize + DeserializeOwned,
{
    async fn drive<F, Fut>(
        &mut self,
        action: F,
        mut running: Pin<&mut Running<Fut>>,
    ) -> Result<Outcome<T>, Error<E>>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let coordinator = self.coordinator;
        let store = &*coordinator.store;
        let mut action = Some(action);
        loop {
            let now = coordinator.now();
            self.publish_lease(now);
            match self.guard.attempt.poll(now) {
                // After a fail-closed refusal the guard sends the attempt's settlement (a
                // best-effort release of a reserve that may have landed) as the call returns.
                Step::Done(outcome) => return self.conclude(outcome),
                Step::Run => {
                    let action = action.take().ok_or(ProtocolError::ActionNotRunning)?;
                    let claim = self.claim(now);
                    tracing::debug!(
                        operation = %self.operation,
                        key = %self.key,
                        protected = claim.is_protected(),
                        "running the action"
                    );
                    running.set(AssertUnwindSafe(action(claim)).catch_unwind().fuse());
                }
                Step::Send(command) => {
                    let name = command.name();
                    let apply = store.apply(self.operation, self.key, command);
                    let answer = if running.is_terminated() {
                        apply.await
                    } else {
                        self.await_while_running(apply, running.as_mut()).await?
                    };
                    self.answered(name, answer)?;
                }
                Step::Wait { until } => {
                    if !running.is_terminated() {
                        tokio::select! {
                            biased;
                            result = running.as_mut() => self.action_finished(result)?,
                            () = coordinator.sleep_until(until) => {}
                        }
                    } else if let Some(from) = self.guard.attempt.notices_from(now) {
                        // Registered before sleeping, so a completion in between still
                        // wakes this waiter (the store's contract for `changed`).
                        let changed = store.changed(self.operation, self.key);
                        let floor = (from > now).then_some(from);
                        let notice = async {
                            coordinator.sleep_until_floor(floor).await;
                            changed.await;
                        };
                        tokio::select! {
                            biased;
                            () = notice => {
                                let now = coordinator.now();
                                if self.guard.attempt.handle_record_changed(now) {
                                    tracing::trace!(
                                        operation = %self.operation,
                                        key = %self.key,
                                        "the holder's record changed; reserving again"
                                    );
                                }
                            }
                            () = coordinator.sleep_until(until) => {}
                        }
                    } else if until.is_some() {
                        coordinator.sleep_until(until).await;
                    } else {
                        // No action, no command, no timer: nothing could ever move the
                        // attempt again. The machine never asks for this.
                        return Err(ProtocolError::ActionNotRunning.into());
                    }
                }
            }
        }
    }

    /// Waits for the store's answer while the action runs: an action that finishes
    /// meanwhile is fed to the attempt, and the lease is watched for the moment it becomes
    /// unconfirmed.
    async fn await_while_running<Fut>(
        &mut self,
        apply: impl Future<Output = Result<Reply, StoreError>>,
        mut running: Pin<&mut Running<Fut>>,
    ) -> Result<Result<Reply, StoreError>, Error<E>>
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let coordinator = self.coordinator;
        let mut apply = pin!(apply);
        loop {
            let now = coordinator.now();
            self.publish_lease(now);
            // With a command outstanding, polling only reports the lease's end.
            let until = match self.guard.attempt.poll(now) {
                Step::Wait { until } => until,
                _ => None,
            };
            tokio::select! {
                biased;
                answer = &mut apply => return Ok(answer),
                result = running.as_mut(), if !running.is_terminated() => {
                    self.action_finished(result)?;
                }
                () = coordinator.sleep_until(until) => {}
            }
        }
    }

    /// Feeds the store's answer to the attempt.
    fn answered(
        &mut self,
        command: &'static str,
        answer: Result<Reply, StoreError>,
    ) -> Result<(), Error<E>> {
        let now = self.coordinator.now();
        let metrics = &self.coordinator.metrics;
        match answer {
            Ok(reply) => {
                tracing::trace!(
                    operation = %self.operation,
                    key = %self.key,
                    command,
                    ?reply,
                    "store replied"
                );
                self.guard.attempt.handle_reply(reply, now)?;
            }
            Err(error) => {
                metrics.store_error(command);
                tracing::warn!(
                    operation = %self.operation,
                    key = %self.key,
                    command,
                    %error,
                    "store command failed"
                );
                self.store_error = Some(error);
                self.guard.attempt.handle_store_error(now)?;
            }
        }
        Ok(())
    }

    /// The action finished (returned or panicked): keep its value, error or panic, and
    /// tell the attempt what to record.
    fn action_finished(
        &mut self,
        result: Result<Result<T, E>, Box<dyn Any + Send>>,
    ) -> Result<(), Error<E>> {
        // The claim's lease no longer matters; a lease-lost future now never resolves.
        self.lease = None;
        let fed = match result {
            Ok(Ok(value)) => {
                let encoded = match serde_json::to_vec(&value) {
                    Ok(bytes) => ActionResult::Succeeded(Body::new(bytes)),
                    Err(error) => {
                        tracing::warn!(
                            operation = %self.operation,
                            key = %self.key,
                            %error,
                            "the action's value cannot be encoded; completing without a body"
                        );
                        ActionResult::Unrecordable
                    }
                };
                self.value = Some(value);
                encoded
            }
            Ok(Err(error)) => {
                self.failure = Some(error);
                ActionResult::Failed
            }
            Err(panic) => {
                tracing::warn!(
                    operation = %self.operation,
                    key = %self.key,
                    "the action panicked; releasing the key"
                );
                self.panic = Some(panic);
                ActionResult::Failed
            }
        };
        let now = self.coordinator.now();
        self.guard.attempt.handle_action_result(fed, now)?;
        Ok(())
    }

    /// The claim handed to the action, and the channel that keeps its lease status.
    fn claim(&mut self, now: idem_core::Timestamp) -> Claim {
        let attempt = &self.guard.attempt;
        let status = match attempt.lease(now) {
            LeaseState::None => LeaseStatus::Unprotected,
            state => lease_status(state),
        };
        let (sender, receiver) = watch::channel(status);
        self.lease = Some(sender);
        Claim::new(
            self.operation.clone(),
            self.key.clone(),
            attempt.owner(),
            receiver,
        )
    }

    /// Tells the running action's claim what the attempt knows about its lease.
    fn publish_lease(&self, now: idem_core::Timestamp) {
        let Some(sender) = &self.lease else {
            return;
        };
        let state = self.guard.attempt.lease(now);
        if state == LeaseState::None {
            return;
        }
        let status = lease_status(state);
        let changed = sender.send_if_modified(|current| {
            let moved = *current != status;
            *current = status;
            moved
        });
        if changed && status != LeaseStatus::Held {
            tracing::warn!(
                operation = %self.operation,
                key = %self.key,
                lease = ?status,
                "the running action's lease is no longer confirmed"
            );
        }
    }

    /// Turns the attempt's outcome into the call's result.
    fn conclude(&mut self, outcome: idem_core::Outcome) -> Result<Outcome<T>, Error<E>> {
        use idem_core::Outcome as Ended;
        let metrics = &self.coordinator.metrics;
        let (operation, key) = (self.operation, self.key);
        match outcome {
            Ended::Executed(Execution {
                protection,
                record,
                lease_lost,
            }) => {
                metrics.count(Counter::Executed);
                let provenance = match protection {
                    Protection::Reserved => Provenance::Executed {
                        lease_lost,
                        recording: record,
                    },
                    Protection::FailedOpen => {
                        metrics.count(Counter::FailedOpen);
                        Provenance::ExecutedUnprotected { recording: record }
                    }
                };
                if lease_lost {
                    metrics.count(Counter::LeaseLost);
                    tracing::warn!(%operation, %key, ?record, "executed, but the lease lapsed meanwhile");
                } else {
                    tracing::debug!(%operation, %key, ?provenance, "executed");
                }
                let value = self.value.take().ok_or(ProtocolError::ActionNotRunning)?;
                Ok(Outcome { value, provenance })
            }
            Ended::ActionFailed { released } => {
                metrics.count(Counter::ActionFailed);
                tracing::debug!(%operation, %key, released, "the action failed; key given back");
                if let Some(panic) = self.panic.take() {
                    panic::resume_unwind(panic);
                }
                let failure = self.failure.take().ok_or(ProtocolError::ActionNotRunning)?;
                Err(Error::Action(failure))
            }
            Ended::Replayed { body: Some(body) } => match serde_json::from_slice(body.as_bytes()) {
                Ok(value) => {
                    metrics.count(Counter::Replayed);
                    tracing::debug!(%operation, %key, "replayed");
                    Ok(Outcome {
                        value,
                        provenance: Provenance::Replayed,
                    })
                }
                Err(error) => {
                    metrics.count(Counter::DecodeFailed);
                    tracing::warn!(%operation, %key, %error, "stored result does not decode");
                    Err(Error::Decode(error))
                }
            },
            Ended::Replayed { body: None } => {
                metrics.count(Counter::ResultNotStored);
                tracing::debug!(%operation, %key, "completed earlier without a stored result");
                Err(Error::ResultNotStored)
            }
            Ended::KeyReuse { stored, given } => {
                metrics.count(Counter::KeyReuse);
                tracing::debug!(%operation, %key, %stored, %given, "refused: key reuse");
                Err(Error::KeyReuse { stored, given })
            }
            Ended::InProgress => {
                metrics.count(Counter::InProgress);
                tracing::debug!(%operation, %key, "refused: in progress");
                Err(Error::InProgress)
            }
            Ended::StoreUnavailable => {
                metrics.count(Counter::StoreUnavailable);
                tracing::warn!(%operation, %key, "refused: store unavailable (fail closed)");
                let error = self
                    .store_error
                    .take()
                    .unwrap_or_else(|| StoreError::Unavailable {
                        command: "reserve",
                        source: "the store did not answer".into(),
                    });
                Err(Error::StoreUnavailable(error))
            }
        }
    }
}

fn lease_status(state: LeaseState) -> LeaseStatus {
    match state {
        LeaseState::Held | LeaseState::None => LeaseStatus::Held,
        LeaseState::Unconfirmed => LeaseStatus::Unconfirmed,
        LeaseState::Lost => LeaseStatus::Lost,
    }
}
