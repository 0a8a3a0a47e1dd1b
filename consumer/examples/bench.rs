//! Messages per second through the idem consumer against the same consumer without idem, on
//! the same broker in the same run (BENCHMARKS.md, "Consumers").
//!
//! ```text
//! cargo run -p idem-consumer --release --example bench -- \
//!     [--messages 20000] [--concurrency 64] [--rounds 3] \
//!     [--redis redis://127.0.0.1:6379] [--postgres postgres://postgres@127.0.0.1:5432/postgres]
//! ```
//!
//! For each broker (RabbitMQ at `IDEM_AMQP_URL`, NATS JetStream at `IDEM_NATS_URL`, the
//! machine's services by default) and each round, five phases, each on a queue or stream of
//! its own holding `--messages` messages published beforehand (publishing is not timed):
//!
//! - `bare`: the consumer without idem. Up to `--concurrency` deliveries at once, each runs
//!   the handler (an in-memory effect: a counter) and is acknowledged.
//! - `memory`: the idem consumer on the in-process `MemoryStore`: what the consumer itself
//!   costs (keys, fingerprints, the attempt, its slots), without a store's round trips.
//! - `idem`: [`Consumer::run_amqp`] / [`Consumer::run_nats`] on the Redis store, the same
//!   handler and the same concurrency: a reserve and a complete on Redis per message.
//! - `tx_bare`: the handler's write without idem: `BEGIN`, an `INSERT`, `COMMIT`, then the ack.
//! - `tx_idem`: the same `INSERT` through the `_in_transaction` runners on PostgreSQL's
//!   transactional mode, committing with the message's record.
//!
//! A phase's time runs from the consumer's start to its return once every message is
//! acknowledged; the prefetch (AMQP) and `max_ack_pending` (JetStream) equal the concurrency.
//! The phases take turns within a round, so that the shared machine's load weighs on each
//! alike; what a run reports is each round's rates and the ratios within it.

#[allow(dead_code)]
#[path = "../tests/support/amqp.rs"]
mod amqp_support;
#[allow(dead_code)]
#[path = "../tests/support/nats.rs"]
mod nats_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use idem::{BoxError, Claim, Coordinator, MemoryStore, Options};
use idem_consumer::{Consumer, Message};
use idem_postgres::{PostgresStore, RecordTransaction};
use idem_redis::RedisStore;
use idem_tests::postgres::TestDb;
use sqlx::PgPool;
use tokio::sync::{Notify, Semaphore};

use amqp_support::Queues;
use nats_support::Stream;

/// The command line.
#[derive(Debug, Parser)]
struct Args {
    /// Messages per phase.
    #[arg(long, default_value_t = 20_000)]
    messages: u64,
    /// Deliveries handled at once (the prefetch, and JetStream's `max_ack_pending`).
    #[arg(long, default_value_t = 64)]
    concurrency: u16,
    /// Rounds of the phases.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// The Redis server for the `idem` phase.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The PostgreSQL server on which the run makes (and drops) a database of its own.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    postgres: String,
    /// Only this broker (`amqp` or `nats`); both by default.
    #[arg(long, value_parser = ["amqp", "nats"])]
    broker: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broker {
    Amqp,
    Nats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Bare,
    Memory,
    Idem,
    TxBare,
    TxIdem,
}

const PHASES: [Phase; 5] = [
    Phase::Bare,
    Phase::Memory,
    Phase::Idem,
    Phase::TxBare,
    Phase::TxIdem,
];

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Bare => "bare",
            Phase::Memory => "memory",
            Phase::Idem => "idem",
            Phase::TxBare => "tx_bare",
            Phase::TxIdem => "tx_idem",
        }
    }
}

/// The messages of one phase, on the broker: published, waiting to be consumed.
enum Source {
    Amqp(Box<Queues>),
    Nats(Box<Stream>),
}

impl Source {
    async fn fill(broker: Broker, ids: &[String]) -> Self {
        let ids = ids.iter().map(String::as_str);
        match broker {
            Broker::Amqp => {
                let queues = Queues::declare("bench").await;
                queues.publish_many(ids, "order").await;
                Source::Amqp(Box::new(queues))
            }
            Broker::Nats => {
                let stream = Stream::create("bench", Duration::from_secs(1)).await;
                stream.publish_many(ids, "order").await;
                Source::Nats(Box::new(stream))
            }
        }
    }

    async fn delete(self) {
        match self {
            Source::Amqp(queues) => queues.delete().await,
            Source::Nats(stream) => stream.delete().await,
        }
    }
}

/// Counts handled messages and says when the last of `n` is in.
struct Done {
    n: u64,
    count: AtomicU64,
    all: Notify,
}

impl Done {
    fn new(n: u64) -> Arc<Self> {
        Arc::new(Self {
            n,
            count: AtomicU64::new(0),
            all: Notify::new(),
        })
    }

    fn one(&self) {
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.all.notify_one();
        }
    }

    async fn wait(&self) {
        if self.count.load(Ordering::Acquire) < self.n {
            self.all.notified().await;
        }
    }
}

/// What a phase needs besides its messages.
struct Stores {
    redis: RedisStore,
    postgres: PostgresStore,
    pool: PgPool,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let db = TestDb::create_on(&args.postgres).await;
    let pool = db.pool(u32::from(args.concurrency)).await;
    sqlx::query("CREATE TABLE orders (message_id text PRIMARY KEY)")
        .execute(&pool)
        .await?;
    let postgres = PostgresStore::builder()
        .max_connections(8)
        .transaction_connections(u32::from(args.concurrency))
        .connect(&db.url())
        .await?;
    postgres.migrate().await?;
    let stores = Stores {
        redis: RedisStore::connect(&args.redis).await?,
        postgres,
        pool,
    };
    println!(
        "{} messages per phase, concurrency {}, {} rounds",
        args.messages, args.concurrency, args.rounds
    );
    for broker in [Broker::Amqp, Broker::Nats] {
        let name = if broker == Broker::Amqp {
            "amqp"
        } else {
            "nats"
        };
        if args.broker.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        let mut rates: Vec<[f64; 5]> = Vec::new();
        for round in 0..args.rounds {
            let mut rate = [0.0; 5];
            let mut cpu = [0.0; 5];
            let mut redis_cpu = 0.0;
            for (i, phase) in PHASES.into_iter().enumerate() {
                let ids: Vec<String> = (0..args.messages)
                    .map(|n| {
                        format!(
                            "{}-{broker:?}-{round}-{}-{n}",
                            std::process::id(),
                            phase.name()
                        )
                    })
                    .collect();
                let source = Source::fill(broker, &ids).await;
                let (own, server) = (own_cpu(), redis_cpu_of(&args.redis).await);
                let elapsed = consume(&args, &stores, &source, phase).await?;
                let per_message = |seconds: f64| seconds * 1e6 / args.messages as f64;
                cpu[i] = per_message(own_cpu() - own);
                if phase == Phase::Idem {
                    redis_cpu = per_message(redis_cpu_of(&args.redis).await - server);
                }
                source.delete().await;
                rate[i] = args.messages as f64 / elapsed.as_secs_f64();
            }
            println!(
                "{broker:?} round {round}: CPU per message (µs): consumer bare {:.1}, memory \
                 {:.1}, idem {:.1} + Redis server {redis_cpu:.1}, tx_bare {:.1}, tx_idem {:.1}",
                cpu[0], cpu[1], cpu[2], cpu[3], cpu[4]
            );
            println!(
                "{broker:?} round {round}: bare {:.0}/s, memory {:.0}/s ({:.2}), idem {:.0}/s \
                 ({:.2}), tx_bare {:.0}/s, tx_idem {:.0}/s ({:.2})",
                rate[0],
                rate[1],
                rate[1] / rate[0],
                rate[2],
                rate[2] / rate[0],
                rate[3],
                rate[4],
                rate[4] / rate[3]
            );
            rates.push(rate);
        }
        let span = |f: &dyn Fn(&[f64; 5]) -> f64| {
            let values: Vec<f64> = rates.iter().map(f).collect();
            let low = values.iter().copied().fold(f64::INFINITY, f64::min);
            let high = values.iter().copied().fold(0.0, f64::max);
            format!("{low:.2}-{high:.2}")
        };
        println!(
            "{broker:?}: memory/bare {}, idem/bare {}, tx_idem/tx_bare {}",
            span(&|r| r[1] / r[0]),
            span(&|r| r[2] / r[0]),
            span(&|r| r[4] / r[3])
        );
    }
    drop(stores);
    drop(db);
    Ok(())
}

/// This process's CPU time so far, in seconds (user and system, from `/proc/self/stat`;
/// 0 where there is none).
fn own_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The fields after the command's closing parenthesis: utime and stime are the 12th and
    // 13th, in clock ticks (100 per second on Linux).
    let Some((_, fields)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let ticks: Vec<f64> = fields
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse().ok())
        .collect();
    ticks.iter().sum::<f64>() / 100.0
}

/// The Redis server's CPU time so far, in seconds (`INFO cpu`; 0 if it does not answer).
async fn redis_cpu_of(url: &str) -> f64 {
    let Ok(client) = redis::Client::open(url) else {
        return 0.0;
    };
    let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
        return 0.0;
    };
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut connection)
        .await
        .unwrap_or_default();
    info.lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// Consumes every message of `source` in `phase`; how long it took.
async fn consume(
    args: &Args,
    stores: &Stores,
    source: &Source,
    phase: Phase,
) -> Result<Duration, BoxError> {
    let done = Done::new(args.messages);
    let window = args.concurrency;
    let concurrency = usize::from(window);
    let options = Options::builder()
        .retention(Duration::from_secs(600))
        .build()?;
    let started = Instant::now();
    match phase {
        Phase::Bare | Phase::TxBare => {
            let pool = (phase == Phase::TxBare).then(|| stores.pool.clone());
            bare(source, window, pool, &done).await?;
        }
        Phase::Memory => {
            let operation = Coordinator::new(MemoryStore::new(), options)
                .operation::<(), BoxError>("bench.order")?;
            plain(
                Consumer::new(operation).concurrency(concurrency),
                source,
                window,
                &done,
            )
            .await?;
        }
        Phase::Idem => {
            let operation = Coordinator::new(stores.redis.clone(), options)
                .operation::<(), BoxError>("bench.order")?;
            plain(
                Consumer::new(operation).concurrency(concurrency),
                source,
                window,
                &done,
            )
            .await?;
        }
        Phase::TxIdem => {
            let operation = Coordinator::new(stores.postgres.clone(), options)
                .operation::<(), BoxError>("bench.order")?;
            let consumer = Consumer::new(operation).concurrency(concurrency);
            let handled = Arc::clone(&done);
            let handler = move |_claim: Claim, message: Message, mut tx: RecordTransaction| {
                let handled = Arc::clone(&handled);
                async move {
                    sqlx::query("INSERT INTO orders (message_id) VALUES ($1)")
                        .bind(message.id.unwrap_or_default())
                        .execute(&mut *tx)
                        .await?;
                    handled.one();
                    Ok::<_, BoxError>(((), tx))
                }
            };
            let report = match source {
                Source::Amqp(queues) => {
                    let (_channel, deliveries) = queues.consume(window).await;
                    consumer
                        .run_amqp_in_transaction(deliveries, handler, done.wait())
                        .await
                }
                Source::Nats(stream) => {
                    let (_pull, messages) = nats_consumer(stream, window).await;
                    consumer
                        .run_nats_in_transaction(messages, handler, done.wait())
                        .await
                }
            };
            check(report.executed, args.messages)?;
        }
    }
    Ok(started.elapsed())
}

/// Consumes every message of `source` with `consumer`, the handler an in-memory counter.
async fn plain<S: idem::Store>(
    consumer: Consumer<S, (), BoxError>,
    source: &Source,
    window: u16,
    done: &Arc<Done>,
) -> Result<(), BoxError> {
    let handled = Arc::clone(done);
    let handler = move |_claim: Claim, _message: Message| {
        let handled = Arc::clone(&handled);
        async move {
            handled.one();
            Ok::<(), BoxError>(())
        }
    };
    let report = match source {
        Source::Amqp(queues) => {
            let (_channel, deliveries) = queues.consume(window).await;
            consumer.run_amqp(deliveries, handler, done.wait()).await
        }
        Source::Nats(stream) => {
            let (_pull, messages) = nats_consumer(stream, window).await;
            consumer.run_nats(messages, handler, done.wait()).await
        }
    };
    check(report.executed, done.n)
}

/// Every message ran once: the phase measured what it says.
fn check(executed: u64, messages: u64) -> Result<(), BoxError> {
    if executed == messages {
        Ok(())
    } else {
        Err(format!("{executed} of {messages} messages executed").into())
    }
}

async fn nats_consumer(
    stream: &Stream,
    window: u16,
) -> (
    async_nats::jetstream::consumer::PullConsumer,
    async_nats::jetstream::consumer::pull::Stream,
) {
    let pull = stream
        .durable("bench", Duration::from_secs(30), -1, i64::from(window))
        .await;
    let messages = pull.messages().await.expect("the consumer's messages");
    (pull, messages)
}

/// A delivery's acknowledgement, whatever the broker.
type Ack = std::pin::Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

/// The consumer without idem: up to `window` deliveries at once, each handled (the counter,
/// or with `pool` the same `INSERT` in a transaction of its own) and then acknowledged.
async fn bare(
    source: &Source,
    window: u16,
    pool: Option<PgPool>,
    done: &Arc<Done>,
) -> Result<(), BoxError> {
    let slots = Arc::new(Semaphore::new(usize::from(window)));
    let mut tasks = tokio::task::JoinSet::new();
    let handle = move |pool: Option<PgPool>, id: String| async move {
        if let Some(pool) = pool {
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO orders (message_id) VALUES ($1)")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok::<(), BoxError>(())
    };
    // Each broker's deliveries as one stream of (message id, its ack); the channel (or pull
    // consumer) is kept until every ack is sent.
    let mut channel = None;
    let mut pull = None;
    let mut deliveries: futures::stream::BoxStream<'static, Result<(String, Ack), BoxError>> =
        match source {
            Source::Amqp(queues) => {
                let (open, deliveries) = queues.consume(window).await;
                channel = Some(open);
                deliveries
                    .map(|delivery| {
                        let delivery = delivery?;
                        let id = delivery
                            .properties
                            .message_id()
                            .as_ref()
                            .map(|id| id.to_string())
                            .unwrap_or_default();
                        let ack: Ack = Box::pin(async move {
                            delivery
                                .ack(lapin::options::BasicAckOptions::default())
                                .await?;
                            Ok(())
                        });
                        Ok((id, ack))
                    })
                    .boxed()
            }
            Source::Nats(stream) => {
                let (durable, messages) = nats_consumer(stream, window).await;
                pull = Some(durable);
                messages
                    .map(|message| {
                        let message = message?;
                        let id = message
                            .headers
                            .as_ref()
                            .and_then(|headers| headers.get("Nats-Msg-Id"))
                            .map(|id| id.to_string())
                            .unwrap_or_default();
                        let ack: Ack = Box::pin(async move { message.ack().await });
                        Ok((id, ack))
                    })
                    .boxed()
            }
        };
    let mut taken = 0;
    while taken < done.n {
        let Some(delivery) = deliveries.next().await else {
            break;
        };
        let (id, ack) = delivery?;
        taken += 1;
        let slot = Arc::clone(&slots).acquire_owned().await?;
        let (pool, done) = (pool.clone(), Arc::clone(done));
        tasks.spawn(async move {
            handle(pool, id).await?;
            ack.await?;
            done.one();
            drop(slot);
            Ok::<(), BoxError>(())
        });
    }
    while let Some(task) = tasks.join_next().await {
        task??;
    }
    done.wait().await;
    drop((channel, pull));
    Ok(())
}
