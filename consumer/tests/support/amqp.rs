//! The machine's RabbitMQ for the consumer tests: each test declares its own quorum queue and
//! dead-letter queue under unique names, which the broker removes a minute after they were
//! last used (`x-expires`) if the test did not get to delete them.

use std::sync::atomic::{AtomicU32, Ordering};

use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// Where the tests find RabbitMQ: `IDEM_AMQP_URL`, or the machine's service.
pub fn amqp_url() -> String {
    std::env::var("IDEM_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A queue of this test's own on the broker, with a dead-letter queue beside it.
pub struct Queues {
    pub connection: Connection,
    pub channel: Channel,
    pub queue: String,
    pub dead: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Queues {
    pub async fn declare(test: &str) -> Self {
        let url = amqp_url();
        let connection = Connection::connect(&url, ConnectionProperties::default())
            .await
            .unwrap_or_else(|error| {
                panic!("RabbitMQ does not answer at {url} ({error}): these tests need it")
            });
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let queue = format!("idem-test-{test}-{}-{n}", std::process::id());
        let dead = format!("{queue}-dead");
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        let mut expires = FieldTable::default();
        expires.insert("x-expires".into(), AMQPValue::LongInt(60_000));
        channel
            .queue_declare(dead.clone().into(), durable, expires.clone())
            .await
            .unwrap();
        let mut arguments = expires;
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString("quorum".into()),
        );
        arguments.insert(
            "x-dead-letter-exchange".into(),
            AMQPValue::LongString("".into()),
        );
        arguments.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(dead.clone().into()),
        );
        channel
            .queue_declare(queue.clone().into(), durable, arguments)
            .await
            .unwrap();
        Self {
            connection,
            channel,
            queue,
            dead,
        }
    }

    /// Publishes `body` with message id `id` (none if `None`), confirmed by the broker.
    pub async fn publish(&self, id: Option<&str>, body: &str) {
        self.publish_with_headers(id, body, &[]).await;
    }

    /// As [`publish`](Self::publish), with string `headers`.
    pub async fn publish_with_headers(
        &self,
        id: Option<&str>,
        body: &str,
        headers: &[(&str, &str)],
    ) {
        self.send(id, body, headers).await.await.unwrap();
    }

    /// Publishes `body` once under each of `ids`, in order, a thousand publishes in flight
    /// at a time, every one confirmed by the broker.
    pub async fn publish_many<'a>(&self, ids: impl IntoIterator<Item = &'a str>, body: &str) {
        let ids: Vec<&str> = ids.into_iter().collect();
        for chunk in ids.chunks(1_000) {
            let mut confirms = Vec::with_capacity(chunk.len());
            for id in chunk {
                confirms.push(self.send(Some(id), body, &[]).await);
            }
            for confirm in confirms {
                confirm.await.unwrap();
            }
        }
    }

    /// Sends one publish to the queue; the broker's confirm is the caller's to wait for.
    async fn send(
        &self,
        id: Option<&str>,
        body: &str,
        headers: &[(&str, &str)],
    ) -> lapin::PublisherConfirm {
        let mut properties = BasicProperties::default();
        if let Some(id) = id {
            properties = properties.with_message_id(ShortString::from(id));
        }
        if !headers.is_empty() {
            let mut table = FieldTable::default();
            for (name, value) in headers {
                table.insert((*name).into(), AMQPValue::LongString((*value).into()));
            }
            properties = properties.with_headers(table);
        }
        self.channel
            .basic_publish(
                "".into(),
                self.queue.clone().into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                properties,
            )
            .await
            .unwrap()
    }

    /// A consumer of the queue on a channel of its own, with a prefetch of `window`.
    pub async fn consume(&self, window: u16) -> (Channel, lapin::Consumer) {
        let channel = self.connection.create_channel().await.unwrap();
        channel
            .basic_qos(window, BasicQosOptions::default())
            .await
            .unwrap();
        let consumer = channel
            .basic_consume(
                self.queue.clone().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        (channel, consumer)
    }

    /// How many messages a queue holds (ready, not delivered).
    pub async fn count(&self, queue: &str) -> u32 {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        self.channel
            .queue_declare(queue.to_owned().into(), passive, FieldTable::default())
            .await
            .unwrap()
            .message_count()
    }

    pub async fn delete(self) {
        for queue in [&self.queue, &self.dead] {
            let _ = self
                .channel
                .queue_delete(queue.clone().into(), QueueDeleteOptions::default())
                .await;
        }
        let _ = self.connection.close(200, "done".into()).await;
    }
}
