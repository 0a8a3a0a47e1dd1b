//! An orders consumer under idem: each order is shipped once, however often the broker
//! delivers it, with any number of these processes on one queue or stream.
//!
//! ```text
//! cargo run -p idem-consumer --example orders -- \
//!     (--amqp URL --queue NAME | --nats URL --stream NAME) \
//!     (--redis URL --ledger FILE | --postgres URL) [--lease-ms N] [--concurrency N]
//! ```
//!
//! On Redis, shipping an order appends `<message id> <pid>` to the ledger file (an effect
//! outside any database: a second delivery that finds the order recorded ships nothing). On
//! PostgreSQL, it inserts a row into `shipments (message_id, pid)` in the transaction that
//! commits with the order's record (MODEL.md `T1`): exactly one row per order. The queue (a
//! quorum queue, so that deliveries are counted), the stream with its durable consumer
//! `orders`, and the `shipments` table are the operator's to create.
//!
//! With `--no-idempotency` (and `--ledger`, no store) the same handler runs on every delivery
//! and the delivery is acknowledged after it: the consumer without idem, the baseline a
//! benchmark measures it against, and the broken consumer a test shows its checks catch.
//!
//! The process prints `orders on` once it consumes. On SIGTERM it stops taking deliveries,
//! lets the running ones finish, and prints its report as one line, `report executed=N
//! replayed=N redelivered=N in-progress=N dead-lettered=N unsettled=N cut=N`.

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use idem::{BoxError, Claim, Coordinator, Options};
use idem_consumer::{ConsumeReport, Consumer, Message, Redelivery};
use idem_postgres::{PostgresStore, RecordTransaction};
use idem_redis::RedisStore;

/// The command line.
#[derive(Debug, Parser)]
pub struct Args {
    /// A RabbitMQ server to consume from (`amqp://user:password@host:port/vhost`).
    #[arg(long, requires = "queue", conflicts_with = "nats")]
    amqp: Option<String>,
    /// The queue to consume (a quorum queue).
    #[arg(long)]
    queue: Option<String>,
    /// A NATS server with JetStream to consume from (`host:port`).
    #[arg(long, requires = "stream")]
    nats: Option<String>,
    /// The stream whose durable consumer `orders` to consume.
    #[arg(long)]
    stream: Option<String>,
    /// The Redis store; each shipment is a line appended to `--ledger`.
    #[arg(long, requires = "ledger", conflicts_with = "postgres")]
    redis: Option<String>,
    /// The file the Redis mode appends shipments to.
    #[arg(long)]
    ledger: Option<std::path::PathBuf>,
    /// The PostgreSQL store; each shipment is a row written with the record.
    #[arg(long)]
    postgres: Option<String>,
    /// No store: every delivery ships (appending to `--ledger`) and is acknowledged after.
    #[arg(long, requires = "ledger", conflicts_with_all = ["redis", "postgres"])]
    no_idempotency: bool,
    /// The lease of a running shipment, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    lease_ms: u64,
    /// How many deliveries are handled at once (and the broker's window).
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
}

type Report = Result<ConsumeReport, BoxError>;

/// Consumes until SIGTERM, then prints the report.
pub async fn run(args: Args) -> Result<(), BoxError> {
    let options = Options::builder()
        .lease(Duration::from_millis(args.lease_ms))
        .build()?;
    let redelivery = Redelivery::new(50, Duration::from_millis(20), Duration::from_secs(1))?;
    let stop = async {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            term.recv().await;
        }
    };
    if args.no_idempotency {
        let ledger = args
            .ledger
            .clone()
            .ok_or("--no-idempotency needs --ledger")?;
        return bare(&args, &ledger, stop).await;
    }
    let report = match (&args.redis, &args.postgres) {
        (Some(url), _) => {
            let store = RedisStore::connect(url).await?;
            let orders =
                Coordinator::new(store, options).operation::<(), BoxError>("orders.ship")?;
            let consumer = Consumer::new(orders)
                .redelivery(redelivery)
                .concurrency(usize::from(args.concurrency));
            let ledger = args.ledger.clone().ok_or("--redis needs --ledger")?;
            let ship = move |_claim: Claim, message: Message| {
                let ledger = ledger.clone();
                async move { ship(&ledger, message.id.as_deref()) }
            };
            consume(&args, &consumer, ship, stop).await
        }
        (None, Some(url)) => {
            // A few connections for the store's own statements, and one per handler for
            // the transactions: every process's pools must fit the server's
            // `max_connections` together.
            let store = PostgresStore::builder()
                .max_connections(4)
                .transaction_connections(u32::from(args.concurrency))
                .connect(url)
                .await?;
            let orders =
                Coordinator::new(store, options).operation::<(), BoxError>("orders.ship")?;
            let consumer = Consumer::new(orders)
                .redelivery(redelivery)
                .concurrency(usize::from(args.concurrency));
            let ship = |_claim: Claim, message: Message, mut tx: RecordTransaction| async move {
                sqlx::query("INSERT INTO shipments (message_id, pid) VALUES ($1, $2)")
                    .bind(message.id.unwrap_or_default())
                    .bind(i64::from(std::process::id()))
                    .execute(&mut *tx)
                    .await?;
                Ok::<_, BoxError>(((), tx))
            };
            consume_in_transaction(&args, &consumer, ship, stop).await
        }
        (None, None) => return Err("a store: --redis URL --ledger FILE, or --postgres URL".into()),
    }?;
    println!(
        "report executed={} replayed={} redelivered={} in-progress={} dead-lettered={} \
         unsettled={} cut={}",
        report.executed,
        report.replayed,
        report.redelivered,
        report.in_progress,
        report.dead_lettered_total(),
        report.unsettled,
        report.cut
    );
    Ok(())
}

/// Ships an order: appends `<id> <pid>` to the ledger, one write of one line.
fn ship(ledger: &std::path::Path, id: Option<&str>) -> Result<(), BoxError> {
    let line = format!("{} {}\n", id.unwrap_or_default(), std::process::id());
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)?;
    file.write_all(line.as_bytes())?;
    Ok(())
}

/// The consumer without idem: ship every delivery, then acknowledge it.
async fn bare(
    args: &Args,
    ledger: &std::path::Path,
    stop: impl Future<Output = ()>,
) -> Result<(), BoxError> {
    use futures::StreamExt;
    let mut stop = std::pin::pin!(stop);
    let mut shipped = 0u64;
    if let (Some(url), Some(queue)) = (&args.amqp, &args.queue) {
        let (_connection, _channel, mut deliveries) = amqp(url, queue, args.concurrency).await?;
        println!("orders on");
        loop {
            let delivery = tokio::select! {
                () = &mut stop => break,
                delivery = deliveries.next() => delivery,
            };
            let Some(delivery) = delivery else { break };
            let delivery = delivery?;
            let id = delivery
                .properties
                .message_id()
                .as_ref()
                .map(|id| id.as_str());
            ship(ledger, id)?;
            delivery
                .ack(lapin::options::BasicAckOptions::default())
                .await?;
            shipped += 1;
        }
    } else if let (Some(url), Some(stream)) = (&args.nats, &args.stream) {
        let mut messages = nats(url, stream).await?;
        println!("orders on");
        loop {
            let message = tokio::select! {
                () = &mut stop => break,
                message = messages.next() => message,
            };
            let Some(message) = message else { break };
            let message = message?;
            let id = message
                .headers
                .as_ref()
                .and_then(|headers| headers.get("Nats-Msg-Id"))
                .map(|id| id.as_str());
            ship(ledger, id)?;
            message.ack().await?;
            shipped += 1;
        }
    } else {
        return Err("a broker: --amqp URL --queue NAME, or --nats URL --stream NAME".into());
    }
    println!(
        "report executed={shipped} replayed=0 redelivered=0 in-progress=0 dead-lettered=0 \
         unsettled=0 cut=0"
    );
    Ok(())
}

async fn consume<S, H, Fut>(
    args: &Args,
    consumer: &Consumer<S, (), BoxError>,
    ship: H,
    stop: impl Future<Output = ()>,
) -> Report
where
    S: idem::Store,
    H: Fn(Claim, Message) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    if let (Some(url), Some(queue)) = (&args.amqp, &args.queue) {
        let (_connection, _channel, deliveries) = amqp(url, queue, args.concurrency).await?;
        println!("orders on");
        Ok(consumer.run_amqp(deliveries, ship, stop).await)
    } else if let (Some(url), Some(stream)) = (&args.nats, &args.stream) {
        let messages = nats(url, stream).await?;
        println!("orders on");
        Ok(consumer.run_nats(messages, ship, stop).await)
    } else {
        Err("a broker: --amqp URL --queue NAME, or --nats URL --stream NAME".into())
    }
}

async fn consume_in_transaction<H, Fut>(
    args: &Args,
    consumer: &Consumer<PostgresStore, (), BoxError>,
    ship: H,
    stop: impl Future<Output = ()>,
) -> Report
where
    H: Fn(Claim, Message, RecordTransaction) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<((), RecordTransaction), BoxError>> + Send + 'static,
{
    if let (Some(url), Some(queue)) = (&args.amqp, &args.queue) {
        let (_connection, _channel, deliveries) = amqp(url, queue, args.concurrency).await?;
        println!("orders on");
        Ok(consumer
            .run_amqp_in_transaction(deliveries, ship, stop)
            .await)
    } else if let (Some(url), Some(stream)) = (&args.nats, &args.stream) {
        let messages = nats(url, stream).await?;
        println!("orders on");
        Ok(consumer.run_nats_in_transaction(messages, ship, stop).await)
    } else {
        Err("a broker: --amqp URL --queue NAME, or --nats URL --stream NAME".into())
    }
}

/// A lapin consumer of `queue` with a prefetch of `window`, and what keeps it open.
async fn amqp(
    url: &str,
    queue: &str,
    window: u16,
) -> Result<(lapin::Connection, lapin::Channel, lapin::Consumer), BoxError> {
    let connection =
        lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel
        .basic_qos(window, lapin::options::BasicQosOptions::default())
        .await?;
    let deliveries = channel
        .basic_consume(
            queue.to_owned().into(),
            "".into(),
            lapin::options::BasicConsumeOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await?;
    Ok((connection, channel, deliveries))
}

/// The messages of the stream's durable consumer `orders`.
async fn nats(
    url: &str,
    stream: &str,
) -> Result<async_nats::jetstream::consumer::pull::Stream, BoxError> {
    let client = async_nats::connect(url).await?;
    let stream = async_nats::jetstream::new(client)
        .get_stream(stream)
        .await?;
    let consumer: async_nats::jetstream::consumer::PullConsumer =
        stream.get_consumer("orders").await?;
    Ok(consumer.messages().await?)
}

#[tokio::main]
#[allow(dead_code)]
async fn main() -> Result<(), BoxError> {
    run(Args::parse()).await
}
