//! Throughput and latency of idem on MariaDB against the least the database could do for
//! the same calls, in one run, on one connection pool.
//!
//! ```text
//! cargo run -p idem-mysql --release --example bench -- \
//!     [--url mysql://root@127.0.0.1:3306] [--concurrency 1,64] \
//!     [--window-ms 2000] [--rounds 5]
//! ```
//!
//! The run creates a database of its own (a unique name) on the server at `--url` (or
//! `DATABASE_URL`) and drops it at the end. For each concurrency, N closed-loop callers
//! run each phase for the window, cut into `--rounds` slices that the phases take in turn
//! (so that load from elsewhere on a shared machine weighs on every phase alike):
//!
//! - `bare_fresh`: one transaction per call, `BEGIN`, `INSERT IGNORE` of a pending row,
//!   `UPDATE` of it to completed, `COMMIT`: the least a fresh call needs.
//! - `bare_replay`: one primary-key `SELECT` of a completed row.
//! - `fresh`: `Coordinator::execute` through `MySqlStore` on a new key.
//! - `raw_replay`: the store's reserve alone (`Store::apply`) on a key completed in `fresh`.
//! - `replay`: `Coordinator::execute` on a key completed in `fresh`.
//! - `fresh_1`, `raw_replay_1`, `replay_1`: the same with
//!   `MySqlStoreBuilder::read_first(false)` (a reserve tries its `INSERT` first).
//! - `tx_bare`: the caller's own transaction alone: `BEGIN`, `INSERT` of an order, `COMMIT`.
//! - `tx_fresh`: the same transaction through `in_transaction`: the reserve (on its own),
//!   then `SET` (the isolation level), `BEGIN`, the `INSERT`, the complete, `COMMIT`.
//!
//! Statements per call are counted, not timed: the store counts what it sends, and the
//! bare phases send a fixed number.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::{Coordinator, Fingerprint, Options};
use idem_mysql::{MySqlStore, in_transaction};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, MySqlPool};

struct Args {
    url: String,
    concurrency: Vec<usize>,
    window: Duration,
    rounds: u32,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        url: std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".to_owned()),
        concurrency: vec![1, 64],
        window: Duration::from_millis(2_000),
        rounds: 5,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--url" => args.url = value,
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
    statements: f64,
}

impl Phase {
    /// Adds another slice of the same phase.
    fn merge(&mut self, other: Phase) {
        let calls = self.calls + other.calls;
        self.statements = (self.statements * self.calls as f64
            + other.statements * other.calls as f64)
            / calls.max(1) as f64;
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

/// Whether `result` is a success; the first failure of each phase is printed, so that an
/// error count never goes unexplained.
fn ok<T, E: std::fmt::Debug>(phase: &'static str, result: Result<T, E>) -> bool {
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    match result {
        Ok(_) => true,
        Err(error) => {
            let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
            if !seen.contains(&phase) {
                seen.push(phase);
                eprintln!("{phase}: first error: {error:?}");
            }
            false
        }
    }
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"bench")
}

/// `fresh` on new keys and `replay` on the keys `fresh` completed, through a coordinator
/// on `store`; `raw_replay` is the store's reserve alone on those keys.
async fn idem_phases(
    store: &MySqlStore,
    names: [&'static str; 3],
    key: impl Fn(usize, u64) -> String + Clone + Send + Sync + 'static,
    concurrency: usize,
    window: Duration,
) -> Vec<Phase> {
    let mut phases = Vec::new();
    let coordinator = Coordinator::new(store.clone(), Options::default());
    // How many keys each worker made in `fresh`: the replays cycle through them.
    let made: Arc<Vec<AtomicU64>> = Arc::new((0..concurrency).map(|_| AtomicU64::new(0)).collect());

    let before = store.stats().statements;
    let (c, m, k) = (coordinator.clone(), Arc::clone(&made), key.clone());
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (coordinator, key, made) = (c.clone(), k(w, i), Arc::clone(&m));
        async move {
            let done = coordinator
                .execute("payment.charge", key, fingerprint(), |_claim| async {
                    Ok::<_, std::convert::Infallible>("ch_1".to_owned())
                })
                .await;
            made[w].store(i + 1, Ordering::Relaxed);
            ok("fresh", done)
        }
    })
    .await;
    let statements = (store.stats().statements - before) as f64 / calls.max(1) as f64;
    phases.push(Phase {
        name: names[0],
        calls,
        errors,
        seconds,
        latencies,
        statements,
    });

    let replayed_key = move |made: &[AtomicU64], w: usize, i: u64| {
        key(w, i % made[w].load(Ordering::Relaxed).max(1))
    };
    let before = store.stats().statements;
    let (s, m, k) = (store.clone(), Arc::clone(&made), replayed_key.clone());
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (store, key) = (s.clone(), k(&m, w, i));
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
    let statements = (store.stats().statements - before) as f64 / calls.max(1) as f64;
    phases.push(Phase {
        name: names[1],
        calls,
        errors,
        seconds,
        latencies,
        statements,
    });

    let before = store.stats().statements;
    let (c, m, k) = (coordinator.clone(), Arc::clone(&made), replayed_key);
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (coordinator, key) = (c.clone(), k(&m, w, i));
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
    let statements = (store.stats().statements - before) as f64 / calls.max(1) as f64;
    phases.push(Phase {
        name: names[2],
        calls,
        errors,
        seconds,
        latencies,
        statements,
    });
    phases
}

async fn level(
    pool: &MySqlPool,
    stores: &[MySqlStore; 2],
    run_id: u64,
    round: u32,
    concurrency: usize,
    window: Duration,
) -> Vec<Phase> {
    let mut phases = Vec::new();
    let key = move |phase: &'static str| {
        move |worker: usize, i: u64| format!("{run_id}-{concurrency}-{round}-{phase}-{worker}-{i}")
    };

    // bare_fresh: BEGIN, INSERT IGNORE, UPDATE, COMMIT.
    let (p, k) = (pool.clone(), key("bare"));
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (pool, key) = (p.clone(), k(w, i));
        async move {
            let step = async {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "INSERT IGNORE INTO bare (operation, `key`, state, owner, fingerprint, body, expires_at) \
                     VALUES ('bench', ?, 1, ?, ?, NULL, 0)",
                )
                .bind(&key)
                .bind(vec![1_u8; 16])
                .bind(vec![2_u8; 32])
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE bare SET state = 2, body = ?, expires_at = 1 \
                     WHERE operation = 'bench' AND `key` = ?",
                )
                .bind(b"\"ch_1\"".to_vec())
                .bind(&key)
                .execute(&mut *tx)
                .await?;
                tx.commit().await
            };
            step.await.is_ok()
        }
    })
    .await;
    let bare_made = calls.max(1);
    phases.push(Phase {
        name: "bare_fresh",
        calls,
        errors,
        seconds,
        latencies,
        statements: 4.0,
    });

    // bare_replay: one primary-key SELECT of a row `bare_fresh` completed.
    let (p, k) = (pool.clone(), key("bare"));
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (pool, key) = (p.clone(), k(w, i % (bare_made / concurrency as u64).max(1)));
        async move {
            sqlx::query(
                "SELECT state, owner, fingerprint, body, expires_at FROM bare \
                 WHERE operation = 'bench' AND `key` = ?",
            )
            .bind(&key)
            .fetch_optional(&pool)
            .await
            .is_ok()
        }
    })
    .await;
    phases.push(Phase {
        name: "bare_replay",
        calls,
        errors,
        seconds,
        latencies,
        statements: 1.0,
    });

    let [store, insert_first] = stores;
    phases.extend(
        idem_phases(
            store,
            ["fresh", "raw_replay", "replay"],
            key("idem"),
            concurrency,
            window,
        )
        .await,
    );
    phases.extend(
        idem_phases(
            insert_first,
            ["fresh_1", "raw_replay_1", "replay_1"],
            key("one"),
            concurrency,
            window,
        )
        .await,
    );

    // tx_bare: the caller's own transaction.
    let p = pool.clone();
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |_w, _i| {
        let pool = p.clone();
        async move {
            let step = async {
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO orders (cart) VALUES ('c')")
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await
            };
            step.await.is_ok()
        }
    })
    .await;
    phases.push(Phase {
        name: "tx_bare",
        calls,
        errors,
        seconds,
        latencies,
        statements: 3.0,
    });

    // tx_fresh: the same transaction, its record completed inside it.
    let orders = Coordinator::new(store.clone(), Options::default())
        .operation::<u64, sqlx::Error>("order.create")
        .expect("a valid operation");
    let before = store.stats().statements;
    let k = key("tx");
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (orders, key) = (orders.clone(), k(w, i));
        async move {
            let done = in_transaction(&orders, key, fingerprint(), |_claim, mut tx| async move {
                let done = sqlx::query("INSERT INTO orders (cart) VALUES ('c')")
                    .execute(&mut *tx)
                    .await?;
                Ok((done.last_insert_id(), tx))
            })
            .await;
            ok("tx_fresh", done)
        }
    })
    .await;
    // The store's statements, plus `begin`'s SET and BEGIN, and the caller's own INSERT and
    // COMMIT.
    let statements = (store.stats().statements - before) as f64 / calls.max(1) as f64 + 4.0;
    phases.push(Phase {
        name: "tx_fresh",
        calls,
        errors,
        seconds,
        latencies,
        statements,
    });
    phases
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args()?;
    let admin: MySqlConnectOptions = args.url.parse()?;
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let name = format!("idem_bench_{}_{run_id}", std::process::id());
    let mut conn = admin.connect().await?;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
        .execute(&mut conn)
        .await?;
    let outcome = bench(&args, admin.clone().database(&name), run_id).await;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
        .execute(&mut conn)
        .await?;
    outcome
}

async fn bench(
    args: &Args,
    options: MySqlConnectOptions,
    run_id: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let size = u32::try_from(*args.concurrency.iter().max().unwrap_or(&1))?;
    let pool = MySqlPoolOptions::new()
        .max_connections(size)
        .min_connections(size)
        .connect_with(options)
        .await?;
    let store = MySqlStore::builder()
        .command_timeout(Duration::from_secs(5))
        .build(pool.clone());
    store.migrate().await?;
    let insert_first = MySqlStore::builder()
        .command_timeout(Duration::from_secs(5))
        .read_first(false)
        .build(pool.clone());
    let stores = [store, insert_first];
    sqlx::raw_sql(
        "CREATE TABLE bare LIKE idem_records; \
         CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, cart VARCHAR(16) NOT NULL) \
         ENGINE = InnoDB;",
    )
    .execute(&pool)
    .await?;
    println!(
        "{:<12} {:>5} {:>10} {:>9} {:>9} {:>11} {:>7}",
        "phase", "conc", "calls/s", "p50 ms", "p99 ms", "statements", "errors"
    );
    for &concurrency in &args.concurrency {
        // The phases take turns in short slices, so that a load that comes and goes on a
        // shared machine weighs on each of them alike.
        let slice = args.window / args.rounds;
        let mut phases: Vec<Phase> = Vec::new();
        for round in 0..args.rounds {
            let slices = level(&pool, &stores, run_id, round, concurrency, slice).await;
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
                "{:<12} {:>5} {:>10.0} {:>9.3} {:>9.3} {:>11.2} {:>7}",
                phase.name,
                concurrency,
                phase.rate(),
                ms(phase.percentile(0.5)),
                ms(phase.percentile(0.99)),
                phase.statements,
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
            "ratios at {concurrency}: fresh/bare_fresh {:.2}, replay/bare_replay {:.2}, \
             raw_replay/bare_replay {:.2} (read first); fresh_1 {:.2}, replay_1 {:.2} \
             (insert first); tx_fresh/tx_bare {:.2}",
            rate("fresh") / rate("bare_fresh"),
            rate("replay") / rate("bare_replay"),
            rate("raw_replay") / rate("bare_replay"),
            rate("fresh_1") / rate("bare_fresh"),
            rate("replay_1") / rate("bare_replay"),
            rate("tx_fresh") / rate("tx_bare"),
        );
    }
    pool.close().await;
    Ok(())
}
