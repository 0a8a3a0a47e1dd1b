//! `idem-sim table --redis URL`: the article's scenarios through the driver on a real
//! Redis, on real time (the provider takes 300 ms, the client retries after 50 ms).
//!
//! The simulated table shows what each policy does on a model of time; this one shows
//! that the same scenarios come out the same way through the whole stack: `Coordinator`,
//! `RedisStore`, the Lua scripts and the server's clock. The `result-cache` row is the
//! naive look-up-run-store protocol on the same server, for contrast: both clients get
//! `ch_1`, and the card is charged twice.
//!
//! The store-unreachable rows connect the store through a small TCP relay to the server
//! and then close the relay, so the store loses the server mid-run exactly as it would in
//! production, without touching the server other programs may be using.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{Coordinator, Error, Fingerprint, InFlightPolicy, Options, StoreFailurePolicy};
use idem_redis::RedisStore;
use redis::AsyncCommands;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long the provider takes to charge.
pub const PROVIDER_TAKES: Duration = Duration::from_millis(300);
/// When the client's retry starts, after the first request.
pub const RETRY_AFTER: Duration = Duration::from_millis(50);

/// One scenario's result: what each request got back, and the card statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The scenario.
    pub label: &'static str,
    /// What each request got back, in the order the requests were made.
    pub responses: Vec<String>,
    /// The charges the provider made.
    pub charges: Vec<String>,
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:<24} responses=[{}] charges=[{}]",
            self.label,
            self.responses.join(", "),
            self.charges.join(", ")
        )
    }
}

/// Why the table could not run.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The store could not connect.
    #[error("cannot connect the store: {0}")]
    Connect(#[from] idem_redis::ConnectError),
    /// The naive cache's own commands, or the relay's setup, failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The relay could not listen or reach the server.
    #[error("relay: {0}")]
    Relay(#[from] std::io::Error),
    /// The URL does not name a TCP server.
    #[error("the store-unreachable rows need a redis:// URL over TCP, not {0}")]
    NotTcp(String),
}

/// The card statement: charge ids in the order charges were made.
#[derive(Debug, Default)]
struct Provider {
    charges: Mutex<Vec<String>>,
    /// Fail (a provider timeout, nothing charged) this many calls first.
    failures_left: Mutex<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProviderTimeout;

impl fmt::Display for ProviderTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the provider timed out")
    }
}

impl Provider {
    fn failing_first(n: u32) -> Self {
        Self {
            charges: Mutex::default(),
            failures_left: Mutex::new(n),
        }
    }

    async fn charge(&self) -> Result<String, ProviderTimeout> {
        tokio::time::sleep(PROVIDER_TAKES).await;
        {
            let mut left = self.failures_left.lock().unwrap_or_else(|e| e.into_inner());
            if *left > 0 {
                *left -= 1;
                return Err(ProviderTimeout);
            }
        }
        let mut charges = self.charges.lock().unwrap_or_else(|e| e.into_inner());
        let id = format!("ch_{}", charges.len() + 1);
        charges.push(id.clone());
        Ok(id)
    }

    fn statement(&self) -> Vec<String> {
        self.charges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn response<E: fmt::Debug + fmt::Display>(result: Result<String, Error<E>>) -> String {
    match result {
        Ok(id) => id,
        Err(Error::InProgress) => "InProgress".to_owned(),
        Err(Error::KeyReuse { .. }) => "KeyReuse".to_owned(),
        Err(Error::StoreUnavailable(_)) => "StoreUnavailable".to_owned(),
        Err(Error::Action(e)) => format!("{e:?}"),
        Err(other) => format!("error: {other}"),
    }
}

fn fingerprint(amount: u64) -> Fingerprint {
    Fingerprint::builder()
        .field("order_id", "o-1")
        .field("amount", amount)
        .finish()
        .unwrap_or_else(|_| Fingerprint::of_bytes(&amount.to_be_bytes()))
}

fn options(in_flight: InFlightPolicy, on_failure: StoreFailurePolicy) -> Options {
    Options::builder()
        .in_flight(in_flight)
        .on_store_failure(on_failure)
        .retention(Duration::from_secs(60))
        .build()
        .unwrap_or_default()
}

/// One charge through `coordinator`.
async fn pay(
    coordinator: &Coordinator<RedisStore>,
    provider: &Provider,
    key: &str,
    amount: u64,
) -> String {
    response(
        coordinator
            .execute("payment.charge", key, fingerprint(amount), |_claim| async {
                provider.charge().await
            })
            .await,
    )
}

/// The first request, and the client's retry `RETRY_AFTER` later while it still runs.
async fn with_retry(
    coordinator: Arc<Coordinator<RedisStore>>,
    provider: Arc<Provider>,
    key: String,
) -> Vec<String> {
    let first = {
        let (c, p, k) = (Arc::clone(&coordinator), Arc::clone(&provider), key.clone());
        tokio::spawn(async move { pay(&c, &p, &k, 100).await })
    };
    tokio::time::sleep(RETRY_AFTER).await;
    let second = pay(&coordinator, &provider, &key, 100).await;
    let first = first.await.unwrap_or_else(|e| format!("panicked: {e}"));
    vec![first, second]
}

/// The naive result cache: look up, else run and store (`SET NX`), and on losing the
/// store race return the winner's result.
async fn result_cache(
    conn: redis::aio::MultiplexedConnection,
    provider: Arc<Provider>,
    key: String,
) -> Vec<String> {
    async fn call(
        mut conn: redis::aio::MultiplexedConnection,
        provider: Arc<Provider>,
        key: String,
    ) -> String {
        if let Ok(Some(stored)) = conn.get::<_, Option<String>>(&key).await {
            return stored;
        }
        let Ok(id) = provider.charge().await else {
            return "ProviderTimeout".to_owned();
        };
        let stored: Result<bool, _> = conn.set_nx(&key, &id).await;
        match stored {
            Ok(true) => id,
            _ => conn
                .get::<_, Option<String>>(&key)
                .await
                .ok()
                .flatten()
                .unwrap_or(id),
        }
    }
    let first = tokio::spawn(call(conn.clone(), Arc::clone(&provider), key.clone()));
    tokio::time::sleep(RETRY_AFTER).await;
    let second = call(conn, provider, key).await;
    let first = first.await.unwrap_or_else(|e| format!("panicked: {e}"));
    vec![first, second]
}

/// A TCP relay to the server that can be cut: every connection through it closes, and
/// new ones are refused.
struct Relay {
    port: u16,
    task: JoinHandle<()>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    async fn start(host: String, port: u16) -> Result<Self, TableError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local = listener.local_addr()?.port();
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = Arc::clone(&links);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = (host.clone(), port);
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tracked.lock().unwrap_or_else(|e| e.into_inner()).push(link);
            }
        });
        Ok(Self {
            port: local,
            task,
            links,
        })
    }

    fn cut(&self) {
        self.task.abort();
        for link in self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            link.abort();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}

/// A row where the store loses the server before the call: fail-open runs the action,
/// fail-closed runs nothing.
async fn unreachable(
    url: &str,
    prefix: &str,
    on_failure: StoreFailurePolicy,
) -> Result<Row, TableError> {
    let info = redis::Client::open(url)?.get_connection_info().clone();
    let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        return Err(TableError::NotTcp(url.to_owned()));
    };
    let relay = Relay::start(host, port).await?;
    let store = RedisStore::builder()
        .prefix(prefix.to_owned())
        .command_timeout(Duration::from_millis(200))
        .connect(&format!("redis://127.0.0.1:{}/", relay.port))
        .await?;
    relay.cut();
    let coordinator = Coordinator::new(store, options(InFlightPolicy::Wait, on_failure));
    let provider = Provider::default();
    let responses = vec![pay(&coordinator, &provider, "order-1", 100).await];
    Ok(Row {
        label: match on_failure {
            StoreFailurePolicy::FailOpen => "unreachable-fail-open",
            _ => "unreachable-fail-closed",
        },
        responses,
        charges: provider.statement(),
    })
}

async fn connect(
    url: &str,
    prefix: &str,
    in_flight: InFlightPolicy,
) -> Result<Arc<Coordinator<RedisStore>>, TableError> {
    let store = RedisStore::builder()
        .prefix(prefix.to_owned())
        .connect(url)
        .await?;
    Ok(Arc::new(Coordinator::new(
        store,
        options(in_flight, StoreFailurePolicy::FailOpen),
    )))
}

/// Runs every row against the server at `url`, under a key prefix unique to this run.
pub async fn run(url: &str) -> Result<Vec<Row>, TableError> {
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let prefix = format!("idem-table:{run_id:016x}:");
    let coordinator = |in_flight| connect(url, &prefix, in_flight);
    let mut rows = Vec::new();

    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let provider = Arc::new(Provider::default());
    let responses = result_cache(
        conn,
        Arc::clone(&provider),
        format!("{}naive:order-1", prefix.clone()),
    )
    .await;
    rows.push(Row {
        label: "result-cache",
        responses,
        charges: provider.statement(),
    });

    for (label, policy) in [
        ("wait", InFlightPolicy::Wait),
        ("raise", InFlightPolicy::Raise),
    ] {
        let provider = Arc::new(Provider::default());
        let responses = with_retry(
            coordinator(policy).await?,
            Arc::clone(&provider),
            format!("{label}-order-1"),
        )
        .await;
        rows.push(Row {
            label,
            responses,
            charges: provider.statement(),
        });
    }

    let c = coordinator(InFlightPolicy::Wait).await?;
    let provider = Provider::default();
    let first = pay(&c, &provider, "reuse-order-1", 100).await;
    let same = pay(&c, &provider, "reuse-order-1", 100).await;
    rows.push(Row {
        label: "same-key-same-amount",
        responses: vec![first, same],
        charges: provider.statement(),
    });
    let other = pay(&c, &provider, "reuse-order-1", 5).await;
    rows.push(Row {
        label: "same-key-amount-5",
        responses: vec![other],
        charges: provider.statement(),
    });

    let provider = Provider::failing_first(1);
    let first = pay(&c, &provider, "failing-order-1", 100).await;
    let second = pay(&c, &provider, "failing-order-1", 100).await;
    rows.push(Row {
        label: "failure-then-retry",
        responses: vec![first, second],
        charges: provider.statement(),
    });

    rows.push(unreachable(url, &prefix, StoreFailurePolicy::FailOpen).await?);
    rows.push(unreachable(url, &prefix, StoreFailurePolicy::FailClosed).await?);
    Ok(rows)
}

/// What each row must show: the charges the article's table makes. `None` when the row
/// matches, else what differs.
pub fn check(row: &Row) -> Option<String> {
    let want: (&[&str], &[&str]) = match row.label {
        "result-cache" => (&["ch_1", "ch_1"], &["ch_1", "ch_2"]),
        "wait" => (&["ch_1", "ch_1"], &["ch_1"]),
        "raise" => (&["ch_1", "InProgress"], &["ch_1"]),
        "same-key-same-amount" => (&["ch_1", "ch_1"], &["ch_1"]),
        "same-key-amount-5" => (&["KeyReuse"], &["ch_1"]),
        "failure-then-retry" => (&["ProviderTimeout", "ch_1"], &["ch_1"]),
        "unreachable-fail-open" => (&["ch_1"], &["ch_1"]),
        "unreachable-fail-closed" => (&["StoreUnavailable"], &[]),
        _ => return Some("unknown row".to_owned()),
    };
    let (responses, charges) = want;
    (row.responses != responses || row.charges != charges)
        .then(|| format!("expected responses={responses:?} charges={charges:?}"))
}
