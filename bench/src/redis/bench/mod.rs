//! `idem-bench bench --redis URL`: idem on Redis measured against the least work a call
//! could do, side by side in one run.
//!
//! A fresh call needs two round trips (reserve before the action, complete after it) and
//! a replay one, so for every concurrency level the bench measures, over the same kind of
//! connection the adapter uses and in this order:
//!
//! - `ping`: raw `PING`, the round trip with no work in it;
//! - `raw_fresh` and `raw_replay`: the adapter's own reserve and complete commands issued
//!   through [`Store::apply`] with no driver around them;
//! - `fresh`, `replay`: [`Coordinator::execute`] on distinct keys, then again on keys
//!   completed in the `fresh` phase;
//! - `one_key`: groups of callers as large as the concurrency on one key each, with an
//!   action that takes [`HOT_ACTION`]: one runs, the others wait (policy `Wait`) and replay.
//!
//! Each phase runs for a fixed window; the store's count of what it sent gives the requests
//! per call, the server's `INFO commandstats` before and after it what the server executed
//! for them (see [`server`]), and `MEMORY USAGE` the size of a pending and of a completed
//! record. Nothing here is asserted: the figures are reported
//! ([`BenchReport::text`], [`BenchReport::json`]) with the ratios that BENCHMARKS.md sets
//! targets for.

pub mod compare;
pub mod load;
mod report;
pub mod server;

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::record::{Command, Reply};
use idem::{Coordinator, Fingerprint, Key, Operation, Options, OwnerToken, Store};
use idem_redis::RedisStore;
use redis::aio::ConnectionManager;
use thiserror::Error;

use self::load::LoadStats;
use self::server::CommandStats;

/// How long each `one_key` action takes: long enough that the other callers of its key
/// arrive while it runs and wait.
pub const HOT_ACTION: Duration = Duration::from_millis(20);

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The Redis server (standalone), e.g. `redis://127.0.0.1:6379`.
    pub url: String,
    /// Concurrency levels, each measured in full.
    pub concurrency: Vec<usize>,
    /// How long each phase runs.
    pub window: Duration,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            concurrency: vec![1, 64, 256],
            window: Duration::from_secs(2),
        }
    }
}

/// Why the bench could not run.
#[derive(Debug, Error)]
pub enum BenchError {
    /// The adapter could not connect.
    #[error("cannot connect the store: {0}")]
    Connect(#[from] idem_redis::ConnectError),
    /// A measurement command (PING, INFO, MEMORY USAGE) failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A call that must succeed to prepare a phase did not.
    #[error("preparing {phase}: {detail}")]
    Prepare {
        /// The phase being prepared.
        phase: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// One phase at one concurrency.
#[derive(Debug, Clone)]
pub struct Phase {
    /// `ping`, `raw_fresh`, `raw_replay`, `fresh`, `replay` or `one_key`.
    pub name: &'static str,
    /// Calls, errors, window, latencies.
    pub load: LoadStats,
    /// What the server executed during the phase, commands inside scripts included.
    pub commands: CommandStats,
    /// Requests (round trips) the clients sent: the store's own count where the phase
    /// goes through the store, the server's count otherwise (`ping`).
    pub requests: u64,
}

impl Phase {
    /// Client requests (round trips) per call.
    pub fn requests_per_call(&self) -> f64 {
        let calls = self.load.calls + self.load.errors;
        if calls == 0 {
            0.0
        } else {
            self.requests as f64 / calls as f64
        }
    }
}

/// The `one_key` phase's own findings.
#[derive(Debug, Clone, Default)]
pub struct HotKey {
    /// Keys whose action ran.
    pub keys: u64,
    /// Times an action ran: equal to `keys` unless something is badly wrong.
    pub effects: u64,
    /// Seconds callers spent waiting for another caller's result, summed.
    pub waiting_secs: f64,
    /// Calls that replayed another caller's result.
    pub waiters: u64,
}

/// All the levels measured, and the record sizes.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Each concurrency level's phases, in the order measured.
    pub levels: Vec<(usize, Vec<Phase>, HotKey)>,
    /// `MEMORY USAGE` of a pending record.
    pub pending_bytes: Option<u64>,
    /// `MEMORY USAGE` of a completed record with a small body (`"ch_1"` as JSON).
    pub completed_bytes: Option<u64>,
    /// The server's version.
    pub redis_version: String,
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"amount=100")
}

/// The operation every phase charges under.
const OPERATION: &str = "bench.charge";

fn operation() -> Operation {
    Operation::new(OPERATION).expect("a valid operation name")
}

/// A key distinct per phase, concurrency and call within this run, as a client sends it.
/// The driver's phases hand it to `execute` as text, which checks it once, as a service
/// hands it the header's; the raw phases check it themselves ([`key`]).
fn key_text(run: &str, phase: &str, concurrency: usize, i: u64) -> String {
    format!("{run}-{phase}-{concurrency}-{i}")
}

/// [`key_text`], checked, for the store's own commands.
fn key(run: &str, phase: &str, concurrency: usize, i: u64) -> Key {
    Key::new(key_text(run, phase, concurrency, i)).expect("bench keys are valid")
}

/// Owner tokens for the raw phases: distinct per call, never reused in this run.
fn owner(run_salt: u64, i: u64) -> OwnerToken {
    OwnerToken::from_u128((u128::from(run_salt) << 64) | u128::from(i))
}

/// A salt unique to this run, the run's id made of it, and the store under a prefix of its
/// own, so that runs never see each other's keys.
async fn connect(url: &str) -> Result<(u64, String, RedisStore), BenchError> {
    let salt = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let run_id = format!("{salt:016x}");
    // The notices' health check sends its own `PING`s, which the `ping` phase, counted by
    // the server, would take for its own: checked once an hour, none falls in a phase.
    let store = RedisStore::builder()
        .prefix(format!("idem-bench:{run_id}:"))
        .notice_health_check(Duration::from_secs(3600))
        .connect(url)
        .await?;
    Ok((salt, run_id, store))
}

/// The options of every bench call: the minimum retention, so that keys go soon.
fn options() -> Result<Options, BenchError> {
    Options::builder()
        .retention(Duration::from_secs(60))
        .build()
        .map_err(|e| BenchError::Prepare {
            phase: "options",
            detail: e.to_string(),
        })
}

/// Runs the bench against `config.url`. Keys live under a prefix unique to this run and
/// expire after the minimum retention.
pub async fn run(config: &BenchConfig) -> Result<BenchReport, BenchError> {
    let (salt, run_id, store) = connect(&config.url).await?;
    let client = redis::Client::open(config.url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let ping_conn = ConnectionManager::new(client.clone()).await?;
    let redis_version = server_version(&mut admin).await?;
    let options = options()?;
    let coordinator = Arc::new(Coordinator::new(store.clone(), options.clone()));

    let mut levels = Vec::new();
    for &c in &config.concurrency {
        let mut phases = Vec::new();
        let window = config.window;

        let conn = ping_conn.clone();
        phases.push(
            measure(&mut admin, None, "ping", c, window, move |_| {
                let mut conn = conn.clone();
                async move {
                    redis::cmd("PING")
                        .query_async::<String>(&mut conn)
                        .await
                        .map(drop)
                }
            })
            .await?,
        );

        let (s, o, r) = (store.clone(), options.clone(), run_id.clone());
        let raw_fresh = measure(&mut admin, Some(&store), "raw_fresh", c, window, move |i| {
            let (s, o, k) = (s.clone(), o.clone(), key(&r, "raw", c, i));
            async move { raw_fresh(&s, &o, &k, owner(salt, i)).await }
        })
        .await?;
        let completed = raw_fresh.load.calls + raw_fresh.load.errors;
        phases.push(raw_fresh);

        let (s, o, r) = (store.clone(), options.clone(), run_id.clone());
        phases.push(
            measure(
                &mut admin,
                Some(&store),
                "raw_replay",
                c,
                window,
                move |i| {
                    let (s, o) = (s.clone(), o.clone());
                    let k = key(&r, "raw", c, i % completed.max(1));
                    async move { raw_replay(&s, &o, &k, owner(!salt, i)).await }
                },
            )
            .await?,
        );

        let (co, r) = (Arc::clone(&coordinator), run_id.clone());
        let fresh = measure(&mut admin, Some(&store), "fresh", c, window, move |i| {
            let (co, k) = (Arc::clone(&co), key_text(&r, "fresh", c, i));
            async move { charge(&co, &k, Duration::ZERO).await.map(drop) }
        })
        .await?;
        let charged = fresh.load.calls + fresh.load.errors;
        phases.push(fresh);

        let (co, r) = (Arc::clone(&coordinator), run_id.clone());
        phases.push(
            measure(&mut admin, Some(&store), "replay", c, window, move |i| {
                let (co, k) = (
                    Arc::clone(&co),
                    key_text(&r, "fresh", c, i % charged.max(1)),
                );
                async move { charge(&co, &k, Duration::ZERO).await.map(drop) }
            })
            .await?,
        );

        let (phase, hot) = hot_key(&mut admin, &coordinator, &run_id, c, window).await?;
        phases.push(phase);
        levels.push((c, phases, hot));
    }

    let (pending_bytes, completed_bytes) = record_sizes(&store, &mut admin, &run_id).await?;
    Ok(BenchReport {
        levels,
        pending_bytes,
        completed_bytes,
        redis_version,
    })
}

/// A phase run for a fixed number of calls by [`calls`], to count what one call costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallsPhase {
    /// The adapter's reserve and complete through [`Store::apply`], nothing around them.
    RawFresh,
    /// [`Coordinator::execute`] on a new key: the driver around the same two commands.
    Fresh,
}

/// Runs exactly `total` calls of `phase` at `concurrency` on distinct new keys, and nothing
/// else once connected: the harness for counting the client's instructions per call
/// (BENCHMARKS.md, "The detached call's own cost"). Under callgrind, two runs of different
/// totals subtract away the connection and the runtime's start.
pub async fn calls(
    url: &str,
    phase: CallsPhase,
    concurrency: usize,
    total: u64,
) -> Result<LoadStats, BenchError> {
    let harness = Harness::connect(url).await?;
    Ok(harness
        .phase(
            phase,
            &harness.run_id,
            concurrency,
            load::Until::Calls(total),
        )
        .await)
}

/// What the counted phases run against: the store under a prefix of this run's own, a
/// coordinator over it, and the run's salt for the raw phase's owner tokens. `calls` runs one
/// phase with it, `compare` both in rounds.
struct Harness {
    salt: u64,
    run_id: String,
    store: RedisStore,
    options: Options,
    coordinator: Arc<Coordinator<RedisStore>>,
    /// Raw phases run so far: each one's owner tokens start past every earlier one's
    /// (2^40 calls a phase), so that no token is used twice in the run ([`owner`]).
    raw_phases: AtomicU64,
}

impl Harness {
    async fn connect(url: &str) -> Result<Self, BenchError> {
        let (salt, run_id, store) = connect(url).await?;
        let options = options()?;
        let coordinator = Arc::new(Coordinator::new(store.clone(), options.clone()));
        Ok(Self {
            salt,
            run_id,
            store,
            options,
            coordinator,
            raw_phases: AtomicU64::new(0),
        })
    }

    /// Calls of `phase` at `concurrency` until `until`, on new keys named after `run`
    /// (distinct per phase, concurrency and call).
    async fn phase(
        &self,
        phase: CallsPhase,
        run: &str,
        concurrency: usize,
        until: load::Until,
    ) -> LoadStats {
        let run = run.to_owned();
        match phase {
            CallsPhase::RawFresh => {
                let (store, options, salt) = (self.store.clone(), self.options.clone(), self.salt);
                let first = self.raw_phases.fetch_add(1, Ordering::Relaxed) << 40;
                load::run_until(concurrency, until, move |i| {
                    let (s, o) = (store.clone(), options.clone());
                    let k = key(&run, "raw", concurrency, i);
                    async move { raw_fresh(&s, &o, &k, owner(salt, first + i)).await }
                })
                .await
            }
            CallsPhase::Fresh => {
                let coordinator = Arc::clone(&self.coordinator);
                load::run_until(concurrency, until, move |i| {
                    let (co, k) = (
                        Arc::clone(&coordinator),
                        key_text(&run, "fresh", concurrency, i),
                    );
                    async move { charge(&co, &k, Duration::ZERO).await.map(drop) }
                })
                .await
            }
        }
    }
}

/// A charge through the driver: the action returns a charge id after `takes`. The operation
/// and the key go in as text, as a service passes them: `execute` checks each once.
async fn charge(
    coordinator: &Coordinator<RedisStore>,
    key: &str,
    takes: Duration,
) -> Result<idem::Answer<String>, idem::Error<Infallible>> {
    coordinator
        .execute_with_provenance(OPERATION, key, fingerprint(), move |_claim| async move {
            if !takes.is_zero() {
                tokio::time::sleep(takes).await;
            }
            Ok::<_, Infallible>("ch_1".to_owned())
        })
        .await
}

/// What identifies a request in the raw phases: its operation and its fingerprint, made once
/// per call as a service makes them once per request (as `execute` takes them), so that the
/// raw phases pay for them as the driver's do.
struct Request {
    operation: Operation,
    fingerprint: Fingerprint,
}

impl Request {
    fn new() -> Self {
        Self {
            operation: operation(),
            fingerprint: fingerprint(),
        }
    }
}

/// The adapter's reserve, issued directly; `Err` describes any other answer than
/// the one `expected` accepts.
async fn reserve(
    store: &RedisStore,
    options: &Options,
    request: &Request,
    key: &Key,
    owner: OwnerToken,
    expected: fn(&Reply) -> bool,
) -> Result<(), String> {
    let command = Command::Reserve {
        owner,
        fingerprint: request.fingerprint,
        lease: options.lease(),
    };
    match store.apply(&request.operation, key, command).await {
        Ok(reply) if expected(&reply) => Ok(()),
        other => Err(format!("reserve: {other:?}")),
    }
}

/// The adapter's reserve then complete, with nothing around them.
async fn raw_fresh(
    store: &RedisStore,
    options: &Options,
    key: &Key,
    owner: OwnerToken,
) -> Result<(), String> {
    let request = Request::new();
    reserve(store, options, &request, key, owner, |r| {
        matches!(r, Reply::Reserved(_))
    })
    .await?;
    let complete = Command::Complete {
        owner,
        fingerprint: request.fingerprint,
        result: idem::StoredResult::Value(idem::record::Body::new(&b"\"ch_1\""[..])),
        retention: options.retention(),
    };
    match store.apply(&request.operation, key, complete).await {
        Ok(Reply::Completed(_)) => Ok(()),
        other => Err(format!("complete: {other:?}")),
    }
}

/// The adapter's reserve on a completed key: the one command a replay needs.
async fn raw_replay(
    store: &RedisStore,
    options: &Options,
    key: &Key,
    owner: OwnerToken,
) -> Result<(), String> {
    reserve(store, options, &Request::new(), key, owner, |r| {
        matches!(r, Reply::Replay { .. })
    })
    .await
}

/// Runs one phase and reads the server's counts around it, and the requests `store` sent
/// (for a phase that does not go through the store, the server's count of requests).
async fn measure<F, Fut, E>(
    admin: &mut redis::aio::MultiplexedConnection,
    store: Option<&RedisStore>,
    name: &'static str,
    concurrency: usize,
    window: Duration,
    call: F,
) -> Result<Phase, BenchError>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), E>> + Send,
    E: Send + 'static,
{
    let sent = || store.map(|store| store.stats().commands);
    let before = commandstats(admin).await?;
    let sent_before = sent();
    let load = load::run(concurrency, window, call).await;
    let sent_after = sent();
    let commands = commandstats(admin).await?.since(&before);
    let requests = match (sent_before, sent_after) {
        (Some(before), Some(after)) => after - before,
        _ => commands.requests(),
    };
    Ok(Phase {
        name,
        load,
        commands,
        requests,
    })
}

/// Groups of `concurrency` calls share a key; the action takes [`HOT_ACTION`].
async fn hot_key(
    admin: &mut redis::aio::MultiplexedConnection,
    coordinator: &Arc<Coordinator<RedisStore>>,
    run_id: &str,
    concurrency: usize,
    window: Duration,
) -> Result<(Phase, HotKey), BenchError> {
    let ran = Arc::new(Mutex::new(HashSet::new()));
    let effects = Arc::new(AtomicU64::new(0));
    let waiters = Arc::new(AtomicU64::new(0));
    let waiting_micros = Arc::new(AtomicU64::new(0));
    let group = concurrency as u64;
    let (co, r) = (Arc::clone(coordinator), run_id.to_owned());
    let (ran2, effects2, waiters2, waiting2) = (
        Arc::clone(&ran),
        Arc::clone(&effects),
        Arc::clone(&waiters),
        Arc::clone(&waiting_micros),
    );
    let phase = measure(
        admin,
        Some(&**coordinator.store()),
        "one_key",
        concurrency,
        window,
        move |i| {
            let co = Arc::clone(&co);
            let k = key_text(&r, "hot", concurrency, i / group);
            let (ran, effects, waiters, waiting) = (
                Arc::clone(&ran2),
                Arc::clone(&effects2),
                Arc::clone(&waiters2),
                Arc::clone(&waiting2),
            );
            async move {
                let began = Instant::now();
                let outcome = charge(&co, &k, HOT_ACTION).await?;
                if outcome.provenance.replayed() {
                    waiters.fetch_add(1, Ordering::Relaxed);
                    let micros = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
                    waiting.fetch_add(micros, Ordering::Relaxed);
                } else {
                    effects.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut ran) = ran.lock() {
                        ran.insert(k.as_str().to_owned());
                    }
                }
                Ok::<(), idem::Error<Infallible>>(())
            }
        },
    )
    .await?;
    let keys = ran.lock().map_or(0, |ran| ran.len() as u64);
    let hot = HotKey {
        keys,
        effects: effects.load(Ordering::Relaxed),
        waiting_secs: waiting_micros.load(Ordering::Relaxed) as f64 / 1e6,
        waiters: waiters.load(Ordering::Relaxed),
    };
    Ok((phase, hot))
}

async fn commandstats(
    admin: &mut redis::aio::MultiplexedConnection,
) -> Result<CommandStats, BenchError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await?;
    Ok(CommandStats::parse(&info))
}

async fn server_version(
    admin: &mut redis::aio::MultiplexedConnection,
) -> Result<String, BenchError> {
    let info: String = redis::cmd("INFO").arg("server").query_async(admin).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned())
}

/// `MEMORY USAGE` of one pending record and one completed record with a small body.
async fn record_sizes(
    store: &RedisStore,
    admin: &mut redis::aio::MultiplexedConnection,
    run_id: &str,
) -> Result<(Option<u64>, Option<u64>), BenchError> {
    let options = Options::default();
    let pending = key(run_id, "size", 0, 0);
    let completed = key(run_id, "size", 0, 1);
    let prepare = |detail| BenchError::Prepare {
        phase: "record sizes",
        detail,
    };
    reserve(
        store,
        &options,
        &Request::new(),
        &pending,
        owner(7, 0),
        |r| matches!(r, Reply::Reserved(_)),
    )
    .await
    .map_err(prepare)?;
    raw_fresh(store, &options, &completed, owner(7, 1))
        .await
        .map_err(prepare)?;
    let mut sizes = [None, None];
    for (slot, k) in sizes.iter_mut().zip([&pending, &completed]) {
        let redis_key = store.layout().record_key(&operation(), k);
        *slot = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&redis_key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(admin)
            .await?;
    }
    Ok((sizes[0], sizes[1]))
}
