//! The must-show of the consumers (MODEL.md `C1`): four processes of the orders example on one
//! queue or stream of 20,000 messages, every message published one to three times, one
//! process SIGKILLed every few hundred milliseconds and started again. Per message: one
//! shipment, except the extra ones a killed process explains (it shipped and died before its
//! record was complete, so the key was taken over after its lease: `I7`'s crashed holder);
//! with PostgreSQL's transactional mode, exactly one row per message and no extra at all.
//!
//! The consumers are this test binary itself, started again with the example's arguments in
//! `IDEM_ORDERS_ARGS` (hence `harness = false`). `IDEM_CONSUMER_MESSAGES` sets the number of
//! messages (20,000 by default).

#[allow(dead_code)]
#[path = "../examples/orders.rs"]
mod orders;
use idem_tests::process;
use idem_tests::redis as redis_server;
mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use clap::Parser;
use idem_tests::postgres::TestDb;
use process::{ExampleProcess, child_args, run_test, serve};
use rand::{Rng, SeedableRng};
use redis_server::RedisServer;
use support::amqp::Queues;
use support::nats::Stream;

const ORDERS: &str = "IDEM_ORDERS_ARGS";
const PROCESSES: usize = 4;

fn main() {
    if let Some(args) = child_args(ORDERS, "orders") {
        serve(async move {
            orders::run(orders::Args::parse_from(args))
                .await
                .map_err(|error| -> Box<dyn std::error::Error> { error })
        });
        return;
    }
    run_test("rabbitmq redis", killed(Broker::Amqp, Store::Redis));
    run_test("rabbitmq postgres", killed(Broker::Amqp, Store::Postgres));
    run_test("nats redis", killed(Broker::Nats, Store::Redis));
    run_test("nats postgres", killed(Broker::Nats, Store::Postgres));
    run_test("rabbitmq unprotected", caught(Broker::Amqp));
    run_test("nats unprotected", caught(Broker::Nats));
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broker {
    Amqp,
    Nats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Redis,
    Postgres,
    /// The same handler without idem (`--no-idempotency`): the broken consumer the checks
    /// must catch.
    Unprotected,
}

fn messages() -> usize {
    std::env::var("IDEM_CONSUMER_MESSAGES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

/// The broker side of one run: where the messages go, and whether they are all settled.
enum Source {
    Amqp(Box<Queues>),
    Nats(Box<Stream>),
}

impl Source {
    async fn new(broker: Broker) -> Self {
        match broker {
            Broker::Amqp => Source::Amqp(Box::new(Queues::declare("processes").await)),
            Broker::Nats => {
                let stream = Stream::create("processes", Duration::from_millis(100)).await;
                stream
                    .durable("orders", Duration::from_secs(2), -1, 256)
                    .await;
                Source::Nats(Box::new(stream))
            }
        }
    }

    /// Publishes each of `copies`' ids the given number of times, every publish confirmed.
    async fn publish(&self, copies: &[(String, u32)]) {
        let most = copies.iter().map(|(_, n)| *n).max().unwrap_or(0);
        match self {
            Source::Amqp(queues) => {
                let ids = copies
                    .iter()
                    .flat_map(|(id, n)| std::iter::repeat_n(id.as_str(), *n as usize));
                queues.publish_many(ids, "ship").await;
            }
            Source::Nats(stream) => {
                // Copies one window apart, so that the server lets them all through.
                for round in 0..most {
                    let ids = copies
                        .iter()
                        .filter(|(_, n)| round < *n)
                        .map(|(id, _)| id.as_str());
                    stream.publish_many(ids, "ship").await;
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
            }
        }
    }

    /// Whether every message the broker holds is settled.
    async fn drained(&self) -> bool {
        match self {
            // Ready messages only: unacknowledged ones come back when their channel closes,
            // which the end of the run checks again.
            Source::Amqp(queues) => queues.count(&queues.queue).await == 0,
            Source::Nats(stream) => stream.left("orders").await == (0, 0),
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Source::Amqp(queues) => vec![
                "--amqp".into(),
                support::amqp::amqp_url(),
                "--queue".into(),
                queues.queue.clone(),
            ],
            Source::Nats(stream) => vec![
                "--nats".into(),
                support::nats::nats_url(),
                "--stream".into(),
                stream.name.clone(),
            ],
        }
    }

    async fn delete(self) {
        match self {
            Source::Amqp(queues) => queues.delete().await,
            Source::Nats(stream) => stream.delete().await,
        }
    }
}

/// The store side of one run: where the shipments land, and how to read them.
enum Sink {
    Redis {
        /// The store's server; none for the consumer without idem.
        server: Option<RedisServer>,
        ledger: std::path::PathBuf,
    },
    Postgres {
        db: Box<TestDb>,
    },
}

impl Sink {
    async fn new(store: Store) -> Self {
        match store {
            Store::Redis | Store::Unprotected => {
                let server = (store == Store::Redis).then(RedisServer::start);
                let ledger = std::env::temp_dir().join(format!(
                    "idem-orders-{}-{}.ledger",
                    std::process::id(),
                    server.as_ref().map_or(0, |server| server.port)
                ));
                let _ = std::fs::remove_file(&ledger);
                Sink::Redis { server, ledger }
            }
            Store::Postgres => {
                let db = TestDb::create().await;
                let pool = db.pool(2).await;
                let store = idem_postgres::PostgresStore::builder().build(pool.clone());
                store.migrate().await.unwrap();
                sqlx::query(
                    "CREATE TABLE shipments (id bigserial PRIMARY KEY, message_id text NOT NULL, \
                     pid bigint NOT NULL)",
                )
                .execute(&pool)
                .await
                .unwrap();
                Sink::Postgres { db: Box::new(db) }
            }
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Sink::Redis { server, ledger } => {
                let store = match server {
                    Some(server) => {
                        vec![
                            "--redis".into(),
                            format!("redis://127.0.0.1:{}", server.port),
                        ]
                    }
                    None => vec!["--no-idempotency".into()],
                };
                [store, vec!["--ledger".into(), ledger.display().to_string()]].concat()
            }
            Sink::Postgres { db } => vec!["--postgres".into(), db.url()],
        }
    }

    /// Every shipment so far: message id, and the process that made it, in order.
    async fn shipments(&self) -> Vec<(String, u32)> {
        match self {
            Sink::Redis { ledger, .. } => std::fs::read_to_string(ledger)
                .unwrap_or_default()
                .lines()
                .filter_map(|line| {
                    let (id, pid) = line.split_once(' ')?;
                    Some((id.to_owned(), pid.parse().ok()?))
                })
                .collect(),
            Sink::Postgres { db } => {
                let pool = db.pool(1).await;
                let rows: Vec<(String, i64)> =
                    sqlx::query_as("SELECT message_id, pid FROM shipments ORDER BY id")
                        .fetch_all(&pool)
                        .await
                        .unwrap();
                pool.close().await;
                rows.into_iter()
                    .map(|(id, pid)| (id, u32::try_from(pid).unwrap()))
                    .collect()
            }
        }
    }
}

fn consumer(source: &Source, sink: &Sink) -> ExampleProcess {
    let mut args = source.args();
    args.extend(sink.args());
    args.extend([
        "--lease-ms".into(),
        "1000".into(),
        "--concurrency".into(),
        "8".into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ExampleProcess::start(ORDERS, &args, "orders on")
}

/// What one run left: the shipments per message, the extra ones no killed process explains,
/// and the processes' last reports.
struct Run {
    by_id: BTreeMap<String, Vec<u32>>,
    extra: usize,
    unexplained: Vec<(String, Vec<u32>)>,
    reports: Vec<String>,
}

/// Publishes `n` messages one to three times each, consumes them with four processes, one of
/// them SIGKILLed every 200 to 500 ms and started again until every message is shipped (at
/// most a minute), then stops them all gracefully once the broker has nothing left.
async fn run(broker: Broker, store: Store, n: usize) -> Run {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let copies: Vec<(String, u32)> = (0..n)
        .map(|i| (format!("order-{i:05}"), rng.random_range(1..=3)))
        .collect();
    let published: u32 = copies.iter().map(|(_, c)| c).sum();
    let source = Source::new(broker).await;
    let sink = Sink::new(store).await;
    source.publish(&copies).await;

    let started = Instant::now();
    let mut running: Vec<ExampleProcess> =
        (0..PROCESSES).map(|_| consumer(&source, &sink)).collect();
    let mut killed = HashSet::new();
    let shipped = |shipments: &[(String, u32)]| {
        shipments
            .iter()
            .map(|(id, _)| id.as_str())
            .collect::<HashSet<_>>()
            .len()
    };
    while started.elapsed() < Duration::from_secs(60) && shipped(&sink.shipments().await) < n {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..=500))).await;
        let victim = rng.random_range(0..PROCESSES);
        killed.insert(running[victim].id());
        running[victim] = consumer(&source, &sink);
    }
    // Then until every message is shipped and the broker has nothing left to deliver.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let shipments = sink.shipments().await;
        if shipped(&shipments) == n && source.drained().await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{broker:?}/{store:?}: {} of {n} shipped after {:?}",
            shipped(&shipments),
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A graceful stop of every process, each reporting what it did.
    for process in &running {
        process.signal("-TERM");
    }
    let reports: Vec<String> = running
        .iter()
        .map(|process| process.line(Duration::from_secs(30)))
        .collect();
    drop(running);
    let elapsed = started.elapsed();

    let shipments = sink.shipments().await;
    let all: HashSet<&str> = copies.iter().map(|(id, _)| id.as_str()).collect();
    assert!(shipments.iter().all(|(id, _)| all.contains(id.as_str())));
    let mut by_id: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (id, pid) in &shipments {
        by_id.entry(id.clone()).or_default().push(*pid);
    }
    let mut extra = 0;
    let mut unexplained = Vec::new();
    for (id, pids) in &by_id {
        let extras = pids.len() - 1;
        extra += extras;
        // A shipment followed by another of the same message is explained only if its
        // process was killed (after it shipped, before its record was complete): a process
        // that lived on completed its record, and nothing ships after a complete record.
        // The shipments are in the order they were made (the ledger's lines, the rows' ids).
        let superseded = &pids[..extras];
        if superseded.iter().any(|pid| !killed.contains(pid)) {
            unexplained.push((id.clone(), pids.clone()));
        }
    }
    println!(
        "{broker:?}/{store:?}: {n} messages, {published} published, {} shipments, {extra} \
         extra, {} unexplained by a killed process, {} processes killed, {elapsed:?}; last \
         reports: {reports:?}",
        shipments.len(),
        unexplained.len(),
        killed.len(),
    );
    if let Sink::Redis { ledger, .. } = &sink {
        let _ = std::fs::remove_file(ledger);
    }
    source.delete().await;
    Run {
        by_id,
        extra,
        unexplained,
        reports,
    }
}

/// With idem: every message shipped, each extra shipment explained by a killed process, none
/// at all with PostgreSQL's transaction; nothing dead-lettered or cut at the stop.
async fn killed(broker: Broker, store: Store) {
    let n = messages();
    let run = run(broker, store, n).await;
    assert_eq!(run.by_id.len(), n, "every message shipped");
    assert!(
        run.unexplained.is_empty(),
        "unexplained extra shipments: {:?}",
        run.unexplained
    );
    if store == Store::Postgres {
        assert_eq!(run.extra, 0, "a row committed with its record, once");
    }
    for report in &run.reports {
        assert!(report.starts_with("report "), "{report}");
        assert!(report.contains("dead-lettered=0"), "{report}");
        assert!(report.ends_with("cut=0"), "{report}");
    }
}

/// Without idem the same run ships the copies of a message as often as they are delivered,
/// by processes that were never killed: the check above must see it.
async fn caught(broker: Broker) {
    let n = messages().min(2_000);
    let run = run(broker, Store::Unprotected, n).await;
    assert_eq!(run.by_id.len(), n, "every message shipped");
    assert!(
        run.unexplained.len() > n / 10,
        "{} of {n} messages with extra shipments no kill explains",
        run.unexplained.len()
    );
}
