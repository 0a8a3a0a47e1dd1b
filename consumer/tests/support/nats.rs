//! The machine's NATS with JetStream for the consumer tests: each test makes its own stream
//! and durable pull consumer under unique names, and deletes the stream after.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, stream};

/// Where the tests find NATS: `IDEM_NATS_URL`, or the machine's service.
pub fn nats_url() -> String {
    std::env::var("IDEM_NATS_URL").unwrap_or_else(|_| "127.0.0.1:4222".to_owned())
}

pub struct Stream {
    pub js: jetstream::Context,
    pub stream: stream::Stream,
    pub name: String,
    pub subject: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Stream {
    /// A stream of this test's own. `duplicate_window` is the server's own deduplication of
    /// publishes by `Nats-Msg-Id`: a short one lets a second publish through, as a producer's
    /// retry after the window would.
    pub async fn create(test: &str, duplicate_window: Duration) -> Self {
        let url = nats_url();
        let client = async_nats::connect(&url).await.unwrap_or_else(|error| {
            panic!("NATS does not answer at {url} ({error}): these tests need it")
        });
        let js = jetstream::new(client);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("idem-test-{test}-{}-{n}", std::process::id());
        let subject = format!("idem.test.{test}.{}.{n}", std::process::id());
        let stream = js
            .create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![subject.clone()],
                duplicate_window,
                max_age: Duration::from_secs(600),
                ..stream::Config::default()
            })
            .await
            .unwrap_or_else(|error| panic!("JetStream refused the stream {name}: {error}"));
        Self {
            js,
            stream,
            name,
            subject,
        }
    }

    /// Publishes `body` with `Nats-Msg-Id` `id` (none if `None`), acknowledged by the server.
    pub async fn publish(&self, id: Option<&str>, body: &str) {
        self.publish_with_headers(id, body, &[]).await;
    }

    /// As [`publish`](Self::publish), with `headers` beside the id.
    pub async fn publish_with_headers(&self, id: Option<&str>, body: &str, more: &[(&str, &str)]) {
        self.send(id, body, more).await.await.unwrap();
    }

    /// Publishes `body` once under each of `ids` (as `Nats-Msg-Id`), in order, a thousand
    /// publishes in flight at a time, every one acknowledged by the server.
    pub async fn publish_many<'a>(&self, ids: impl IntoIterator<Item = &'a str>, body: &str) {
        let ids: Vec<&str> = ids.into_iter().collect();
        for chunk in ids.chunks(1_000) {
            let mut acks = Vec::with_capacity(chunk.len());
            for id in chunk {
                acks.push(self.send(Some(id), body, &[]).await);
            }
            for ack in acks {
                ack.await.unwrap();
            }
        }
    }

    /// Sends one publish to the stream's subject; the server's ack is the caller's to wait
    /// for.
    async fn send(
        &self,
        id: Option<&str>,
        body: &str,
        more: &[(&str, &str)],
    ) -> jetstream::context::PublishAckFuture {
        let mut headers = HeaderMap::new();
        if let Some(id) = id {
            headers.insert("Nats-Msg-Id", id);
        }
        for (name, value) in more {
            headers.insert(*name, *value);
        }
        self.js
            .publish_with_headers(self.subject.clone(), headers, body.to_owned().into())
            .await
            .unwrap()
    }

    /// A durable pull consumer of the stream and its messages.
    pub async fn consume(
        &self,
        ack_wait: Duration,
        max_deliver: i64,
        window: i64,
    ) -> (consumer::PullConsumer, consumer::pull::Stream) {
        let consumer = self.durable("idem", ack_wait, max_deliver, window).await;
        let messages = consumer.messages().await.unwrap();
        (consumer, messages)
    }

    /// Creates the durable pull consumer `name` of the stream: explicit acks, `ack_wait`,
    /// `max_deliver` (-1: no limit), at most `window` messages unacknowledged.
    pub async fn durable(
        &self,
        name: &str,
        ack_wait: Duration,
        max_deliver: i64,
        window: i64,
    ) -> consumer::PullConsumer {
        self.stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(name.to_owned()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait,
                max_deliver,
                max_ack_pending: window,
                ..consumer::pull::Config::default()
            })
            .await
            .unwrap()
    }

    /// What the durable consumer `name` has left: not yet delivered, and delivered but not
    /// acknowledged.
    pub async fn left(&self, name: &str) -> (u64, usize) {
        let mut pull: consumer::PullConsumer = self.stream.get_consumer(name).await.unwrap();
        let info = pull.info().await.unwrap();
        (info.num_pending, info.num_ack_pending)
    }

    pub async fn delete(self) {
        let _ = self.js.delete_stream(&self.name).await;
    }
}
