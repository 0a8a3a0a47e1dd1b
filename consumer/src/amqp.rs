//! Consumers of RabbitMQ (AMQP 0.9.1) on lapin: [`Consumer::run_amqp`].
//!
//! Each delivery is acknowledged (`basic.ack`) once its message's effect is recorded, handed
//! back (`basic.nack` with requeue, once the core's delay has passed) when its call recorded
//! nothing, and rejected without requeue (`basic.reject`, to the queue's dead-letter exchange
//! if it has one) when it can never succeed.
//!
//! Which delivery of a message this is comes from the `x-delivery-count` header, which a
//! quorum queue sets on every redelivery; a classic queue says only whether a message was
//! delivered before (`redelivered`), so there a message counts at most two deliveries and
//! [`Redelivery::max_deliveries`](idem_core::Redelivery::max_deliveries) above 2 is never
//! reached: use a quorum queue (or its own `x-delivery-limit`) to bound redeliveries.

use std::future::Future;

use idem::{BoxError, Claim, Codec, Ending, Store, TransactionalStore};
use idem_core::Disposition;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use lapin::types::AMQPValue;
use tokio::sync::watch;

use crate::batch::{BatchError, Batched};
use crate::consumer::{ConsumeReport, Consumer, InTransaction, Plain};
use crate::message::Message;
use crate::run::BrokerDelivery;

/// The header a quorum queue counts a message's earlier deliveries in.
pub const DELIVERY_COUNT_HEADER: &str = "x-delivery-count";

impl<S, T, E, C> Consumer<S, T, E, C>
where
    S: Store,
    T: Send + 'static,
    E: Send + 'static,
    C: Codec<T> + Clone,
{
    /// Consumes `deliveries` (a lapin consumer) with `handler` until the stream ends or
    /// `stop` resolves, then lets running handlers finish for the grace
    /// ([`shutdown_grace`](Self::shutdown_grace)) and reports.
    ///
    /// At most [`concurrency`](Self::concurrency) deliveries are handled at once; set the
    /// channel's prefetch (`basic_qos`) to the same number. After a stop, deliveries the
    /// broker had sent but that were not taken stay unacknowledged: close the channel (or
    /// cancel the consumer) and the broker delivers them again.
    pub async fn run_amqp<H, Fut>(
        &self,
        deliveries: lapin::Consumer,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> ConsumeReport
    where
        H: Fn(Claim, Message) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.run_deliveries(deliveries, Plain(handler), stop).await
    }

    /// As [`run_amqp`](Self::run_amqp), for a handler whose effect is writes in the store's own
    /// database: each delivery's handler gets a transaction of the store's (begun only for a
    /// delivery whose action runs) and hands it back with its value, and the writes commit
    /// together with the record, or not at all (MODEL.md `T1`): a redelivery after a lost
    /// lease, a crash between commit and ack, or a duplicate writes nothing twice. A
    /// transaction that cannot be begun is the handler's failure (`E::from`): nothing was
    /// written, and the message is delivered again.
    pub async fn run_amqp_in_transaction<H, Fut>(
        &self,
        deliveries: lapin::Consumer,
        handler: H,
        stop: impl Future<Output = ()>,
    ) -> ConsumeReport
    where
        S: TransactionalStore,
        E: From<BoxError>,
        H: Fn(Claim, Message, S::Transaction) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<(T, S::Transaction), E>> + Send + 'static,
    {
        self.run_deliveries(deliveries, InTransaction(handler), stop)
            .await
    }

    /// As [`run_amqp`](Self::run_amqp), with a handler of batches: the messages whose actions run
    /// together (up to [`concurrency`](Self::concurrency), gathered for at most
    /// [`batch_wait`](Self::batch_wait)) go to one call of `handler`, which returns one outcome
    /// per message in their order (`Result<T, E>`, or an [`Ending`] where a failure's effect
    /// may have begun). Each message is recorded and settled on its own: the successes are
    /// acknowledged, the failures delivered again (a partial batch failure), duplicates never
    /// reach a batch. A message the handler returned no outcome for, and every message of a
    /// batch whose handler panicked, is recorded as unknown and dead-lettered, never run
    /// again (rule 11).
    pub async fn run_amqp_batches<H, Fut, R>(
        &self,
        deliveries: lapin::Consumer,
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
        self.run_deliveries(deliveries, batched, stop).await
    }
}

impl BrokerDelivery for Delivery {
    fn take_message(&mut self) -> Message {
        Message {
            id: message_id(self).map(str::to_owned),
            body: std::mem::take(&mut self.data),
            delivery: delivery_number(self),
            headers: text_headers(self),
        }
    }

    async fn settle(
        self,
        disposition: Disposition,
        mut stopped: watch::Receiver<bool>,
    ) -> Result<(), BoxError> {
        match disposition {
            Disposition::Ack => self.ack(BasicAckOptions::default()).await?,
            Disposition::Redeliver { after } => {
                // RabbitMQ redelivers a nacked message at once: the delay is waited out here.
                if !*stopped.borrow() {
                    tokio::select! {
                        () = tokio::time::sleep(after) => {}
                        _ = stopped.changed() => {}
                    }
                }
                self.nack(BasicNackOptions {
                    multiple: false,
                    requeue: true,
                })
                .await?
            }
            Disposition::DeadLetter(reason) => {
                tracing::warn!(
                    reason = reason.name(),
                    message_id = message_id(&self).unwrap_or_default(),
                    delivery_tag = self.delivery_tag,
                    "message dead-lettered"
                );
                self.reject(BasicRejectOptions { requeue: false }).await?
            }
        };
        Ok(())
    }
}

/// The delivery's `message_id` property, if the producer set one.
fn message_id(delivery: &Delivery) -> Option<&str> {
    delivery
        .properties
        .message_id()
        .as_ref()
        .map(|id| id.as_str())
}

/// The delivery's headers whose values read as text: strings as they are (bytes not UTF-8
/// replaced), numbers, booleans and timestamps in decimal; tables, arrays, byte arrays,
/// decimals, floats and voids left out.
fn text_headers(delivery: &Delivery) -> Vec<(String, String)> {
    let Some(headers) = delivery.properties.headers().as_ref() else {
        return Vec::new();
    };
    headers
        .inner()
        .iter()
        .filter_map(|(name, value)| {
            let text = match value {
                AMQPValue::LongString(text) => {
                    String::from_utf8_lossy(text.as_bytes()).into_owned()
                }
                AMQPValue::ShortString(text) => text.as_str().to_owned(),
                AMQPValue::Boolean(b) => b.to_string(),
                AMQPValue::ShortShortInt(n) => n.to_string(),
                AMQPValue::ShortShortUInt(n) => n.to_string(),
                AMQPValue::ShortInt(n) => n.to_string(),
                AMQPValue::ShortUInt(n) => n.to_string(),
                AMQPValue::LongInt(n) => n.to_string(),
                AMQPValue::LongUInt(n) => n.to_string(),
                AMQPValue::LongLongInt(n) => n.to_string(),
                AMQPValue::Timestamp(n) => n.to_string(),
                _ => return None,
            };
            Some((name.as_str().to_owned(), text))
        })
        .collect()
}

/// Which delivery of its message `delivery` is: one more than the quorum queue's count of
/// earlier ones, or, without it, 2 if the broker says it was delivered before.
fn delivery_number(delivery: &Delivery) -> u32 {
    let counted = delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|headers| headers.inner().get(DELIVERY_COUNT_HEADER))
        .and_then(|value| match value {
            AMQPValue::ShortShortInt(n) => u32::try_from(*n).ok(),
            AMQPValue::ShortShortUInt(n) => Some(u32::from(*n)),
            AMQPValue::ShortInt(n) => u32::try_from(*n).ok(),
            AMQPValue::ShortUInt(n) => Some(u32::from(*n)),
            AMQPValue::LongInt(n) => u32::try_from(*n).ok(),
            AMQPValue::LongUInt(n) => Some(*n),
            AMQPValue::LongLongInt(n) => u32::try_from(*n).ok(),
            _ => None,
        });
    match counted {
        Some(earlier) => earlier.saturating_add(1),
        None if delivery.redelivered => 2,
        None => 1,
    }
}
