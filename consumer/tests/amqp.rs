//! The RabbitMQ consumer on the machine's broker (MODEL.md, "Consumers", `C1`): duplicates
//! are acknowledged without running, a failure is delivered again until it succeeds or its
//! deliveries are spent, a message that can never succeed is dead-lettered with its reason,
//! a panic is never run again, and a stop lets running handlers finish and acknowledge.

mod support;

use idem::MemoryStore;
use idem_consumer::{ConsumeReport, Consumer};
use support::amqp::Queues;
use support::{Shared, consumer, eventually, handler, quick, runs};
use tokio::sync::oneshot;

/// Runs `consumer` on the queue until `stop` is sent.
async fn running(
    queues: &Queues,
    consumer: &Consumer<MemoryStore, String, String>,
    seen: &Shared,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<ConsumeReport>) {
    let (_channel, deliveries) = queues.consume(8).await;
    let (stop, stopped) = oneshot::channel::<()>();
    let consumer = consumer.clone();
    let handler = handler(seen);
    let task = tokio::spawn(async move {
        let _channel = _channel;
        consumer
            .run_amqp(deliveries, handler, async {
                let _ = stopped.await;
            })
            .await
    });
    (stop, task)
}

#[tokio::test]
async fn a_message_published_twice_runs_once_and_both_deliveries_are_acknowledged() {
    let queues = Queues::declare("duplicates").await;
    let seen = Shared::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running(&queues, &consumer, &seen).await;
    for i in 0..20 {
        let id = format!("order-{i}");
        queues.publish(Some(&id), "ok").await;
        queues.publish(Some(&id), "ok").await;
    }
    eventually("40 deliveries acknowledged", async || {
        let report = consumer.report();
        report.executed + report.replayed == 40
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(report.executed, 20, "{report:?}");
    assert_eq!(report.replayed, 20, "{report:?}");
    assert_eq!(report.dead_lettered_total() + report.cut, 0, "{report:?}");
    for i in 0..20 {
        assert_eq!(runs(&seen, &format!("order-{i}")).len(), 1);
    }
    assert_eq!(queues.count(&queues.queue).await, 0);
    queues.delete().await;
}

#[tokio::test]
async fn a_failed_message_is_delivered_again_until_it_succeeds() {
    let queues = Queues::declare("retry").await;
    let seen = Shared::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running(&queues, &consumer, &seen).await;
    queues.publish(Some("flaky"), "fail-2").await;
    eventually("the third delivery acknowledged", async || {
        consumer.report().executed == 1
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    // The failures released the key (I5), and each redelivery ran the handler again; the
    // quorum queue numbered the deliveries.
    assert_eq!(runs(&seen, "flaky"), [1, 2, 3]);
    assert_eq!(report.redelivered, 2, "{report:?}");
    assert_eq!(report.dead_lettered_total(), 0, "{report:?}");
    queues.delete().await;
}

#[tokio::test]
async fn a_message_that_keeps_failing_is_dead_lettered_once_its_deliveries_are_spent() {
    let queues = Queues::declare("exhausted").await;
    let seen = Shared::default();
    let consumer = consumer(quick(3));
    let (stop, task) = running(&queues, &consumer, &seen).await;
    queues.publish(Some("doomed"), "fail-99").await;
    eventually("dead-lettered", async || {
        consumer.report().dead_lettered_total() == 1
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(runs(&seen, "doomed"), [1, 2, 3]);
    assert_eq!(
        report.dead_lettered.get("exhausted"),
        Some(&1),
        "{report:?}"
    );
    assert_eq!(report.redelivered, 2, "{report:?}");
    eventually("in the dead-letter queue", async || {
        queues.count(&queues.dead).await == 1
    })
    .await;
    queues.delete().await;
}

#[tokio::test]
async fn a_message_that_can_never_succeed_is_dead_lettered_with_its_reason_and_never_runs() {
    let queues = Queues::declare("refused").await;
    let seen = Shared::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running(&queues, &consumer, &seen).await;
    queues.publish(Some("order-1"), "ok").await;
    eventually("the first acknowledged", async || {
        consumer.report().executed == 1
    })
    .await;
    // The same id for another body: key reuse (I4). No id: no key. An id the driver refuses
    // as a key (I12).
    queues.publish(Some("order-1"), "another order").await;
    queues.publish(None, "ok").await;
    queues.publish(Some("order 2"), "ok").await;
    eventually("three dead-lettered", async || {
        consumer.report().dead_lettered_total() == 3
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    for reason in ["key-reuse", "no-key", "invalid-key"] {
        assert_eq!(report.dead_lettered.get(reason), Some(&1), "{report:?}");
    }
    assert_eq!(runs(&seen, "order-1").len(), 1);
    assert!(runs(&seen, "").is_empty() && runs(&seen, "order 2").is_empty());
    eventually("in the dead-letter queue", async || {
        queues.count(&queues.dead).await == 3
    })
    .await;
    queues.delete().await;
}

#[tokio::test]
async fn a_panicked_message_is_dead_lettered_and_never_runs_again() {
    let queues = Queues::declare("panic").await;
    let seen = Shared::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running(&queues, &consumer, &seen).await;
    queues.publish(Some("boom"), "panic").await;
    eventually("dead-lettered", async || {
        consumer.report().dead_lettered_total() == 1
    })
    .await;
    // Published again: its record says the outcome is unknown (rule 11), so it is
    // dead-lettered without running.
    queues.publish(Some("boom"), "panic").await;
    eventually("dead-lettered again", async || {
        consumer.report().dead_lettered_total() == 2
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(runs(&seen, "boom").len(), 1);
    assert_eq!(
        report.dead_lettered.get("outcome-unknown"),
        Some(&2),
        "{report:?}"
    );
    queues.delete().await;
}

#[tokio::test]
async fn a_stop_lets_running_handlers_finish_and_acknowledge() {
    let queues = Queues::declare("stop").await;
    let seen = Shared::default();
    let consumer = consumer(quick(5));
    let (stop, task) = running(&queues, &consumer, &seen).await;
    for i in 0..3 {
        queues.publish(Some(&format!("slow-{i}")), "slow").await;
    }
    eventually("three handlers running", async || {
        seen.lock().unwrap().runs.len() == 3
    })
    .await;
    stop.send(()).unwrap();
    let report = task.await.unwrap();
    assert_eq!(report.executed, 3, "{report:?}");
    assert_eq!(report.cut, 0, "{report:?}");
    assert_eq!(queues.count(&queues.queue).await, 0);
    queues.delete().await;
}

#[tokio::test]
async fn a_chosen_header_with_another_value_is_key_reuse_and_the_same_value_a_replay() {
    let queues = Queues::declare("headers").await;
    let seen = Shared::default();
    let consumer = consumer(quick(5)).fingerprint_headers(["amount"]);
    let (stop, task) = running(&queues, &consumer, &seen).await;
    queues
        .publish_with_headers(Some("pay-1"), "ok", &[("amount", "100"), ("trace", "a")])
        .await;
    eventually("the first run", async || consumer.report().executed == 1).await;
    // The same amount with another trace: a replay. Another amount: key reuse.
    queues
        .publish_with_headers(Some("pay-1"), "ok", &[("amount", "100"), ("trace", "b")])
        .await;
    queues
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
    // The broker routes the rejected message to the dead-letter queue on its own time.
    eventually("the refused message in the dead-letter queue", async || {
        queues.count(&queues.dead).await == 1
    })
    .await;
    queues.delete().await;
}
