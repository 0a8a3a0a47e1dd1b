//! [`Consumer`]: one operation's consumer, broker-neutral. It turns each delivery into a
//! call under the message's key and asks the core what to tell the broker.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use idem::{
    Answer, BoxError, Claim, Codec, Error, Json, OperationHandle, Store, TransactionalStore,
};
use idem_core::{CallEnd, DeadLetterReason, Disposition, Fingerprint, Redelivery};

use crate::call_end::{call_end, executed};
use crate::message::{KeyFrom, Message};

/// A consumer of one operation's messages: every delivery of a message is a call of the
/// operation under the message's key, and the broker is told only what the record says
/// (MODEL.md, "Consumers"). Cloning is cheap; clones share their counts.
///
/// Run it on a broker with the broker's function ([`Consumer::run_amqp`]).
pub struct Consumer<S, T, E, C = Json> {
    pub(crate) operation: OperationHandle<S, T, E, C>,
    pub(crate) redelivery: Redelivery,
    pub(crate) key_from: KeyFrom,
    pub(crate) concurrency: usize,
    pub(crate) grace: Duration,
    pub(crate) batch_wait: Duration,
    pub(crate) fingerprint_headers: Arc<[String]>,
    pub(crate) counts: Arc<Counts>,
}

impl<S, T, E, C: Clone> Clone for Consumer<S, T, E, C> {
    fn clone(&self) -> Self {
        Self {
            operation: self.operation.clone(),
            redelivery: self.redelivery,
            key_from: self.key_from.clone(),
            concurrency: self.concurrency,
            grace: self.grace,
            batch_wait: self.batch_wait,
            fingerprint_headers: self.fingerprint_headers.clone(),
            counts: self.counts.clone(),
        }
    }
}

impl<S, T, E, C> std::fmt::Debug for Consumer<S, T, E, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("operation", &self.operation)
            .field("redelivery", &self.redelivery)
            .field("key_from", &self.key_from)
            .field("concurrency", &self.concurrency)
            .field("grace", &self.grace)
            .field("batch_wait", &self.batch_wait)
            .field("fingerprint_headers", &self.fingerprint_headers)
            .finish()
    }
}

/// What a consumer did with the deliveries it took, so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumeReport {
    /// Acknowledged after the message's action ran in this delivery.
    pub executed: u64,
    /// Acknowledged without running: the message's effect was recorded by an earlier
    /// delivery (a duplicate publish, a redelivery after a lost ack).
    pub replayed: u64,
    /// Handed back for redelivery after a call that recorded nothing (a failure, the store
    /// down, a stop).
    pub redelivered: u64,
    /// Handed back for redelivery because another delivery of the message held its key.
    pub in_progress: u64,
    /// Dead-lettered, by reason ([`DeadLetterReason::name`]).
    pub dead_lettered: BTreeMap<&'static str, u64>,
    /// Acks, nacks and rejects the broker did not take (the channel was gone): the broker
    /// delivers those messages again, and the record decides.
    pub unsettled: u64,
    /// Deliveries still running when the stop's grace ran out: left unacknowledged, so the
    /// broker delivers them again once the channel closes (their keys, if held, are left to
    /// their leases).
    pub cut: u64,
}

impl ConsumeReport {
    /// Every message dead-lettered, whatever the reason.
    pub fn dead_lettered_total(&self) -> u64 {
        self.dead_lettered.values().sum()
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counts {
    executed: AtomicU64,
    replayed: AtomicU64,
    redelivered: AtomicU64,
    in_progress: AtomicU64,
    dead_lettered: Mutex<BTreeMap<&'static str, u64>>,
    unsettled: AtomicU64,
    cut: AtomicU64,
}

impl Counts {
    pub(crate) fn settled(&self, decided: &Decided) {
        let counter = match decided.disposition {
            Disposition::Ack if decided.executed => &self.executed,
            Disposition::Ack => &self.replayed,
            Disposition::Redeliver { .. } if decided.end == CallEnd::InProgress => {
                &self.in_progress
            }
            Disposition::Redeliver { .. } => &self.redelivered,
            Disposition::DeadLetter(reason) => {
                let mut dead = self.dead_lettered.lock().unwrap_or_else(|e| e.into_inner());
                *dead.entry(reason.name()).or_default() += 1;
                return;
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn unsettled(&self) {
        self.unsettled.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn cut(&self, n: u64) {
        self.cut.fetch_add(n, Ordering::Relaxed);
    }

    fn report(&self) -> ConsumeReport {
        ConsumeReport {
            executed: self.executed.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            redelivered: self.redelivered.load(Ordering::Relaxed),
            in_progress: self.in_progress.load(Ordering::Relaxed),
            dead_lettered: self
                .dead_lettered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            unsettled: self.unsettled.load(Ordering::Relaxed),
            cut: self.cut.load(Ordering::Relaxed),
        }
    }
}

/// A delivery's call, decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decided {
    pub(crate) end: CallEnd,
    pub(crate) disposition: Disposition,
    pub(crate) executed: bool,
}

impl<S, T, E, C> Consumer<S, T, E, C>
where
    S: Store,
    T: Send + 'static,
    E: Send + 'static,
    C: Codec<T> + Clone,
{
    /// A consumer of `operation`'s messages: keyed by message id, the default
    /// [`Redelivery`], 16 handlers at a time, 30 s of grace at a stop, batches (when run
    /// with a batch handler) gathered for at most 20 ms.
    ///
    /// Keys are scoped by the operation's name, and by its tenant if it has one: a consumer
    /// of one tenant's messages takes `operation.for_tenant(tenant)?`.
    pub fn new(operation: OperationHandle<S, T, E, C>) -> Self {
        Self {
            operation,
            redelivery: Redelivery::default(),
            key_from: KeyFrom::default(),
            concurrency: 16,
            grace: Duration::from_secs(30),
            batch_wait: Duration::from_millis(20),
            fingerprint_headers: Arc::new([]),
            counts: Arc::default(),
        }
    }

    /// How messages whose calls record nothing are delivered again, and how often.
    #[must_use]
    pub fn redelivery(mut self, redelivery: Redelivery) -> Self {
        self.redelivery = redelivery;
        self
    }

    /// Where a message's key comes from (its message id by default).
    #[must_use]
    pub fn key_from(mut self, key_from: KeyFrom) -> Self {
        self.key_from = key_from;
        self
    }

    /// How many deliveries are handled at once (at least 1). Match the broker's window to
    /// it (AMQP `basic.qos` prefetch): deliveries beyond it wait, unacknowledged.
    #[must_use]
    pub fn concurrency(mut self, handlers: usize) -> Self {
        self.concurrency = handlers.max(1);
        self
    }

    /// Headers whose values belong to the message's fingerprint beside its body (none by
    /// default): a message that reuses a key with another value of one of them is key reuse
    /// (`I4`), dead-lettered `key-reuse`. Name what the effect depends on (an amount, a
    /// currency, a tenant), not what changes on every publish (a timestamp, a trace id).
    /// See [`Message::fingerprint`].
    #[must_use]
    pub fn fingerprint_headers<I>(mut self, names: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.fingerprint_headers = names.into_iter().map(Into::into).collect();
        self
    }

    /// How long a batch waits for more messages after its first, when run with a batch
    /// handler ([`run_amqp_batches`](Self::run_amqp_batches),
    /// [`run_nats_batches`](Self::run_nats_batches)). A batch closes sooner once it holds
    /// [`concurrency`](Self::concurrency) messages. Its first message's lease runs meanwhile:
    /// keep it well under the lease.
    #[must_use]
    pub fn batch_wait(mut self, wait: Duration) -> Self {
        self.batch_wait = wait;
        self
    }

    /// How long running handlers may take to finish once a stop is asked for.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// What the consumer (and its clones) did so far.
    pub fn report(&self) -> ConsumeReport {
        self.counts.report()
    }

    /// The call of `message` under its key, made by `calls`, and what to tell the broker.
    ///
    /// A message without a key never runs. The action is the driver's detached call, so a
    /// stop or a dropped delivery never cuts an action that started; a panic in it is an
    /// unknown outcome (rule 11): recorded so, and dead-lettered, never run again.
    pub(crate) async fn decide<R: Calls<S, T, E, C>>(
        &self,
        message: Message,
        calls: &R,
    ) -> Decided {
        let delivery = message.delivery;
        let (end, ran) = match self.key_from.key_of(&message) {
            Err(reason) => (CallEnd::Refused(reason), false),
            Ok(key) => {
                let fingerprint = message.fingerprint(&self.fingerprint_headers);
                let call = calls.call(&self.operation, key, fingerprint, message);
                match AssertUnwindSafe(call).catch_unwind().await {
                    Ok(result) => (call_end(&result), executed(&result)),
                    Err(_panic) => (CallEnd::Refused(DeadLetterReason::OutcomeUnknown), true),
                }
            }
        };
        let disposition = self
            .redelivery
            .dispose(end, delivery, rand::random::<u64>());
        Decided {
            end,
            disposition,
            executed: ran,
        }
    }
}

/// How a delivery's message becomes a call of the operation: the handler run as the action
/// ([`Plain`]), or in a transaction of the store's database that the record's complete joins
/// ([`InTransaction`]).
pub(crate) trait Calls<S, T, E, C>: Clone + Send + Sync + 'static {
    fn call(
        &self,
        operation: &OperationHandle<S, T, E, C>,
        key: String,
        fingerprint: Fingerprint,
        message: Message,
    ) -> impl Future<Output = Result<Answer<T>, Error<E>>> + Send;
}

/// A handler run as the call's action.
#[derive(Clone)]
pub(crate) struct Plain<H>(pub(crate) H);

impl<S, T, E, C, H, Fut> Calls<S, T, E, C> for Plain<H>
where
    S: Store,
    T: Send + 'static,
    E: Send + 'static,
    C: Codec<T> + Clone,
    H: Fn(Claim, Message) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    fn call(
        &self,
        operation: &OperationHandle<S, T, E, C>,
        key: String,
        fingerprint: Fingerprint,
        message: Message,
    ) -> impl Future<Output = Result<Answer<T>, Error<E>>> + Send {
        let handler = self.0.clone();
        operation.execute_with_provenance(key, fingerprint, move |claim| handler(claim, message))
    }
}

/// A handler that writes in a transaction of the store's own database, begun for it and
/// handed back with its value: its writes commit with the record, or not at all (`T1`).
#[derive(Clone)]
pub(crate) struct InTransaction<H>(pub(crate) H);

impl<S, T, E, C, H, Fut> Calls<S, T, E, C> for InTransaction<H>
where
    S: TransactionalStore,
    T: Send + 'static,
    E: From<BoxError> + Send + 'static,
    C: Codec<T> + Clone,
    H: Fn(Claim, Message, S::Transaction) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(T, S::Transaction), E>> + Send + 'static,
{
    fn call(
        &self,
        operation: &OperationHandle<S, T, E, C>,
        key: String,
        fingerprint: Fingerprint,
        message: Message,
    ) -> impl Future<Output = Result<Answer<T>, Error<E>>> + Send {
        let handler = self.0.clone();
        let store = operation.coordinator().store().clone();
        operation.execute_in_transaction(key, fingerprint, move |claim| async move {
            // A transaction that cannot be begun is the action's failure: nothing was
            // written, the key is released, and the message is delivered again.
            let transaction = store.begin().await.map_err(E::from)?;
            handler(claim, message, transaction).await
        })
    }
}
