//! `idem-sim bench --redis URL`: idem on Redis measured against the least work a call
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
//! record. Nothing here is asserted: the figures are reported,
//! with the ratios that BENCHMARKS.md sets targets for.

pub mod load;
pub mod server;

use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::record::{Command, Reply};
use idem::{Coordinator, Fingerprint, Key, Operation, Options, OwnerToken, Store};
use idem_redis::RedisStore;
use redis::aio::ConnectionManager;
use serde_json::{Map, Value, json};
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

fn operation() -> Operation {
    Operation::new("bench.charge").expect("a valid operation name")
}

/// A key distinct per phase, concurrency and call within this run.
fn key(run: &str, phase: &str, concurrency: usize, i: u64) -> Key {
    Key::new(format!("{run}-{phase}-{concurrency}-{i}")).expect("bench keys are valid")
}

/// Owner tokens for the raw phases: distinct per call, never reused in this run.
fn owner(run_salt: u64, i: u64) -> OwnerToken {
    OwnerToken::from_u128((u128::from(run_salt) << 64) | u128::from(i))
}

/// Runs the bench against `config.url`. Keys live under a prefix unique to this run and
/// expire after the minimum retention.
pub async fn run(config: &BenchConfig) -> Result<BenchReport, BenchError> {
    let salt = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let run_id = format!("{salt:016x}");
    let store = RedisStore::builder()
        .prefix(format!("idem-bench:{run_id}:"))
        .connect(&config.url)
        .await?;
    let client = redis::Client::open(config.url.as_str())?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    let ping_conn = ConnectionManager::new(client.clone()).await?;
    let redis_version = server_version(&mut admin).await?;
    let options = Options::builder()
        .retention(Duration::from_secs(60))
        .build()
        .map_err(|e| BenchError::Prepare {
            phase: "options",
            detail: e.to_string(),
        })?;
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
            let (co, k) = (Arc::clone(&co), key(&r, "fresh", c, i));
            async move { charge(&co, &k, Duration::ZERO).await.map(drop) }
        })
        .await?;
        let charged = fresh.load.calls + fresh.load.errors;
        phases.push(fresh);

        let (co, r) = (Arc::clone(&coordinator), run_id.clone());
        phases.push(
            measure(&mut admin, Some(&store), "replay", c, window, move |i| {
                let (co, k) = (Arc::clone(&co), key(&r, "fresh", c, i % charged.max(1)));
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

/// A charge through the driver: the action returns a charge id after `takes`.
async fn charge(
    coordinator: &Coordinator<RedisStore>,
    key: &Key,
    takes: Duration,
) -> Result<idem::Answer<String>, idem::Error<Infallible>> {
    coordinator
        .execute_with_provenance(
            operation(),
            key.as_str(),
            fingerprint(),
            move |_claim| async move {
                if !takes.is_zero() {
                    tokio::time::sleep(takes).await;
                }
                Ok::<_, Infallible>("ch_1".to_owned())
            },
        )
        .await
}

/// The adapter's reserve, issued directly; `Err` describes any other answer than
/// the one `expected` accepts.
async fn reserve(
    store: &RedisStore,
    options: &Options,
    key: &Key,
    owner: OwnerToken,
    expected: fn(&Reply) -> bool,
) -> Result<(), String> {
    let command = Command::Reserve {
        owner,
        fingerprint: fingerprint(),
        lease: options.lease(),
    };
    match store.apply(&operation(), key, command).await {
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
    reserve(store, options, key, owner, |r| {
        matches!(r, Reply::Reserved(_))
    })
    .await?;
    let complete = Command::Complete {
        owner,
        fingerprint: fingerprint(),
        result: idem::StoredResult::Value(idem::record::Body::new(&b"\"ch_1\""[..])),
        retention: options.retention(),
    };
    match store.apply(&operation(), key, complete).await {
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
    reserve(store, options, key, owner, |r| {
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
            let k = key(&r, "hot", concurrency, i / group);
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
    reserve(store, &options, &pending, owner(7, 0), |r| {
        matches!(r, Reply::Reserved(_))
    })
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

impl BenchReport {
    fn phase(&self, concurrency: usize, name: &str) -> Option<&Phase> {
        self.levels
            .iter()
            .find(|(c, _, _)| *c == concurrency)
            .and_then(|(_, phases, _)| phases.iter().find(|p| p.name == name))
    }

    fn per_s(&self, concurrency: usize, name: &str) -> Option<f64> {
        self.phase(concurrency, name).map(|p| p.load.per_second())
    }

    /// The highest concurrency measured: the headline figures are at this level (256 by
    /// default).
    pub fn headline_concurrency(&self) -> usize {
        self.levels.iter().map(|(c, _, _)| *c).max().unwrap_or(0)
    }

    /// A human-readable table, one line per phase, then the ratios.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "redis {}", self.redis_version);
        for (c, phases, hot) in &self.levels {
            let _ = writeln!(out, "concurrency {c}");
            for p in phases {
                let _ = writeln!(
                    out,
                    "  {:<10} {:>10.0} calls/s  p50 {:>8.3} ms  p99 {:>8.3} ms  errors {:>4}  requests/call {:.2}  server: {}",
                    p.name,
                    p.load.per_second(),
                    p.load.p50.as_secs_f64() * 1e3,
                    p.load.p99.as_secs_f64() * 1e3,
                    p.load.errors,
                    p.requests_per_call(),
                    p.commands.per_call(p.load.calls + p.load.errors),
                );
            }
            let _ = writeln!(
                out,
                "  one_key: {} keys, {} effects, {} waiters, {:.1} waiter requests per second of waiting",
                hot.keys,
                hot.effects,
                hot.waiters,
                self.waiter_requests_per_s(*c).unwrap_or(0.0),
            );
        }
        let _ = writeln!(
            out,
            "record bytes (MEMORY USAGE): pending {}, completed {}",
            self.pending_bytes.map_or("?".into(), |b| b.to_string()),
            self.completed_bytes.map_or("?".into(), |b| b.to_string()),
        );
        for (name, value) in self.ratios() {
            let _ = writeln!(out, "{name}: {value:.3}");
        }
        out
    }

    /// Requests a waiter sends per second of waiting in the `one_key` phase: all requests
    /// less the two of each executing call, over the time waiters spent.
    pub fn waiter_requests_per_s(&self, concurrency: usize) -> Option<f64> {
        let (_, _, hot) = self.levels.iter().find(|(c, _, _)| *c == concurrency)?;
        let phase = self.phase(concurrency, "one_key")?;
        if hot.waiting_secs == 0.0 {
            return None;
        }
        let waiter_requests = phase.requests.saturating_sub(2 * hot.effects);
        Some(waiter_requests as f64 / hot.waiting_secs)
    }

    /// The ratios BENCHMARKS.md sets targets for.
    pub fn ratios(&self) -> Vec<(&'static str, f64)> {
        let top = self.headline_concurrency();
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        [
            (
                "fresh / raw_fresh",
                ratio(self.per_s(top, "fresh"), self.per_s(top, "raw_fresh")),
            ),
            (
                "replay / raw_replay",
                ratio(self.per_s(top, "replay"), self.per_s(top, "raw_replay")),
            ),
            (
                "fresh / ping",
                ratio(self.per_s(top, "fresh"), self.per_s(top, "ping")),
            ),
            (
                "replay / ping",
                ratio(self.per_s(top, "replay"), self.per_s(top, "ping")),
            ),
            (
                "fresh / ping at concurrency 1",
                ratio(self.per_s(1, "fresh"), self.per_s(1, "ping")),
            ),
        ]
        .into_iter()
        .filter_map(|(name, r)| r.map(|r| (name, r)))
        .collect()
    }

    /// One JSON object: the headline fields BENCHMARKS.md names, then every phase.
    pub fn json(&self) -> Value {
        let top = self.headline_concurrency();
        let mut o = Map::new();
        let mut put = |name: &str, v: Option<f64>| {
            o.insert(name.to_owned(), v.map_or(Value::Null, Value::from));
        };
        put("fresh_per_s", self.per_s(top, "fresh"));
        put("replay_per_s", self.per_s(top, "replay"));
        put(
            "commands_per_fresh",
            self.phase(top, "fresh").map(Phase::requests_per_call),
        );
        put(
            "commands_per_replay",
            self.phase(top, "replay").map(Phase::requests_per_call),
        );
        put("baseline_ping_per_s", self.per_s(top, "ping"));
        put("baseline_fresh_per_s", self.per_s(top, "raw_fresh"));
        put("baseline_replay_per_s", self.per_s(top, "raw_replay"));
        put("fresh_per_s_c1", self.per_s(1, "fresh"));
        put("baseline_ping_per_s_c1", self.per_s(1, "ping"));
        put("waiter_commands_per_s", self.waiter_requests_per_s(top));
        o.insert("concurrency".into(), json!(top));
        o.insert("pending_record_bytes".into(), json!(self.pending_bytes));
        o.insert("completed_record_bytes".into(), json!(self.completed_bytes));
        o.insert("redis_version".into(), json!(self.redis_version));
        let levels: Vec<Value> = self
            .levels
            .iter()
            .map(|(c, phases, hot)| {
                let phases: Map<String, Value> = phases
                    .iter()
                    .map(|p| {
                        let calls = p.load.calls + p.load.errors;
                        (
                            p.name.to_owned(),
                            json!({
                                "per_s": p.load.per_second(),
                                "calls": p.load.calls,
                                "errors": p.load.errors,
                                "p50_us": p.load.p50.as_micros() as u64,
                                "p99_us": p.load.p99.as_micros() as u64,
                                "requests_per_call": p.requests_per_call(),
                                "server_commands_per_call":
                                    p.commands.executed() as f64 / calls.max(1) as f64,
                            }),
                        )
                    })
                    .collect();
                json!({
                    "concurrency": c,
                    "phases": phases,
                    "one_key": {
                        "keys": hot.keys,
                        "effects": hot.effects,
                        "waiters": hot.waiters,
                        "waiting_secs": hot.waiting_secs,
                    },
                })
            })
            .collect();
        o.insert("levels".into(), Value::Array(levels));
        for (name, r) in self.ratios() {
            o.insert(format!("ratio {name}"), json!(r));
        }
        Value::Object(o)
    }
}

/// Parses `bench` arguments: `--redis URL` (required), `--concurrency N` (repeatable or
/// comma-separated; default 1, 64, 256), `--window-ms MS` (default 2000), `--json`.
pub fn parse_args(args: &[String]) -> Result<(BenchConfig, bool), String> {
    let mut config = BenchConfig::default();
    let mut url = None;
    let mut json = false;
    let mut levels: Vec<usize> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "--redis" => url = Some(value("--redis")?),
            "--concurrency" => {
                for part in value("--concurrency")?.split(',') {
                    let n: usize = part
                        .trim()
                        .parse()
                        .map_err(|_| format!("--concurrency: not a number: {part:?}"))?;
                    if n == 0 {
                        return Err("--concurrency must be at least 1".into());
                    }
                    levels.push(n);
                }
            }
            "--window-ms" => {
                let ms: u64 = value("--window-ms")?
                    .parse()
                    .map_err(|_| "--window-ms: not a number".to_owned())?;
                if ms == 0 {
                    return Err("--window-ms must be at least 1".into());
                }
                config.window = Duration::from_millis(ms);
            }
            "--json" => json = true,
            other => return Err(format!("bench: unknown argument {other:?}")),
        }
    }
    config.url = url.ok_or("bench needs --redis URL")?;
    if !levels.is_empty() {
        levels.sort_unstable();
        levels.dedup();
        config.concurrency = levels;
    }
    Ok((config, json))
}

/// `idem-sim bench ...`: parses `args`, runs the bench on a multi-threaded runtime, prints
/// the table (and, with `--json`, one JSON object as the last line). Exit status 2 on bad
/// arguments, 1 when the bench could not run.
pub fn main(args: &[String]) -> std::process::ExitCode {
    use std::process::ExitCode;
    let (config, json) = match parse_args(args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("idem-sim bench: {message}");
            eprintln!(
                "usage: idem-sim bench --redis URL [--concurrency N[,N...]] [--window-ms MS] [--json]"
            );
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("idem-sim bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&config)) {
        Ok(report) => {
            print!("{}", report.text());
            if json {
                println!("{}", report.json());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idem-sim bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn arguments_parse_and_refuse_clearly() {
        let (c, json) =
            parse_args(&args("--redis redis://h:1 --concurrency 256,1 --json")).unwrap();
        assert_eq!(c.url, "redis://h:1");
        assert_eq!(c.concurrency, vec![1, 256]);
        assert!(json);
        let (c, json) = parse_args(&args("--redis redis://h:1")).unwrap();
        assert_eq!(c.concurrency, vec![1, 64, 256]);
        assert!(!json);
        assert!(
            parse_args(&args("--concurrency 4"))
                .unwrap_err()
                .contains("--redis")
        );
        assert!(parse_args(&args("--redis u --concurrency 0")).is_err());
        assert!(parse_args(&args("--redis u --concurrency x")).is_err());
        assert!(
            parse_args(&args("--redis u --bogus"))
                .unwrap_err()
                .contains("--bogus")
        );
        assert!(
            parse_args(&args("--redis"))
                .unwrap_err()
                .contains("needs a value")
        );
    }
}
