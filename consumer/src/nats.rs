//! Consumers of NATS JetStream on async-nats: [`Consumer::run_nats`].
//!
//! Each message is acknowledged (`+ACK`) once its effect is recorded, negatively acknowledged
//! with the core's delay (`-NAK` with a delay, which the server keeps) when its call recorded
//! nothing, and terminated (`+TERM`: never delivered again; the server publishes a
//! `MSG_TERMINATED` advisory) when it can never succeed. While a handler runs, the message is
//! kept alive with progress acks (`+WPI`) at the lease's renewal cadence, so the server does
//! not hand it to another consumer after its `ack_wait` while idem still holds its key: keep
//! the consumer's `ack_wait` above the coordinator's `renew_every`.
//!
//! The key is the `Nats-Msg-Id` header by default. Which delivery of a message this is comes
//! from the server's own count (the message's `delivered` metadata); a consumer's
//! `max_deliver` bounds it on the server's side too.

use std::future::Future;

use async_nats::jetstream;
use async_nats::jetstream::AckKind;
use idem::{BoxError, Claim, Codec, Ending, Store, TransactionalStore};
use idem_core::Disposition;
use tokio::sync::watch;

use crate::batch::{BatchError, Batched};
use crate::consumer::{ConsumeReport, Consumer, InTransaction, Plain};
use crate::message::Message;
use crate::run::BrokerDelivery;

/// The header a JetStream publisher names a message by.
pub const MESSAGE_ID_HEADER: &str = "Nats-Msg-Id";

impl<S, T, E, C> Consumer<S, T, E, C>
where
    S: Store,
    T: Send + 'static,
    E: Send + 'static,
    C: Codec<T> + Clone,
{
    /// Consumes `messages` (a pull consumer's stream, `consumer.messages().await?`) with
    /// `handler` until the stream ends or `stop` resolves, then lets running handlers finish
    /// for the grace ([`shutdown_grace`](Self::shutdown_grace)) and reports.
    ///
    /// At most [`concurrency`](Self::concurrency) messages are handled at once; match the
    /// consumer's `max_ack_pending` to it. After a stop, messages the stream had pulled but
    /// that were not taken are delivered again once their `ack_wait` runs out.
    pub async fn run_nats<H, Fut>(
        &self,
        messages: jetstream::consumer::pull::Stream,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> ConsumeReport
    where
        H: Fn(Claim, Message) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.run_deliveries(messages, Plain(handler), stop).await
    }

    /// As [`run_nats`](Self::run_nats), for a handler whose effect is writes in the store's own
    /// database: each delivery's handler gets a transaction of the store's (begun only for a
    /// delivery whose action runs) and hands it back with its value, and the writes commit
    /// together with the record, or not at all (MODEL.md `T1`): a redelivery after a lost
    /// lease, a crash between commit and ack, or a duplicate writes nothing twice. A
    /// transaction that cannot be begun is the handler's failure (`E::from`): nothing was
    /// written, and the message is delivered again.
    pub async fn run_nats_in_transaction<H, Fut>(
        &self,
        messages: jetstream::consumer::pull::Stream,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> ConsumeReport
    where
        S: TransactionalStore,
        E: From<BoxError>,
        H: Fn(Claim, Message, S::Transaction) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<(T, S::Transaction), E>> + Send + 'static,
    {
        self.run_deliveries(messages, InTransaction(handler), stop)
            .await
    }

    /// As [`run_nats`](Self::run_nats), with a handler of batches: the messages whose actions run
    /// together (up to [`concurrency`](Self::concurrency), gathered for at most
    /// [`batch_wait`](Self::batch_wait)) go to one call of `handler`, which returns one outcome
    /// per message in their order (`Result<T, E>`, or an [`Ending`] where a failure's effect
    /// may have begun). Each message is recorded and settled on its own: the successes are
    /// acknowledged, the failures delivered again (a partial batch failure), duplicates never
    /// reach a batch. A message the handler returned no outcome for, and every message of a
    /// batch whose handler panicked, is recorded as unknown and dead-lettered, never run
    /// again (rule 11).
    pub async fn run_nats_batches<H, Fut, R>(
        &self,
        messages: jetstream::consumer::pull::Stream,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> ConsumeReport
    where
        E: From<BatchError>,
        H: Fn(Vec<(Claim, Message)>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Vec<R>> + Send + 'static,
        R: Into<Ending<T, E>> + Send + 'static,
    {
        let batched = Batched::new(handler, self.concurrency, self.batch_wait);
        self.run_deliveries(messages, batched, stop).await
    }
}

impl BrokerDelivery for jetstream::Message {
    fn take_message(&mut self) -> Message {
        let delivery = self
            .info()
            .ok()
            .and_then(|info| u32::try_from(info.delivered).ok())
            .unwrap_or(1)
            .max(1);
        let id = message_id(self).map(str::to_owned);
        let headers = self
            .message
            .headers
            .iter()
            .flat_map(|headers| headers.iter())
            .flat_map(|(name, values)| {
                values
                    .iter()
                    .map(move |value| (name.to_string(), value.as_str().to_owned()))
            })
            .collect();
        Message {
            id,
            body: std::mem::take(&mut self.message.payload).into(),
            delivery,
            headers,
        }
    }

    async fn keep_alive(&self) {
        if let Err(error) = self.ack_with(AckKind::Progress).await {
            tracing::warn!(%error, "a progress ack was not sent");
        }
    }

    async fn settle(
        self,
        disposition: Disposition,
        _stopped: watch::Receiver<bool>,
    ) -> Result<(), BoxError> {
        let kind = match disposition {
            Disposition::Ack => AckKind::Ack,
            // The server keeps the delay: nothing is held here.
            Disposition::Redeliver { after } => AckKind::Nak(Some(after)),
            Disposition::DeadLetter(reason) => {
                tracing::warn!(
                    reason = reason.name(),
                    message_id = message_id(&self).unwrap_or_default(),
                    subject = %self.message.subject,
                    "message terminated"
                );
                AckKind::Term
            }
        };
        self.ack_with(kind).await?;
        Ok(())
    }
}

/// The message's `Nats-Msg-Id` header, if the publisher set one.
fn message_id(message: &jetstream::Message) -> Option<&str> {
    message
        .message
        .headers
        .as_ref()
        .and_then(|headers| headers.get(MESSAGE_ID_HEADER))
        .map(|id| id.as_str())
}
