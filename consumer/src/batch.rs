//! Batches: one handler call for the messages whose actions run together, with an outcome per
//! message (MODEL.md, "Consumers", batches).
//!
//! Every delivery is still a call under its own message's key: a duplicate, or a message whose
//! key another delivery holds, never reaches a batch, and each message's outcome is recorded,
//! acknowledged or redelivered on its own, so a batch in which one message fails redelivers
//! that one alone (a partial batch failure). A batch gathers the messages whose reservations
//! were granted: the first waits at most the consumer's
//! [`batch_wait`](crate::Consumer::batch_wait) for others, and a batch closes sooner once it
//! holds [`concurrency`](crate::Consumer::concurrency) messages, as many as run at once.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use idem::{Answer, Claim, Codec, Ending, Error, OperationHandle, Store};
use idem_core::Fingerprint;
use tokio::sync::{Notify, oneshot};

use crate::consumer::Calls;
use crate::message::Message;

/// Why a message of a batch ended with its effect unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The batch handler returned fewer outcomes than it was given messages: whether the
    /// handler acted on this one is unknown, so it is recorded as unknown and not run again
    /// (rule 11).
    #[error("the batch handler returned no outcome for this message")]
    NoOutcome,
    /// The batch handler panicked: its effect on every message of the batch is unknown.
    #[error("the batch handler panicked")]
    Panicked,
}

/// A message of a batch whose action waits for the batch's outcome.
struct Waiting<T, E> {
    claim: Claim,
    message: Message,
    outcome: oneshot::Sender<Ending<T, E>>,
}

/// The batch being gathered.
struct Gathering<T, E> {
    messages: Vec<Waiting<T, E>>,
    /// Wakes the batch's first message, which runs it, once the batch is full.
    full: Arc<Notify>,
}

/// The handler of batches as the calls of a consumer: each message's action joins the batch
/// being gathered, and the first one's runs the handler for all of them.
pub(crate) struct Batched<H, T, E> {
    handler: H,
    largest: usize,
    wait: Duration,
    gathering: Arc<Mutex<Option<Gathering<T, E>>>>,
}

impl<H: Clone, T, E> Clone for Batched<H, T, E> {
    fn clone(&self) -> Self {
        Self {
            handler: self.handler.clone(),
            largest: self.largest,
            wait: self.wait,
            gathering: Arc::clone(&self.gathering),
        }
    }
}

impl<H, T, E> Batched<H, T, E> {
    pub(crate) fn new(handler: H, largest: usize, wait: Duration) -> Self {
        Self {
            handler,
            largest: largest.max(1),
            wait,
            gathering: Arc::new(Mutex::new(None)),
        }
    }
}

impl<H, Fut, R, T, E> Batched<H, T, E>
where
    H: Fn(Vec<(Claim, Message)>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Vec<R>> + Send + 'static,
    R: Into<Ending<T, E>> + Send + 'static,
    T: Send + 'static,
    E: From<BatchError> + Send + 'static,
{
    /// One message's action: it joins the batch and ends with the batch's outcome for it.
    async fn join(self, claim: Claim, message: Message) -> Ending<T, E> {
        let (outcome, told) = oneshot::channel();
        let waiting = Waiting {
            claim,
            message,
            outcome,
        };
        let first = {
            let mut gathering = self.gathering.lock().unwrap_or_else(|poisoned| {
                // Nothing is left half-written under this lock: a panic elsewhere while
                // it was held leaves a batch that is whole.
                poisoned.into_inner()
            });
            match gathering.as_mut() {
                Some(batch) => {
                    batch.messages.push(waiting);
                    if batch.messages.len() >= self.largest {
                        batch.full.notify_one();
                    }
                    None
                }
                None => {
                    let full = Arc::new(Notify::new());
                    *gathering = Some(Gathering {
                        messages: vec![waiting],
                        full: Arc::clone(&full),
                    });
                    Some(full)
                }
            }
        };
        if let Some(full) = first {
            self.run(full).await;
        }
        told.await
            .unwrap_or_else(|_| Ending::Unknown(E::from(BatchError::Panicked)))
    }

    /// Waits for the batch to fill or its time to pass, then runs the handler on it and
    /// hands each message its outcome.
    async fn run(&self, full: Arc<Notify>) {
        if self.largest > 1 {
            let _ = tokio::time::timeout(self.wait, full.notified()).await;
        }
        let batch = self
            .gathering
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some(batch) = batch else { return };
        let mut outcomes = Vec::with_capacity(batch.messages.len());
        let mut messages = Vec::with_capacity(batch.messages.len());
        for waiting in batch.messages {
            outcomes.push(waiting.outcome);
            messages.push((waiting.claim, waiting.message));
        }
        let given = messages.len();
        let ended = AssertUnwindSafe((self.handler)(messages))
            .catch_unwind()
            .await;
        let Ok(ended) = ended else {
            tracing::error!(
                messages = given,
                "the batch handler panicked: every message of its batch is recorded as unknown"
            );
            // Dropping the senders ends every action `Unknown(Panicked)`.
            return;
        };
        if ended.len() != given {
            tracing::error!(
                given,
                returned = ended.len(),
                "the batch handler returned another number of outcomes than it was given messages"
            );
        }
        let mut ended = ended.into_iter();
        for outcome in outcomes {
            let ending = ended.next().map_or_else(
                || Ending::Unknown(E::from(BatchError::NoOutcome)),
                Into::into,
            );
            // A message whose call has gone away (its delivery cut at a stop) takes its
            // outcome nowhere; its record is the driver's to finish.
            let _ = outcome.send(ending);
        }
    }
}

impl<S, T, E, C, H, Fut, R> Calls<S, T, E, C> for Batched<H, T, E>
where
    S: Store,
    T: Send + 'static,
    E: From<BatchError> + Send + 'static,
    C: Codec<T> + Clone,
    H: Fn(Vec<(Claim, Message)>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Vec<R>> + Send + 'static,
    R: Into<Ending<T, E>> + Send + 'static,
{
    fn call(
        &self,
        operation: &OperationHandle<S, T, E, C>,
        key: String,
        fingerprint: Fingerprint,
        message: Message,
    ) -> impl Future<Output = Result<Answer<T>, Error<E>>> + Send {
        let batched = self.clone();
        operation.execute_with_ending(key, fingerprint, move |claim| batched.join(claim, message))
    }
}
