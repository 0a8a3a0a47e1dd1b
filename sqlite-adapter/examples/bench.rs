//! Throughput and latency of idem on SQLite against the least the database could do for
//! the same calls, in one run, on one connection pool.
//!
//! ```text
//! cargo run -p idem-sqlite --release --example bench -- \
//!     [--dir /tmp] [--concurrency 1,4,16] [--window-ms 2000] [--rounds 5] \
//!     [--synchronous full|normal]
//! ```
//!
//! The run creates a database file of its own in `--dir` (default: the system's temporary
//! directory) and removes it at the end. For each concurrency, N closed-loop callers run
//! each phase for the window, cut into `--rounds` slices that the phases take in turn (so
//! that load from elsewhere on a shared machine weighs on every phase alike):
//!
//! - `bare_fresh`: one transaction per call on the store's pool, `BEGIN IMMEDIATE`,
//!   `INSERT … ON CONFLICT DO NOTHING` of a pending row, `UPDATE` of it to completed,
//!   `COMMIT`, queued on an in-process lock as the store's writers are: the least a fresh
//!   call needs.
//! - `bare_busy`: the same without the in-process lock, the writers meeting only SQLite's
//!   file lock and its busy handler (what the store's writer lock saves).
//! - `bare_replay`: one primary-key `SELECT` of a completed row.
//! - `fresh`: `Coordinator::execute` through `SqliteStore` on a new key (a reserve and a
//!   complete: two commands decided in write transactions, which the store's group commit
//!   shares with other callers' commands queued meanwhile).
//! - `fresh_solo`: the same through a store built with `group_commit(false)` on the same
//!   file: each command commits on its own.
//! - `raw_replay`: the store's reserve alone (`Store::apply`) on a key completed in `fresh`
//!   (one plain read, decided by the record machine).
//! - `replay`: `Coordinator::execute` on a key completed in `fresh` (one plain read).
//! - `tx_bare`: the caller's own transaction alone: `BEGIN IMMEDIATE`, `INSERT` of an
//!   order, `COMMIT`, under the in-process lock.
//! - `tx_fresh`: the same transaction through `in_transaction`: the reserve (its own write
//!   transaction), then `BEGIN IMMEDIATE`, the `INSERT`, the complete, `COMMIT`.
//!
//! `tx/call` is the commands decided in write transactions per call, and `commits/call` the
//! write transactions committed per call, both counted by the store (the bare phases run a
//! fixed number; `fresh_solo` commits each command on its own).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::{Coordinator, Fingerprint, Options};
use idem_sqlite::{SqliteStore, Synchronous, in_transaction};
use sqlx::{Connection, SqlitePool};
use tokio::sync::Mutex;

struct Args {
    dir: PathBuf,
    concurrency: Vec<usize>,
    window: Duration,
    rounds: u32,
    synchronous: Synchronous,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        dir: std::env::temp_dir(),
        concurrency: vec![1, 4, 16],
        window: Duration::from_millis(2_000),
        rounds: 5,
        synchronous: Synchronous::Full,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value),
            "--concurrency" => {
                args.concurrency = value
                    .split(',')
                    .map(|n| n.parse().map_err(|e| format!("--concurrency {n}: {e}")))
                    .collect::<Result<_, _>>()?;
            }
            "--window-ms" => {
                args.window =
                    Duration::from_millis(value.parse().map_err(|e| format!("--window-ms: {e}"))?);
            }
            "--rounds" => {
                args.rounds = value.parse().map_err(|e| format!("--rounds: {e}"))?;
            }
            "--synchronous" => {
                args.synchronous = match value.as_str() {
                    "full" => Synchronous::Full,
                    "normal" => Synchronous::Normal,
                    other => return Err(format!("--synchronous {other}: full or normal")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.rounds == 0 {
        return Err("--rounds needs a number above zero".to_owned());
    }
    if args.concurrency.is_empty() || args.concurrency.contains(&0) {
        return Err("--concurrency needs numbers above zero".to_owned());
    }
    Ok(args)
}

/// What one phase measured.
struct Phase {
    name: &'static str,
    calls: u64,
    errors: u64,
    seconds: f64,
    latencies: Vec<Duration>,
    transactions: f64,
    commits: f64,
}

impl Phase {
    fn new(name: &'static str, run: (u64, u64, f64, Vec<Duration>), transactions: f64) -> Self {
        let (calls, errors, seconds, latencies) = run;
        Self {
            name,
            calls,
            errors,
            seconds,
            latencies,
            transactions,
            commits: transactions,
        }
    }

    fn with_commits(mut self, commits: f64) -> Self {
        self.commits = commits;
        self
    }

    /// Adds another slice of the same phase.
    fn merge(&mut self, other: Phase) {
        let calls = self.calls + other.calls;
        let mean =
            |a: f64, b: f64| (a * self.calls as f64 + b * other.calls as f64) / calls.max(1) as f64;
        self.transactions = mean(self.transactions, other.transactions);
        self.commits = mean(self.commits, other.commits);
        self.calls = calls;
        self.errors += other.errors;
        self.seconds += other.seconds;
        self.latencies.extend(other.latencies);
        self.latencies.sort();
    }

    fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies.len() - 1) as f64 * p).round() as usize;
        self.latencies[i]
    }

    fn rate(&self) -> f64 {
        self.calls as f64 / self.seconds
    }
}

/// Runs `call(worker, i)` in `concurrency` closed loops for `window`.
async fn run<F, Fut>(
    concurrency: usize,
    window: Duration,
    call: F,
) -> (u64, u64, f64, Vec<Duration>)
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let call = Arc::new(call);
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|worker| {
            let (call, errors) = (Arc::clone(&call), Arc::clone(&errors));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0;
                while started.elapsed() < window {
                    let began = Instant::now();
                    if !call(worker, i).await {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    latencies.push(began.elapsed());
                    i += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap_or_default());
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort();
    let calls = latencies.len() as u64;
    (calls, errors.load(Ordering::Relaxed), seconds, latencies)
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"bench")
}

/// One bare fresh call: a pending row inserted and completed in one write transaction.
async fn bare_fresh(pool: &SqlitePool, key: String) -> Result<(), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query(
        "INSERT INTO bare (operation, key, state, owner, fingerprint, body, expires_at) \
         VALUES (X'62', ?1, 1, ?2, ?3, NULL, 0) ON CONFLICT DO NOTHING",
    )
    .bind(key.as_bytes().to_vec())
    .bind(vec![1_u8; 16])
    .bind(vec![2_u8; 32])
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE bare SET state = 2, body = ?2, expires_at = 1 \
         WHERE operation = X'62' AND key = ?1",
    )
    .bind(key.as_bytes().to_vec())
    .bind(b"\"ch_1\"".to_vec())
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

async fn level(
    store: &SqliteStore,
    solo: &SqliteStore,
    run_id: u64,
    round: u32,
    concurrency: usize,
    window: Duration,
) -> Vec<Phase> {
    let pool = store.pool().clone();
    let lock = Arc::new(Mutex::new(()));
    let mut phases = Vec::new();
    let key = move |phase: &'static str| {
        move |worker: usize, i: u64| format!("{run_id}-{concurrency}-{round}-{phase}-{worker}-{i}")
    };

    let (p, l, k) = (pool.clone(), lock.clone(), key("bare"));
    let bare = run(concurrency, window, move |w, i| {
        let (pool, lock, key) = (p.clone(), l.clone(), k(w, i));
        async move {
            let _writer = lock.lock().await;
            bare_fresh(&pool, key).await.is_ok()
        }
    })
    .await;
    let bare_made = bare.0.max(1);
    phases.push(Phase::new("bare_fresh", bare, 1.0));

    let (p, k) = (pool.clone(), key("busy"));
    let busy = run(concurrency, window, move |w, i| {
        let (pool, key) = (p.clone(), k(w, i));
        async move { bare_fresh(&pool, key).await.is_ok() }
    })
    .await;
    phases.push(Phase::new("bare_busy", busy, 1.0));

    let (p, k) = (pool.clone(), key("bare"));
    let replay = run(concurrency, window, move |w, i| {
        let (pool, key) = (p.clone(), k(w, i % (bare_made / concurrency as u64).max(1)));
        async move {
            sqlx::query(
                "SELECT state, owner, fingerprint, body, expires_at FROM bare \
                 WHERE operation = X'62' AND key = ?1",
            )
            .bind(key.into_bytes())
            .fetch_optional(&pool)
            .await
            .is_ok()
        }
    })
    .await;
    phases.push(Phase::new("bare_replay", replay, 0.0));

    // fresh, then replay on the keys fresh completed.
    let coordinator = Coordinator::new(store.clone(), Options::default());
    let made: Arc<Vec<AtomicU64>> = Arc::new((0..concurrency).map(|_| AtomicU64::new(0)).collect());
    let before = store.stats().write_transactions;
    let batches = store.stats().batches;
    let (c, m, k) = (coordinator.clone(), Arc::clone(&made), key("idem"));
    let fresh = run(concurrency, window, move |w, i| {
        let (coordinator, key, made) = (c.clone(), k(w, i), Arc::clone(&m));
        async move {
            let done = coordinator
                .execute("payment.charge", key, fingerprint(), |_claim| async {
                    Ok::<_, std::convert::Infallible>("ch_1".to_owned())
                })
                .await;
            made[w].store(i + 1, Ordering::Relaxed);
            done.is_ok()
        }
    })
    .await;
    let per_call = |before: u64, calls: u64| {
        (store.stats().write_transactions - before) as f64 / calls.max(1) as f64
    };
    let transactions = per_call(before, fresh.0);
    let commits = (store.stats().batches - batches) as f64 / fresh.0.max(1) as f64;
    phases.push(Phase::new("fresh", fresh, transactions).with_commits(commits));

    let solo_coordinator = Coordinator::new(solo.clone(), Options::default());
    let before = solo.stats().write_transactions;
    let (c, k) = (solo_coordinator, key("solo"));
    let fresh_solo = run(concurrency, window, move |w, i| {
        let (coordinator, key) = (c.clone(), k(w, i));
        async move {
            coordinator
                .execute("payment.charge", key, fingerprint(), |_claim| async {
                    Ok::<_, std::convert::Infallible>("ch_1".to_owned())
                })
                .await
                .is_ok()
        }
    })
    .await;
    let transactions =
        (solo.stats().write_transactions - before) as f64 / fresh_solo.0.max(1) as f64;
    phases.push(Phase::new("fresh_solo", fresh_solo, transactions));

    let (st, m, k) = (store.clone(), Arc::clone(&made), key("idem"));
    let raw_replay = run(concurrency, window, move |w, i| {
        let key = k(w, i % m[w].load(Ordering::Relaxed).max(1));
        let store = st.clone();
        async move {
            let (operation, key) = (
                idem::Operation::new("payment.charge").expect("valid"),
                idem::Key::new(key).expect("valid"),
            );
            let reserve = idem::record::Command::Reserve {
                owner: idem::OwnerToken::from_u128(u128::from(i) + 1),
                fingerprint: fingerprint(),
                lease: Duration::from_secs(30),
            };
            matches!(
                idem::Store::apply(&store, &operation, &key, reserve).await,
                Ok(idem::record::Reply::Replay { .. })
            )
        }
    })
    .await;
    phases.push(Phase::new("raw_replay", raw_replay, 0.0));

    let before = store.stats().write_transactions;
    let (c, m, k) = (coordinator.clone(), Arc::clone(&made), key("idem"));
    let replay = run(concurrency, window, move |w, i| {
        let key = k(w, i % m[w].load(Ordering::Relaxed).max(1));
        let coordinator = c.clone();
        async move {
            let replayed = coordinator
                .execute("payment.charge", key, fingerprint(), |_claim| async {
                    Ok::<_, std::convert::Infallible>("ch_2".to_owned())
                })
                .await;
            matches!(replayed, Ok(value) if value == "ch_1")
        }
    })
    .await;
    let transactions = per_call(before, replay.0);
    phases.push(Phase::new("replay", replay, transactions));

    let (p, l) = (pool.clone(), lock.clone());
    let tx_bare = run(concurrency, window, move |_w, _i| {
        let (pool, lock) = (p.clone(), l.clone());
        async move {
            let _writer = lock.lock().await;
            let step = async {
                let mut conn = pool.acquire().await?;
                let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
                sqlx::query("INSERT INTO orders (cart) VALUES ('c') RETURNING id")
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await
            };
            step.await.is_ok()
        }
    })
    .await;
    phases.push(Phase::new("tx_bare", tx_bare, 1.0));

    let orders = coordinator
        .operation::<i64, sqlx::Error>("order.create")
        .expect("a valid operation");
    let before = store.stats().write_transactions;
    let batches = store.stats().batches;
    let k = key("tx");
    let tx_fresh = run(concurrency, window, move |w, i| {
        let (orders, key) = (orders.clone(), k(w, i));
        async move {
            in_transaction(&orders, key, fingerprint(), |_claim, mut tx| async move {
                let id: i64 =
                    sqlx::query_scalar("INSERT INTO orders (cart) VALUES ('c') RETURNING id")
                        .fetch_one(&mut *tx)
                        .await?;
                Ok((id, tx))
            })
            .await
            .is_ok()
        }
    })
    .await;
    let transactions = per_call(before, tx_fresh.0);
    // The reserves' group commits, and each call's own transaction.
    let commits = (store.stats().batches - batches) as f64 / tx_fresh.0.max(1) as f64 + 1.0;
    phases.push(Phase::new("tx_fresh", tx_fresh, transactions).with_commits(commits));
    phases
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let dir = args
        .dir
        .join(format!("idem-sqlite-bench-{}-{run_id}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = bench(&args, &dir, run_id).await;
    std::fs::remove_dir_all(&dir)?;
    outcome
}

async fn bench(
    args: &Args,
    dir: &std::path::Path,
    run_id: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let size = u32::try_from(*args.concurrency.iter().max().unwrap_or(&1))?;
    let store = SqliteStore::builder()
        .command_timeout(Duration::from_secs(5))
        .max_connections(size + 1)
        .synchronous(args.synchronous)
        .open(dir.join("bench.db"))
        .await?;
    store.migrate().await?;
    let solo = SqliteStore::builder()
        .command_timeout(Duration::from_secs(5))
        .max_connections(size + 1)
        .synchronous(args.synchronous)
        .group_commit(false)
        .open(dir.join("bench.db"))
        .await?;
    sqlx::raw_sql(
        "CREATE TABLE bare (operation BLOB NOT NULL, key BLOB NOT NULL, state INTEGER NOT NULL, \
         owner BLOB NOT NULL, fingerprint BLOB NOT NULL, body BLOB, expires_at INTEGER NOT NULL, \
         fence INTEGER, PRIMARY KEY (operation, key)) STRICT; \
         CREATE INDEX bare_expiry ON bare (expires_at); \
         CREATE TABLE orders (id INTEGER PRIMARY KEY, cart TEXT NOT NULL);",
    )
    .execute(store.pool())
    .await?;
    println!(
        "synchronous = {:?}, file in {}",
        args.synchronous,
        args.dir.display()
    );
    println!(
        "{:<12} {:>5} {:>10} {:>9} {:>9} {:>8} {:>13} {:>7}",
        "phase", "conc", "calls/s", "p50 ms", "p99 ms", "tx/call", "commits/call", "errors"
    );
    for &concurrency in &args.concurrency {
        let slice = args.window / args.rounds;
        let mut phases: Vec<Phase> = Vec::new();
        for round in 0..args.rounds {
            let slices = level(&store, &solo, run_id, round, concurrency, slice).await;
            if phases.is_empty() {
                phases = slices;
            } else {
                for (phase, more) in phases.iter_mut().zip(slices) {
                    phase.merge(more);
                }
            }
        }
        for phase in &phases {
            println!(
                "{:<12} {:>5} {:>10.0} {:>9.3} {:>9.3} {:>8.2} {:>13.2} {:>7}",
                phase.name,
                concurrency,
                phase.rate(),
                ms(phase.percentile(0.5)),
                ms(phase.percentile(0.99)),
                phase.transactions,
                phase.commits,
                phase.errors
            );
        }
        let rate = |name: &str| {
            phases
                .iter()
                .find(|p| p.name == name)
                .map_or(0.0, Phase::rate)
        };
        println!(
            "ratios at {concurrency}: fresh/bare_fresh {:.2}, fresh_solo/bare_fresh {:.2}, \
             replay/bare_replay {:.2}, raw_replay/bare_replay {:.2}, tx_fresh/tx_bare {:.2}, \
             bare_busy/bare_fresh {:.2}",
            rate("fresh") / rate("bare_fresh"),
            rate("fresh_solo") / rate("bare_fresh"),
            rate("replay") / rate("bare_replay"),
            rate("raw_replay") / rate("bare_replay"),
            rate("tx_fresh") / rate("tx_bare"),
            rate("bare_busy") / rate("bare_fresh"),
        );
    }
    store.pool().close().await;
    solo.pool().close().await;
    Ok(())
}
