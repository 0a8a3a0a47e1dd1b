//! `Coordinator`: runs actions under idempotency keys by driving the attempt machine.
//!
//! The coordinator owns no decisions; each call builds an [`Attempt`] and pumps it (see the
//! `call` module). How the call relates to its caller's future is explicit in the API:
//!
//! - **Detached** ([`execute`](Coordinator::execute), the default): once its action starts,
//!   the call outlives its caller. It runs in the caller's future while the caller waits for
//!   it (no task is spawned for a call whose caller stays), and if that future is dropped (a
//!   client that hung up, a `TimeoutLayer` that fired) the rest of the call moves whole to a
//!   task of its own on the runtime it began on: the action runs to its end and its result
//!   is recorded exactly as if the caller had stayed, so a retry waits for it and replays it.
//!   Before the action starts (reserving, waiting for another holder), a caller that goes
//!   away leaves nothing run (a reservation that may have landed is released). The action
//!   must be `Send + 'static`.
//! - **Attached** ([`execute_attached`](Coordinator::execute_attached)): the call runs
//!   inside the caller's future, for actions that borrow or are not `Send`. Dropping that
//!   future drops the action; the attempt is then abandoned
//!   ([`Attempt::abandon`]): a key whose action was dropped mid-run stays held until its
//!   lease ends, never released, and the drop is counted (`left_to_lease`) and logged.
//!
//! The caller's clock is [`tokio::time::Instant`] counted from the coordinator's creation,
//! so tests with paused time control it.

use std::future::Future;
use std::panic;
use std::sync::Arc;

use idem_core::{
    Attempt, Fingerprint, Key, Operation, OperationError, Options, OptionsBuilder, OptionsError,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::runtime::Handle;

use crate::answer::Answer;
use crate::call::{Call, Ended, Paused};
use crate::claim::Claim;
use crate::clock::Clock;
use crate::codec::{Codec, Json};
use crate::detached::{DEFAULT_MAX_DETACHED, Detached, Detaching, Refused, ShutdownReport, Slot};
use crate::ending::Ending;
use crate::entropy::Entropy;
use crate::error::Error;
use crate::metrics::{Counter, Metrics, MetricsSnapshot};
use crate::operation::OperationHandle;
use crate::replay_cache::{ReplayCache, ReplayCacheConfig};
use crate::settle::AttemptGuard;
use crate::store::Store;
use crate::transaction::{Transaction, TransactionSlot};

/// Runs actions under idempotency keys, with one [`Store`] and one set of [`Options`].
///
/// Cloning is cheap and clones share the store, the clock and the counters.
#[derive(Debug)]
pub struct Coordinator<S> {
    store: Arc<S>,
    options: Options,
    metrics: Arc<Metrics>,
    entropy: Arc<Entropy>,
    clock: Clock,
    cache: Option<Arc<ReplayCache>>,
    detached: Arc<Detached>,
}

impl<S> Clone for Coordinator<S> {
    fn clone(&self) -> Self {
        Self {
            store: Arc::clone(&self.store),
            options: self.options.clone(),
            metrics: Arc::clone(&self.metrics),
            entropy: Arc::clone(&self.entropy),
            clock: self.clock,
            cache: self.cache.clone(),
            detached: Arc::clone(&self.detached),
        }
    }
}

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
            clock: Clock::new(),
            cache: None,
            detached: Arc::new(Detached::new(DEFAULT_MAX_DETACHED)),
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
    #[doc(hidden)]
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.entropy = Arc::new(Entropy::Seeded(seed.into()));
        self
    }

    /// Turns on the replay cache, within `bounds`: completed records this coordinator has
    /// seen (replayed by the store, or completed by its own calls) are kept in memory, for
    /// less than the store says they have left and never longer than
    /// [`ReplayCacheConfig::max_age`], and a replay or a key reuse of one is answered
    /// without a round trip to the store. Clones share the cache.
    ///
    /// **Off by default.** Under the model's assumptions nothing a caller can observe changes
    /// but speed (MODEL.md, "The replay cache": a completed record never changes before it
    /// expires, `I3`). Outside them it does: a record deleted from the store by hand, or lost
    /// with the store's data (a Redis restarted without persistence, a failover that lost
    /// writes), is still replayed by this process for up to `max_age`, where the store
    /// would have run the action again; and a replay is answered while the store is down.
    /// Turn it on where replays are frequent and those are acceptable (they never cause a
    /// second effect; they may prevent one that was wanted).
    ///
    /// A replay the store answers without reading its clock (the Redis single-command
    /// reserve) does not say how long its record has left, and is not kept; the records
    /// this process completes itself always are.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::{Coordinator, Fingerprint, MemoryStore, Options, ReplayCacheConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let bounds = ReplayCacheConfig::builder()
    ///     .max_entries(50_000)
    ///     .max_bytes(64 << 20)
    ///     .max_age(Duration::from_secs(120))
    ///     .build()?;
    /// let payments =
    ///     Coordinator::new(MemoryStore::new(), Options::default()).with_replay_cache(bounds);
    /// let fp = Fingerprint::of_bytes(b"charge o-1 100");
    /// let charge = || payments.execute("payment.charge", "k-1", fp, |_claim| async {
    ///     Ok::<_, std::io::Error>(100_u64)
    /// });
    /// assert_eq!(charge().await?, 100);
    /// assert_eq!(charge().await?, 100); // replayed from memory
    /// assert_eq!(payments.metrics().replay_cache.hits, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn with_replay_cache(mut self, bounds: ReplayCacheConfig) -> Self {
        self.cache = Some(Arc::new(ReplayCache::new(bounds)));
        self
    }

    /// Allows at most `max` detached actions to run at once (default
    /// [`DEFAULT_MAX_DETACHED`]). A call whose action
    /// would be one more is answered [`Error::Overloaded`] (HTTP 503) after its reservation
    /// is released: nothing ran, and a retry later runs it. Attached calls are not counted:
    /// they run in their caller's future, which bounds them. Clones made after this share
    /// the bound; set it before cloning.
    #[must_use]
    pub fn with_max_detached(mut self, max: usize) -> Self {
        self.detached = Arc::new(Detached::new(max));
        self
    }

    /// Stops gracefully: from now on every new call is refused with
    /// [`Error::ShuttingDown`] (HTTP 503, nothing ran), the detached actions that run are
    /// left to end and be recorded for up to `deadline`, and those still running then are
    /// cut: each key stays held until its lease ends (never released: its effect may have
    /// begun, rule 11), and each is counted
    /// ([`MetricsSnapshot::shutdown_cut`](crate::MetricsSnapshot::shutdown_cut)) and
    /// logged with its operation and key. Calls still waiting for another holder, or
    /// recording, go on; stop serving requests before this, and drop the runtime after.
    ///
    /// ```
    /// use std::time::Duration;
    /// use idem::{Coordinator, Error, Fingerprint, MemoryStore, Options};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let payments = Coordinator::new(MemoryStore::new(), Options::default());
    /// let report = payments.shutdown(Duration::from_secs(10)).await;
    /// assert_eq!((report.finished, report.cut), (0, 0));
    /// let fp = Fingerprint::of_bytes(b"charge o-1");
    /// let late = payments.execute("payment.charge", "k", fp, |_claim| async { Ok::<_, String>(1) }).await;
    /// assert!(matches!(late, Err(Error::ShuttingDown)));
    /// # }
    /// ```
    pub async fn shutdown(&self, deadline: std::time::Duration) -> ShutdownReport {
        tracing::info!(
            running = self.detached.running(),
            ?deadline,
            "shutting down: new calls are refused, running actions may finish"
        );
        let report = self.detached.shutdown(deadline).await;
        if report.cut > 0 {
            tracing::warn!(
                cut = report.cut,
                "shutdown deadline passed: running actions cut, their keys left to their leases"
            );
        }
        report
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
        let mut snapshot = self.metrics.snapshot();
        if let Some(cache) = &self.cache {
            (snapshot.replay_cache.entries, snapshot.replay_cache.bytes) = cache.usage();
        }
        snapshot.detached_running = self.detached.running() as u64;
        snapshot.max_detached = self.detached.limit() as u64;
        snapshot
    }

    /// A handle on one operation whose calls return `T` or fail with `E`: the operation's
    /// name is validated once, here, and the value and error types are fixed, so closures
    /// need no type annotations. Values are stored as JSON ([`Json`]); see
    /// [`OperationHandle::with_codec`] for another codec.
    pub fn operation<T, E>(
        &self,
        name: impl AsRef<str>,
    ) -> Result<OperationHandle<S, T, E>, OperationError>
    where
        T: Serialize + DeserializeOwned,
    {
        let name = name.as_ref();
        let operation = Operation::new(name).inspect_err(|error| {
            self.metrics.count(Counter::InvalidInput);
            tracing::debug!(operation = name, %error, "refused: invalid operation");
        })?;
        Ok(OperationHandle::new(self.clone(), operation, Json))
    }

    /// As [`operation`](Self::operation), with values stored by `codec` from the start: for
    /// value types that are not serde types (an HTTP response, a protocol buffer), which
    /// [`OperationHandle::with_codec`] cannot reach because the handle is made with
    /// [`Json`] first.
    pub fn operation_with_codec<T, E, C>(
        &self,
        name: impl AsRef<str>,
        codec: C,
    ) -> Result<OperationHandle<S, T, E, C>, OperationError>
    where
        C: Codec<T> + Clone,
    {
        let name = name.as_ref();
        let operation = Operation::new(name).inspect_err(|error| {
            self.metrics.count(Counter::InvalidInput);
            tracing::debug!(operation = name, %error, "refused: invalid operation");
        })?;
        Ok(OperationHandle::new(self.clone(), operation, codec))
    }

    /// As [`operation_with_codec`](Self::operation_with_codec), for an [`Operation`] that is
    /// valid already: one made by [`Operation::new`], or scoped by
    /// [`Operation::for_tenant`], whose name holds a character `Operation::new` refuses (so
    /// that no plain name spells a tenant's scope) and so cannot be passed as a string.
    pub fn operation_of<T, E, C>(
        &self,
        operation: Operation,
        codec: C,
    ) -> OperationHandle<S, T, E, C>
    where
        C: Codec<T> + Clone,
    {
        OperationHandle::new(self.clone(), operation, codec)
    }

    /// Runs `action` once for the request that `fingerprint` describes under `key`, scoped to
    /// `operation`, and returns its value; or, if an identical request already ran, returns
    /// that request's stored value without running `action`.
    ///
    /// The call is **detached** (see the [module docs](self)): dropping the returned future
    /// never stops an action that started (the rest of the call moves to a task of its own);
    /// the action runs to its end and is recorded, and a retry gets its result. Until then
    /// the call runs in the returned future, so await it: a future kept without being polled
    /// stalls its action and its lease's renewals (a lease that lapses meanwhile is reported,
    /// `lease_lost`), and one leaked with `mem::forget` keeps its detached place. Polled
    /// outside a tokio runtime, the call refuses to start its action
    /// ([`Error::RuntimeShutdown`]).
    ///
    /// The action receives a [`Claim`] with the key and the owner token. Its `Ok` value is
    /// stored as JSON and returned identically to every replay (`I8`); its `Err` releases the
    /// reservation, so a retry runs it again (`I5`), and comes back as [`Error::Action`]. If
    /// the action panics, the record says so (an identical retry gets
    /// [`Error::OutcomeUnknown`], never a second effect) and the panic resumes in the
    /// caller. See [`Error`] for every refusal and its HTTP status. A service that calls one
    /// operation often is better served by [`operation`](Self::operation).
    pub async fn execute<T, E, F, Fut>(
        &self,
        operation: impl AsRef<str>,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<T, Error<E>>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.execute_with_provenance(operation, key, fingerprint, action)
            .await
            .map(|answer| answer.value)
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
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let operation = self.validate_operation(operation.as_ref())?;
        self.detached(operation, key.as_ref(), fingerprint, Json, action)
            .await
    }

    /// As [`execute`](Self::execute), but **attached**: the call runs inside the returned
    /// future, so the action may borrow from the caller and need not be `Send`. Dropping the
    /// future before it ends abandons the attempt: an action dropped mid-run leaves its key
    /// held until its lease ends (a retry within the lease waits or gets
    /// [`Error::InProgress`]; one after it may run the action again), and the drop is
    /// counted in [`MetricsSnapshot::left_to_lease`] and logged. Prefer
    /// [`execute`](Self::execute) wherever the caller's future can be dropped (HTTP
    /// handlers).
    pub async fn execute_attached<T, E, F, Fut>(
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
        self.execute_attached_with_provenance(operation, key, fingerprint, action)
            .await
            .map(|answer| answer.value)
    }

    /// As [`execute_attached`](Self::execute_attached), with the value's provenance.
    pub async fn execute_attached_with_provenance<T, E, F, Fut>(
        &self,
        operation: impl AsRef<str>,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let operation = self.validate_operation(operation.as_ref())?;
        self.attached(operation, key.as_ref(), fingerprint, Json, action)
            .await
    }

    /// A detached call of a validated operation.
    pub(crate) async fn detached<T, E, C, F, Fut>(
        &self,
        operation: Operation,
        key: &str,
        fingerprint: Fingerprint,
        codec: C,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        C: Codec<T>,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output: Into<Ending<T, E>>> + Send + 'static,
    {
        let call = self.call(operation, key, fingerprint, codec, None)?;
        spawned(call, action, &self.detached, &self.metrics).await
    }

    /// As [`execute`](Self::execute), for an action whose effect is writes in the store's own
    /// database: the action opens a [`Transaction`], makes its writes in it and returns it with
    /// its value, uncommitted; the attempt's complete then joins that transaction, which
    /// commits only if the record is still this call's (see the `transaction` module). A
    /// call whose lease was lost to another request commits nothing and gets
    /// [`Error::RolledBack`]; a panic or a failure rolls the writes back and gives the key
    /// back. Store crates wrap this in an API that hands the action its transaction
    /// (idem-postgres).
    pub async fn execute_in_transaction<T, E, Tx, F, Fut>(
        &self,
        operation: impl AsRef<str>,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        Tx: Transaction,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(T, Tx), E>> + Send + 'static,
    {
        let operation = self.validate_operation(operation.as_ref())?;
        self.transactional(operation, key.as_ref(), fingerprint, Json, action)
            .await
    }

    /// A detached transactional call of a validated operation.
    pub(crate) async fn transactional<T, E, C, Tx, F, Fut>(
        &self,
        operation: Operation,
        key: &str,
        fingerprint: Fingerprint,
        codec: C,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        C: Codec<T>,
        Tx: Transaction,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output: Into<Ending<(T, Tx), E>>> + Send + 'static,
    {
        let slot = TransactionSlot::default();
        let call = self.call(operation, key, fingerprint, codec, Some(slot.clone()))?;
        let action = move |claim| async move {
            // A transaction that is not put in the slot is dropped, which rolls it back.
            action(claim).await.into().map(|(value, transaction)| {
                slot.put(transaction);
                value
            })
        };
        spawned(call, action, &self.detached, &self.metrics).await
    }

    /// An attached call of a validated operation.
    pub(crate) async fn attached<T, E, C, F, Fut>(
        &self,
        operation: Operation,
        key: &str,
        fingerprint: Fingerprint,
        codec: C,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        C: Codec<T>,
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut call = self.call(operation, key, fingerprint, codec, None)?;
        let ended = call.drive(action).await;
        // The call ends before its answer is given (or its action's panic resumed).
        drop(call);
        resume(ended)
    }

    /// A call's state, before anything is sent.
    fn call<T, E, C: Codec<T>>(
        &self,
        operation: Operation,
        key: &str,
        fingerprint: Fingerprint,
        codec: C,
        transaction: Option<TransactionSlot>,
    ) -> Result<Call<S, C, T, E>, Error<E>> {
        if self.detached.is_closing() {
            self.metrics.count(Counter::ShuttingDown);
            tracing::debug!(%operation, key, "refused: shutting down");
            return Err(Error::ShuttingDown);
        }
        let key = Key::new(key).inspect_err(|error| {
            self.metrics.count(Counter::InvalidInput);
            tracing::debug!(%operation, key, %error, "refused: invalid input");
        })?;
        let mut attempt = Attempt::new(
            operation,
            key,
            fingerprint,
            self.entropy.owner_token(),
            self.entropy.next_u64(),
            self.options.clone(),
            self.clock.now(),
        );
        if transaction.is_some() {
            attempt = attempt.in_transaction();
        }
        let guard = AttemptGuard::new(
            attempt,
            Arc::clone(&self.store),
            Arc::clone(&self.metrics),
            self.clock,
        );
        let call = Call::new(
            guard,
            Arc::clone(&self.store),
            codec,
            Arc::clone(&self.metrics),
            self.clock,
            self.cache.clone(),
        );
        Ok(match transaction {
            Some(slot) => call.in_transaction(slot),
            None => call,
        })
    }

    fn validate_operation<E>(&self, operation: &str) -> Result<Operation, Error<E>> {
        Operation::new(operation).map_err(|error| {
            self.metrics.count(Counter::InvalidInput);
            tracing::debug!(operation, %error, "refused: invalid input");
            Error::InvalidOperation(error)
        })
    }
}

/// Runs `call` detached: up to the moment its attempt hands the action out, in the caller's
/// future (a caller that goes away before the action started leaves nothing run); from then
/// on, as a [`Detaching`] future: still polled by the caller while it waits, and moved to a
/// task of its own, never aborted, if the returned future is dropped: that is the point of a
/// detached call. The rest of the call holds one of the coordinator's detached places; with
/// none free (the bound, or a stop under way) the action is never started and its
/// reservation is released.
///
/// Not an async fn, and neither is [`rest`]: an async fn keeps its arguments apart from the
/// locals it moves them to, so the call would be held twice in the caller's future and again
/// in the boxed rest. An async block uses what it captures in place.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would hold the call twice; see above"
)]
fn spawned<S, C, T, E, F, Fut>(
    mut call: Call<S, C, T, E>,
    action: F,
    detached: &Arc<Detached>,
    metrics: &Arc<Metrics>,
) -> impl Future<Output = Result<Answer<T>, Error<E>>>
where
    S: Store,
    C: Codec<T>,
    T: Send + 'static,
    E: Send + 'static,
    F: FnOnce(Claim) -> Fut + Send + 'static,
    Fut: Future<Output: Into<Ending<T, E>>> + Send + 'static,
{
    async move {
        if let Paused::Ended(ended) = call.until_run::<F, Fut>().await {
            return resume(ended);
        }
        // The action may have to outlive its caller on a task of its own, which needs a
        // runtime to run on: without one (a caller that polls this outside tokio), it is not
        // started.
        let Ok(runtime) = Handle::try_current() else {
            let (operation, key) = call.names();
            call.decline_run();
            tracing::warn!(%operation, %key, "refused: a detached call outside a tokio runtime cannot outlive its caller; its action was not started");
            return Err(Error::RuntimeShutdown);
        };
        let slot = match detached.enter() {
            Ok(slot) => slot,
            Err(refused) => {
                let (operation, key) = call.names();
                // Its action never started: the grant is released (nothing ran).
                call.decline_run();
                return Err(match refused {
                    Refused::Overloaded => {
                        metrics.count(Counter::Overloaded);
                        tracing::warn!(%operation, %key, limit = detached.limit(), "refused: too many detached actions running");
                        Error::Overloaded
                    }
                    Refused::ShuttingDown => {
                        metrics.count(Counter::ShuttingDown);
                        tracing::debug!(%operation, %key, "refused: shutting down");
                        Error::ShuttingDown
                    }
                });
            }
        };
        // Boxed: the call and its action are a few kilobytes, and a caller that goes away
        // moves them to a task of their own.
        let rest = rest(call, action, slot, Arc::clone(metrics));
        match Detaching::new(Box::pin(rest), runtime).await {
            Some(ended) => resume(ended),
            None => Err(Error::RuntimeShutdown),
        }
    }
}

/// The rest of a detached call from its action's start: the action run and its result
/// recorded, unless the stop's deadline cuts it first. Then the call is dropped mid-action,
/// its key left to its lease, and the answer is `None`.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would hold the call twice; see `spawned`"
)]
fn rest<S, C, T, E, F, Fut>(
    mut call: Call<S, C, T, E>,
    action: F,
    mut slot: Slot,
    metrics: Arc<Metrics>,
) -> impl Future<Output = Option<Ended<T, E>>> + Send + 'static
where
    S: Store,
    C: Codec<T>,
    T: Send + 'static,
    E: Send + 'static,
    F: FnOnce(Claim) -> Fut + Send + 'static,
    Fut: Future<Output: Into<Ending<T, E>>> + Send + 'static,
{
    async move {
        tokio::select! {
            biased;
            ended = call.finish(action) => Some(ended),
            () = slot.cut() => {
                let (operation, key) = call.names();
                // The call is dropped here, mid-action: its key is left to its lease.
                drop(call);
                metrics.count(Counter::ShutdownCut);
                tracing::warn!(%operation, %key, "cut by the shutdown's deadline; the key is left to its lease");
                None
            }
        }
    }
}

/// The caller's answer, or the action's panic resumed in the caller.
fn resume<T, E>(ended: Ended<T, E>) -> Result<Answer<T>, Error<E>> {
    match ended {
        Ended::Answer(answer) => answer,
        Ended::Panic(payload) => panic::resume_unwind(payload),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::mem::size_of_val;

    use super::*;
    use crate::memory::MemoryStore;

    async fn charge(_claim: Claim) -> Result<String, Infallible> {
        Ok("ch_1".to_owned())
    }

    /// The size of the call's loop up to the action, for `action`'s type.
    fn until_run_size<F, Fut>(
        call: &mut Call<MemoryStore, Json, String, Infallible>,
        _action: &F,
    ) -> usize
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output: Into<Ending<String, Infallible>>>,
    {
        size_of_val(&call.until_run::<F, Fut>())
    }

    /// Each half of a detached call holds the call's state once: what a half adds to the call
    /// and the future of the call's loop is a few words, not a second copy of the call (an
    /// async fn taking the call by value would hold it twice, and a future built from it a
    /// third time). Every call in flight carries these futures, and the rest is copied whole
    /// into its box.
    #[test]
    fn a_detached_call_holds_its_state_once() {
        let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
        let operation = Operation::new("charge").expect("a valid operation");
        let fingerprint = Fingerprint::of_bytes(b"order-1");
        let new_call = || {
            coordinator
                .call::<String, Infallible, _>(operation.clone(), "k", fingerprint, Json, None)
                .expect("a call")
        };
        let mut call = new_call();
        let call_size = size_of_val(&call);
        let until_run = until_run_size(&mut call, &charge);
        let finish = size_of_val(&call.finish(charge));
        // The rest also holds its detached place and the future that waits for a cut; either
        // half, its own few words. Well under a second copy of the call.
        let slack = 384;
        assert!(slack < call_size);

        let first = spawned(
            new_call(),
            charge,
            &coordinator.detached,
            &coordinator.metrics,
        );
        assert!(
            size_of_val(&first) <= call_size + until_run + slack,
            "the caller's half is {} bytes: the call is {call_size} and its loop {until_run}",
            size_of_val(&first)
        );
        let slot = coordinator.detached.enter().expect("a detached place");
        let rest = rest(call, charge, slot, Arc::clone(&coordinator.metrics));
        assert!(
            size_of_val(&rest) <= call_size + finish + slack,
            "the rest is {} bytes: the call is {call_size} and its loop {finish}",
            size_of_val(&rest)
        );
    }
}
