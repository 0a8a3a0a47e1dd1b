//! Batch handlers on the machine's RabbitMQ and NATS (MODEL.md, "Consumers", batches): the
//! messages whose actions run together reach one handler call, each message's outcome is
//! recorded and settled on its own (the failures delivered again, the successes
//! acknowledged), duplicates never reach a batch, and a message the handler gave no outcome
//! for, or whose batch panicked, is dead-lettered as unknown and never run again.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::{BoxError, Claim, Coordinator, MemoryStore, Options};
use idem_consumer::{ConsumeReport, Consumer, Message, Redelivery};
use support::amqp::Queues;
use support::nats::Stream;
use support::{Shared, eventually, handler, quick, runs};
use tokio::sync::oneshot;

type Batches = Arc<Mutex<Vec<Vec<String>>>>;
type Outcomes = std::pin::Pin<Box<dyn Future<Output = Vec<Result<String, BoxError>>> + Send>>;

/// A consumer of `orders.ship` on a `MemoryStore` whose errors can say a batch gave no
/// outcome: 8 handlers, 5 s of grace, batches gathered for 100 ms.
fn consumer(redelivery: Redelivery) -> Consumer<MemoryStore, String, BoxError> {
    let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
    Consumer::new(coordinator.operation("orders.ship").unwrap())
        .redelivery(redelivery)
        .concurrency(8)
        .shutdown_grace(Duration::from_secs(5))
        .batch_wait(Duration::from_millis(100))
}

/// A batch handler that runs the tests' handler on each message in turn and records each
/// batch's message ids. A message whose body is `silent` and every one after it in its batch
/// get no outcome.
fn batch_handler(
    seen: &Shared,
    batches: &Batches,
) -> impl Fn(Vec<(Claim, Message)>) -> Outcomes + Clone + Send + Sync + 'static {
    let one = handler(seen);
    let batches = batches.clone();
    move |messages: Vec<(Claim, Message)>| {
        let one = one.clone();
        let batches = batches.clone();
        Box::pin(async move {
            batches.lock().unwrap().push(
                messages
                    .iter()
                    .map(|(_, message)| message.id.clone().unwrap_or_default())
                    .collect(),
            );
            let mut outcomes = Vec::new();
            for (claim, message) in messages {
                if message.body == b"silent" {
                    break;
                }
                outcomes.push(one(claim, message).await.map_err(BoxError::from));
            }
            outcomes
        })
    }
}

/// How many batches `id` was in.
fn batched(batches: &Batches, id: &str) -> usize {
    batches
        .lock()
        .unwrap()
        .iter()
        .filter(|batch| batch.iter().any(|each| each == id))
        .count()
}

/// Twelve orders, `order-5` failing its first run.
fn orders() -> impl Iterator<Item = (String, &'static str)> {
    (0..12).map(|i| (format!("order-{i}"), if i == 5 { "fail-1" } else { "ok" }))
}

/// Every order of [`orders`] in one batch and run once, but `order-5`: in two batches, run by
/// its first and second deliveries.
fn each_once_but_the_failure_twice(batches: &Batches, seen: &Shared) {
    for (id, _) in orders() {
        let expected = if id == "order-5" { 2 } else { 1 };
        assert_eq!(batched(batches, &id), expected, "{id}: {batches:?}");
        assert_eq!(runs(seen, &id).len(), expected, "{id}");
    }
    assert_eq!(runs(seen, "order-5"), [1, 2]);
}

fn largest(batches: &Batches) -> usize {
    batches
        .lock()
        .unwrap()
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
}

/// Runs `consumer` with batches on the queue until `stop` is sent.
async fn running_amqp(
    queues: &Queues,
    consumer: &Consumer<MemoryStore, String, BoxError>,
    seen: &Shared,
    batches: &Batches,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<ConsumeReport>) {
    let (channel, deliveries) = queues.consume(8).await;
    let (stop, stopped) = oneshot::channel::<()>();
    let consumer = consumer.clone();
    let handler = batch_handler(seen, batches);
    let task = tokio::spawn(async move {
        let _channel = channel;
        consumer
            .run_amqp_batches(deliveries, handler, async {
                let _ = stopped.await;
            })
            .await
    });
    (stop, task)
}

#[tokio::test]
async fn amqp_a_batch_acknowledges_its_successes_and_redelivers_its_failure_alone() {
    let queues = Queues::declare("batch-partial").await;
    let seen = Shared::default();
    let batches = Batches::default();
    let consumer = consumer(quick(5));
    // Published before the consumer starts, so that they come in one prefetch window.
    for (id, body) in orders() {
        queues.publish(Some(&id), body).await;
    }
    queues.publish(Some("order-3"), "ok").await;
    queues.publish(Some("order-7"), "ok").await;
    let (stop, task) = running_amqp(&queues, &consumer, &seen, &batches).await;
    eventually("every message recorded", async || {
        consumer.report().executed == 12
    })
    .await;
    eventually("the duplicates acknowledged", async || {
        consumer.report().replayed == 2
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert!(largest(&batches) > 1, "never batched: {batches:?}");
    // The failure was delivered again on its own, numbered by the quorum queue.
    each_once_but_the_failure_twice(&batches, &seen);
    assert_eq!(report.dead_lettered_total() + report.cut, 0, "{report:?}");
    assert_eq!(queues.count(&queues.queue).await, 0);
    assert_eq!(queues.count(&queues.dead).await, 0);
    queues.delete().await;
}

#[tokio::test]
async fn amqp_a_message_without_an_outcome_or_in_a_batch_that_panicked_is_never_run_again() {
    let queues = Queues::declare("batch-unknown").await;
    let seen = Shared::default();
    let batches = Batches::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running_amqp(&queues, &consumer, &seen, &batches).await;
    queues.publish(Some("quiet"), "silent").await;
    eventually("the message without an outcome dead-lettered", async || {
        queues.count(&queues.dead).await == 1
    })
    .await;
    queues.publish(Some("boom"), "panic").await;
    eventually("the panicked batch's message dead-lettered", async || {
        queues.count(&queues.dead).await == 2
    })
    .await;
    // Both published again: their records say unknown, and neither reaches a batch.
    queues.publish(Some("quiet"), "silent").await;
    queues.publish(Some("boom"), "panic").await;
    eventually("the republished ones dead-lettered", async || {
        queues.count(&queues.dead).await == 4
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(batched(&batches, "quiet"), 1, "{batches:?}");
    assert_eq!(batched(&batches, "boom"), 1, "{batches:?}");
    assert_eq!(runs(&seen, "boom").len(), 1);
    assert_eq!(
        report.dead_lettered.get("outcome-unknown"),
        Some(&4),
        "{report:?}"
    );
    queues.delete().await;
}

#[tokio::test]
async fn nats_a_batch_acknowledges_its_successes_and_naks_its_failure_alone() {
    let stream = Stream::create("batch-partial", Duration::from_millis(100)).await;
    let seen = Shared::default();
    let batches = Batches::default();
    let consumer = consumer(quick(5));
    for (id, body) in orders() {
        stream.publish(Some(&id), body).await;
    }
    // Past the server's duplicate window: a producer's retry that reaches the consumer.
    tokio::time::sleep(Duration::from_millis(200)).await;
    stream.publish(Some("order-3"), "ok").await;
    let (_pull, messages) = stream.consume(Duration::from_secs(5), -1, 8).await;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = {
        let consumer = consumer.clone();
        let handler = batch_handler(&seen, &batches);
        tokio::spawn(async move {
            consumer
                .run_nats_batches(messages, handler, async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    eventually(
        "every message recorded and the duplicate replayed",
        async || {
            let report = consumer.report();
            report.executed == 12 && report.replayed == 1
        },
    )
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert!(largest(&batches) > 1, "never batched: {batches:?}");
    // The failure was delivered again on its own, numbered by the server.
    each_once_but_the_failure_twice(&batches, &seen);
    assert_eq!(report.dead_lettered_total() + report.cut, 0, "{report:?}");
    stream.delete().await;
}
