//! `idem-bench table --redis URL`: the article's scenarios ([`SCENARIOS`], from
//! `idem-sim`) through the driver on a real Redis, on real time: the rows, timings,
//! expected responses and charges are the very ones the simulation prints.
//!
//! The simulated table shows what each policy does on a model of time; this one shows that
//! the same scenarios come out the same way through the whole stack: `Coordinator`,
//! `RedisStore`, the Lua scripts and the server's clock. The `result-cache` row runs the
//! naive look-up, run, store protocol (`GET`, then `SET NX`) on the same server, for
//! contrast: both clients get `ch_1`, and the card is charged twice.
//!
//! The store-unreachable rows connect the store through a small TCP relay to the server and
//! cut the relay before the first call, so the store loses the server exactly as it would
//! in production, without touching a server other programs may be using.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{Coordinator, Error, Fingerprint, Options};
use idem_redis::RedisStore;
use idem_sim::{Call, RowResult, SCENARIOS, Scenario, TableStore};
use redis::AsyncCommands;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

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
    /// The scenario's options were refused.
    #[error("options: {0}")]
    Options(idem::OptionsError),
    /// The URL does not name a TCP server.
    #[error("the store-unreachable rows need a redis:// URL over TCP, not {0}")]
    NotTcp(String),
}

/// The card statement: charge ids in the order charges were made.
#[derive(Debug, Default)]
struct Provider {
    charges: Mutex<Vec<String>>,
}

/// The provider's own failure: it timed out without charging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProviderTimeout;

impl fmt::Display for ProviderTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the provider timed out")
    }
}

impl Provider {
    /// Charges after the call's provider time, or times out without charging.
    async fn charge(&self, call: &Call) -> Result<String, ProviderTimeout> {
        tokio::time::sleep(Duration::from_millis(call.provider_ms)).await;
        if call.provider_fails {
            return Err(ProviderTimeout);
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

/// A response as the simulated table names it.
fn response(result: Result<String, Error<ProviderTimeout>>) -> String {
    match result {
        Ok(id) => id,
        Err(Error::InProgress) => "InProgressError".to_owned(),
        Err(Error::KeyReuse { .. }) => "KeyReuseError".to_owned(),
        Err(Error::StoreUnavailable(_)) => "StoreUnavailableError".to_owned(),
        Err(Error::Action(ProviderTimeout)) => "ActionFailed".to_owned(),
        Err(other) => format!("error: {other}"),
    }
}

/// The fingerprint of a charge: the order and the amount.
fn fingerprint(amount: u32) -> Fingerprint {
    Fingerprint::builder()
        .field("order_id", "order-1")
        .field("amount", amount)
        .finish()
        .unwrap_or_else(|_| Fingerprint::of_bytes(&amount.to_be_bytes()))
}

/// One client's request through the coordinator.
async fn pay(
    coordinator: Arc<Coordinator<RedisStore>>,
    provider: Arc<Provider>,
    key: String,
    call: Call,
) -> String {
    response(
        coordinator
            .execute(
                "payment.charge",
                &key,
                fingerprint(call.amount),
                move |_claim| async move { provider.charge(&call).await },
            )
            .await,
    )
}

/// One client's request through the naive result cache: look up, else run and store
/// (`SET NX`), and on losing the store race return the winner's result.
async fn pay_through_cache(
    mut conn: redis::aio::MultiplexedConnection,
    provider: Arc<Provider>,
    key: String,
    call: Call,
) -> String {
    if let Ok(Some(stored)) = conn.get::<_, Option<String>>(&key).await {
        return stored;
    }
    let Ok(id) = provider.charge(&call).await else {
        return "ActionFailed".to_owned();
    };
    match conn.set_nx::<_, _, bool>(&key, &id).await {
        Ok(true) => id,
        _ => conn
            .get::<_, Option<String>>(&key)
            .await
            .ok()
            .flatten()
            .unwrap_or(id),
    }
}

/// Starts each call at its time, as its own task, and collects the responses in call
/// order.
async fn run_calls<F, Fut>(calls: &[Call], start: F) -> Vec<String>
where
    F: Fn(Call) -> Fut,
    Fut: std::future::Future<Output = String> + Send + 'static,
{
    let began = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for call in calls {
        tokio::time::sleep_until(began + Duration::from_millis(call.at_ms)).await;
        tasks.push(tokio::spawn(start(*call)));
    }
    let mut responses = Vec::new();
    for task in tasks {
        responses.push(task.await.unwrap_or_else(|e| format!("panicked: {e}")));
    }
    responses
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

/// Runs one scenario against the server at `url`, its keys under `prefix`.
pub async fn run_scenario(
    url: &str,
    prefix: &str,
    scenario: &Scenario,
) -> Result<RowResult, TableError> {
    let provider = Arc::new(Provider::default());
    let key = format!("{}-order-1", scenario.label);
    let mut relay = None;
    let responses = match scenario.store {
        TableStore::ResultCache => {
            let conn = redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            let key = format!("{prefix}result-cache:{key}");
            run_calls(scenario.calls, |call| {
                pay_through_cache(conn.clone(), Arc::clone(&provider), key.clone(), call)
            })
            .await
        }
        TableStore::Idem | TableStore::Unreachable => {
            let builder = RedisStore::builder().prefix(prefix.to_owned());
            let store = if scenario.store == TableStore::Unreachable {
                let info = redis::Client::open(url)?.get_connection_info().clone();
                let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
                    return Err(TableError::NotTcp(url.to_owned()));
                };
                let through = Relay::start(host, port).await?;
                let store = builder
                    .connect(&format!("redis://127.0.0.1:{}/", through.port))
                    .await?;
                through.cut();
                relay = Some(through);
                store
            } else {
                builder.connect(url).await?
            };
            let options = Options::builder()
                .in_flight(scenario.in_flight)
                .on_store_failure(scenario.on_store_failure)
                .retention(Duration::from_secs(60))
                // The attempt's own deadline ends each try on the cut link (rule 12).
                .reply_timeout(Duration::from_millis(200))
                .build()
                .map_err(TableError::Options)?;
            let coordinator = Arc::new(Coordinator::new(store, options));
            run_calls(scenario.calls, |call| {
                pay(
                    Arc::clone(&coordinator),
                    Arc::clone(&provider),
                    key.clone(),
                    call,
                )
            })
            .await
        }
    };
    drop(relay);
    Ok(RowResult {
        responses,
        charges: provider.statement(),
    })
}

/// Runs every row of [`SCENARIOS`] against the server at `url`, under a key prefix unique
/// to this run (records expire after the minimum retention).
pub async fn run(url: &str) -> Result<Vec<(&'static Scenario, RowResult)>, TableError> {
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let prefix = format!("idem-table:{run_id:016x}:");
    let mut rows = Vec::new();
    for scenario in SCENARIOS {
        rows.push((scenario, run_scenario(url, &prefix, scenario).await?));
    }
    Ok(rows)
}
