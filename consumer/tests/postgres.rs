//! Effectively once with PostgreSQL (MODEL.md `C1` with `T1`): a RabbitMQ consumer whose
//! handler writes its message's row in a transaction of the store's database, which commits
//! with the record. Every message published twice, one whose first run fails after its write:
//! exactly one row per message, the failed run's write rolled back, the duplicate written
//! nothing.

mod support;

use std::time::Duration;

use idem::{BoxError, Coordinator, Options};
use idem_consumer::Consumer;
use idem_postgres::{PostgresStore, RecordTransaction};
use idem_tests::postgres::TestDb;
use support::amqp::Queues;
use support::{eventually, quick};
use tokio::sync::oneshot;

#[tokio::test]
async fn each_message_writes_exactly_one_row_however_often_it_is_delivered() {
    let db = TestDb::create().await;
    let pool = db.pool(8).await;
    let store = PostgresStore::builder().build(pool.clone());
    store.migrate().await.unwrap();
    sqlx::query("CREATE TABLE shipments (id bigserial PRIMARY KEY, message_id text NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let orders = Coordinator::new(store, Options::default())
        .operation::<i64, BoxError>("orders.ship")
        .unwrap();
    let consumer = Consumer::new(orders)
        .redelivery(quick(5))
        .concurrency(8)
        .shutdown_grace(Duration::from_secs(5));

    let queues = Queues::declare("transactional").await;
    let (channel, deliveries) = queues.consume(8).await;
    let (stop, stopped) = oneshot::channel::<()>();
    let running = {
        let consumer = consumer.clone();
        tokio::spawn(async move {
            let _channel = channel;
            consumer
                .run_amqp_in_transaction(
                    deliveries,
                    |_claim, message, mut tx: RecordTransaction| async move {
                        let id = message.id.clone().unwrap_or_default();
                        let row: i64 = sqlx::query_scalar(
                            "INSERT INTO shipments (message_id) VALUES ($1) RETURNING id",
                        )
                        .bind(&id)
                        .fetch_one(&mut *tx)
                        .await?;
                        // Its first delivery fails after the write: the write rolls back.
                        if message.body == b"fail-after-write" && message.delivery == 1 {
                            return Err("the carrier refused, after the row was written".into());
                        }
                        Ok((row, tx))
                    },
                    async {
                        let _ = stopped.await;
                    },
                )
                .await
        })
    };
    for i in 0..20 {
        let id = format!("order-{i}");
        queues.publish(Some(&id), "ship").await;
        queues.publish(Some(&id), "ship").await;
    }
    queues.publish(Some("order-x"), "fail-after-write").await;
    eventually("every delivery acknowledged", async || {
        let report = consumer.report();
        report.executed + report.replayed == 41
    })
    .await;
    stop.send(()).unwrap();
    let report = running.await.unwrap();
    assert_eq!(report.executed, 21, "{report:?}");
    assert_eq!(report.replayed, 20, "{report:?}");
    assert_eq!(report.redelivered, 1, "{report:?}");
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT message_id, count(*) FROM shipments GROUP BY message_id ORDER BY message_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 21);
    assert!(rows.iter().all(|(_, n)| *n == 1), "{rows:?}");
    queues.delete().await;
}
