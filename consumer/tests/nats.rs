//! The JetStream consumer on the machine's NATS (MODEL.md, "Consumers", `C1`): a message
//! published twice runs once, a failure is delivered again by the server after the core's
//! delay until it succeeds, one that keeps failing is terminated, a refused one is terminated
//! without running, and a handler that runs past the consumer's `ack_wait` keeps its message
//! with progress acks, so the server never hands it to another delivery meanwhile.

mod support;

use std::time::Duration;

use idem::{MemoryStore, Options};
use idem_consumer::{ConsumeReport, Consumer};
use support::nats::Stream;
use support::{Shared, consumer, consumer_with, eventually, handler, quick, runs};
use tokio::sync::oneshot;

/// The server's shortest window for deduplicating publishes by `Nats-Msg-Id`.
const WINDOW: Duration = Duration::from_millis(100);

/// Runs `consumer` on the stream's durable consumer until `stop` is sent.
async fn running(
    stream: &Stream,
    consumer: &Consumer<MemoryStore, String, String>,
    seen: &Shared,
    ack_wait: Duration,
    max_deliver: i64,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<ConsumeReport>) {
    let (_pull, messages) = stream.consume(ack_wait, max_deliver, 8).await;
    let (stop, stopped) = oneshot::channel::<()>();
    let consumer = consumer.clone();
    let handler = handler(seen);
    let task = tokio::spawn(async move {
        let _pull = _pull;
        consumer
            .run_nats(messages, handler, async {
                let _ = stopped.await;
            })
            .await
    });
    (stop, task)
}

/// What the server says is left: messages not yet delivered, and delivered but unacknowledged.
async fn left(stream: &Stream) -> (u64, usize) {
    stream.left("idem").await
}

#[tokio::test]
async fn a_message_published_twice_runs_once_and_both_are_acknowledged() {
    // The server's shortest deduplication window, 100 ms, and the second publish after it:
    // the server lets it through, as it would a producer's retry after its window.
    let stream = Stream::create("duplicates", WINDOW).await;
    let seen = Shared::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running(&stream, &consumer, &seen, Duration::from_secs(30), -1).await;
    for i in 0..10 {
        let id = format!("order-{i}");
        stream.publish(Some(&id), "ok").await;
    }
    tokio::time::sleep(WINDOW * 2).await;
    for i in 0..10 {
        stream.publish(Some(&format!("order-{i}")), "ok").await;
    }
    eventually("20 messages acknowledged", async || {
        let report = consumer.report();
        report.executed + report.replayed == 20
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!((report.executed, report.replayed), (10, 10), "{report:?}");
    for i in 0..10 {
        assert_eq!(runs(&seen, &format!("order-{i}")).len(), 1);
    }
    eventually("nothing left", async || left(&stream).await == (0, 0)).await;
    stream.delete().await;
}

#[tokio::test]
async fn a_failed_message_is_delivered_again_by_the_server_until_it_succeeds() {
    let stream = Stream::create("retry", WINDOW).await;
    let seen = Shared::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running(&stream, &consumer, &seen, Duration::from_secs(30), -1).await;
    stream.publish(Some("flaky"), "fail-2").await;
    eventually("the third delivery acknowledged", async || {
        consumer.report().executed == 1
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    // The server numbered the deliveries; each failure was a nak with the core's delay.
    assert_eq!(runs(&seen, "flaky"), [1, 2, 3]);
    assert_eq!(report.redelivered, 2, "{report:?}");
    eventually("nothing left", async || left(&stream).await == (0, 0)).await;
    stream.delete().await;
}

#[tokio::test]
async fn a_message_that_keeps_failing_or_can_never_succeed_is_terminated() {
    let stream = Stream::create("terminated", WINDOW).await;
    let seen = Shared::default();
    let consumer = consumer(quick(3));
    let (stop, task) = running(&stream, &consumer, &seen, Duration::from_secs(30), -1).await;
    stream.publish(Some("doomed"), "fail-99").await;
    stream.publish(Some("order-1"), "ok").await;
    eventually("order-1 acknowledged", async || {
        consumer.report().executed == 1
    })
    .await;
    // After the server's window, so that the server does not drop it as a duplicate itself.
    tokio::time::sleep(WINDOW * 2).await;
    stream.publish(Some("order-1"), "another order").await;
    stream.publish(None, "ok").await;
    eventually("three terminated", async || {
        consumer.report().dead_lettered_total() == 3
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(runs(&seen, "doomed"), [1, 2, 3]);
    for reason in ["exhausted", "key-reuse", "no-key"] {
        assert_eq!(report.dead_lettered.get(reason), Some(&1), "{report:?}");
    }
    assert_eq!(runs(&seen, "order-1").len(), 1);
    assert!(runs(&seen, "").is_empty());
    eventually("nothing left", async || left(&stream).await == (0, 0)).await;
    stream.delete().await;
}

#[tokio::test]
async fn a_handler_past_the_ack_wait_keeps_its_message_with_progress_acks() {
    // `ack_wait` 1 s; the handler takes 3 s; the lease is 1 s, renewed every 300 ms, and so
    // are the progress acks. Without them the server would deliver the message again after a
    // second, to a call that finds the key held.
    let stream = Stream::create("progress", WINDOW).await;
    let seen = Shared::default();
    let options = Options::builder()
        .lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(300))
        .build()
        .unwrap();
    let consumer = consumer_with(options, quick(5));
    let (stop, task) = running(&stream, &consumer, &seen, Duration::from_secs(1), -1).await;
    stream.publish(Some("long"), "slow-3000").await;
    eventually("acknowledged", async || consumer.report().executed == 1).await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(runs(&seen, "long"), [1]);
    // One delivery, nothing else: no second one waited for the first and replayed it.
    assert_eq!(
        report.replayed + report.in_progress + report.redelivered,
        0,
        "{report:?}"
    );
    eventually("nothing left", async || left(&stream).await == (0, 0)).await;
    stream.delete().await;
}

#[tokio::test]
async fn a_chosen_header_with_another_value_is_key_reuse_and_the_same_value_a_replay() {
    let stream = Stream::create("headers", Duration::from_millis(100)).await;
    let seen = Shared::default();
    let consumer = consumer(quick(5)).fingerprint_headers(["amount"]);
    let (stop, task) = running(&stream, &consumer, &seen, Duration::from_secs(5), -1).await;
    stream
        .publish_with_headers(Some("pay-1"), "ok", &[("amount", "100"), ("trace", "a")])
        .await;
    eventually("the first run", async || consumer.report().executed == 1).await;
    // Past the server's duplicate window, the same amount with another trace: a replay;
    // another amount: key reuse.
    tokio::time::sleep(Duration::from_millis(150)).await;
    stream
        .publish_with_headers(Some("pay-1"), "ok", &[("amount", "100"), ("trace", "b")])
        .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    stream
        .publish_with_headers(Some("pay-1"), "ok", &[("amount", "200"), ("trace", "c")])
        .await;
    eventually("the replay and the refusal", async || {
        let report = consumer.report();
        report.replayed == 1 && report.dead_lettered_total() == 1
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(runs(&seen, "pay-1").len(), 1);
    assert_eq!(
        report.dead_lettered.get("key-reuse"),
        Some(&1),
        "{report:?}"
    );
    stream.delete().await;
}
