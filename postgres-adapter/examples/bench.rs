//! Throughput and latency of idem on PostgreSQL against the least the database could do
//! for the same calls, in one run, on one connection pool.
//!
//! ```text
//! cargo run -p idem-postgres --release --example bench -- \
//!     [--url postgres://postgres@127.0.0.1:5432/postgres] [--concurrency 1,64] [--window-ms 2000]
//! ```
//!
//! The run creates a database of its own (a unique name) on the server at `--url` (or
//! `DATABASE_URL`) and drops it at the end. For each concurrency, N closed-loop callers
//! run each phase for the window:
//!
//! - `bare_fresh`: one transaction per call, `BEGIN`, `INSERT … ON CONFLICT DO NOTHING`
//!   of a pending row, `UPDATE` of it to completed, `COMMIT`: the least a fresh call needs.
//! - `fresh`: `Coordinator::execute` through `PostgresStore` on a new key.
//! - `bare_replay`: one primary-key `SELECT` of a completed row.
//! - `replay`: `Coordinator::execute` on a key completed in `fresh`.
//! - `tx_bare`: the caller's own transaction alone: `BEGIN`, `INSERT` of an order, `COMMIT`.
//! - `tx_fresh`: the same transaction through `in_transaction`: the reserve (on its own),
//!   then `BEGIN`, the `INSERT`, the complete, `COMMIT`.
//!
//! Statements per call are counted, not timed: the store counts what it sends, and the
//! bare phases send a fixed number.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idem::{Coordinator, Fingerprint, Options};
use idem_postgres::{PostgresStore, in_transaction};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, PgPool};

struct Args {
    url: String,
    concurrency: Vec<usize>,
    window: Duration,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        url: std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned()),
        concurrency: vec![1, 64],
        window: Duration::from_millis(2_000),
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
            other => return Err(format!("unknown flag {other}")),
        }
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

async fn level(
    pool: &PgPool,
    store: &PostgresStore,
    run_id: u64,
    concurrency: usize,
    window: Duration,
) -> Vec<Phase> {
    let mut phases = Vec::new();
    let coordinator = Coordinator::new(store.clone(), Options::default());
    let orders = coordinator
        .operation::<i64, sqlx::Error>("order.create")
        .expect("a valid operation");
    // How many keys each worker made in `fresh`: `replay` cycles through them.
    let made: Arc<Vec<AtomicU64>> = Arc::new((0..concurrency).map(|_| AtomicU64::new(0)).collect());
    let key = move |phase: &str, worker: usize, i: u64| {
        format!("{run_id}-{concurrency}-{phase}-{worker}-{i}")
    };

    // bare_fresh: BEGIN, INSERT … ON CONFLICT, UPDATE, COMMIT.
    let p = pool.clone();
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (pool, key) = (p.clone(), key("bare", w, i));
        async move {
            let step = async {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "INSERT INTO bare (operation, key, state, owner, fingerprint, body, expires_at) \
                     VALUES ('bench', $1, 1, $2, $3, NULL, 0) ON CONFLICT DO NOTHING",
                )
                .bind(&key)
                .bind(vec![1_u8; 16])
                .bind(vec![2_u8; 32])
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE bare SET state = 2, body = $2, expires_at = 1 \
                     WHERE operation = 'bench' AND key = $1",
                )
                .bind(&key)
                .bind(b"\"ch_1\"".to_vec())
                .execute(&mut *tx)
                .await?;
                tx.commit().await
            };
            step.await.is_ok()
        }
    })
    .await;
    phases.push(Phase {
        name: "bare_fresh",
        calls,
        errors,
        seconds,
        latencies,
        statements: 4.0,
    });

    // fresh: a new key through the coordinator.
    let before = store.stats().statements;
    let c = coordinator.clone();
    let counted = Arc::clone(&made);
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (coordinator, key, counted) = (c.clone(), key("idem", w, i), Arc::clone(&counted));
        async move {
            let done = coordinator
                .execute("payment.charge", key, fingerprint(), |_claim| async {
                    Ok::<_, std::convert::Infallible>("ch_1".to_owned())
                })
                .await;
            counted[w].store(i + 1, Ordering::Relaxed);
            done.is_ok()
        }
    })
    .await;
    let statements = (store.stats().statements - before) as f64 / calls.max(1) as f64;
    phases.push(Phase {
        name: "fresh",
        calls,
        errors,
        seconds,
        latencies,
        statements,
    });

    // bare_replay: one primary-key SELECT of a completed row.
    let p = pool.clone();
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (pool, key) = (p.clone(), key("bare", w, i % 64));
        async move {
            sqlx::query("SELECT state, owner, fingerprint, body, expires_at FROM bare WHERE operation = 'bench' AND key = $1")
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

    // raw_replay: the store's reserve on a completed key, without the driver.
    let before = store.stats().statements;
    let (s, m) = (store.clone(), Arc::clone(&made));
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (store, key) = (
            s.clone(),
            key("idem", w, i % m[w].load(Ordering::Relaxed).max(1)),
        );
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
        name: "raw_replay",
        calls,
        errors,
        seconds,
        latencies,
        statements,
    });

    // replay: keys completed in `fresh`, through the coordinator.
    let before = store.stats().statements;
    let (c, m) = (coordinator.clone(), Arc::clone(&made));
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (coordinator, key) = (
            c.clone(),
            key("idem", w, i % m[w].load(Ordering::Relaxed).max(1)),
        );
        async move {
            let replayed = coordinator
                .execute_with_provenance("payment.charge", key, fingerprint(), |_claim| async {
                    Ok::<_, std::convert::Infallible>("ch_2".to_owned())
                })
                .await;
            matches!(replayed, Ok(answer) if answer.value == "ch_1")
        }
    })
    .await;
    let statements = (store.stats().statements - before) as f64 / calls.max(1) as f64;
    phases.push(Phase {
        name: "replay",
        calls,
        errors,
        seconds,
        latencies,
        statements,
    });

    // tx_bare: the caller's own transaction.
    let p = pool.clone();
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |_w, _i| {
        let pool = p.clone();
        async move {
            let step = async {
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO orders (cart) VALUES ('c') RETURNING id")
                    .fetch_one(&mut *tx)
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
    let before = store.stats().statements;
    let (calls, errors, seconds, latencies) = run(concurrency, window, move |w, i| {
        let (orders, key) = (orders.clone(), key("tx", w, i));
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
    // The store's statements, plus the caller's own BEGIN, INSERT and COMMIT.
    let statements = (store.stats().statements - before) as f64 / calls.max(1) as f64 + 3.0;
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
    let admin: PgConnectOptions = args.url.parse()?;
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let name = format!("idem_bench_{}_{run_id}", std::process::id());
    let mut conn = admin.connect().await?;
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await?;
    let outcome = bench(&args, admin.clone().database(&name), run_id).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
    )))
    .execute(&mut conn)
    .await?;
    outcome
}

async fn bench(
    args: &Args,
    options: PgConnectOptions,
    run_id: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let size = u32::try_from(*args.concurrency.iter().max().unwrap_or(&1))?;
    let pool = PgPoolOptions::new()
        .max_connections(size)
        .min_connections(size)
        .connect_with(options)
        .await?;
    let store = PostgresStore::builder()
        .command_timeout(Duration::from_secs(5))
        .build(pool.clone());
    store.migrate().await?;
    sqlx::raw_sql(
        "CREATE TABLE bare (LIKE idem_records INCLUDING ALL); \
         CREATE TABLE orders (id bigserial PRIMARY KEY, cart text NOT NULL);",
    )
    .execute(&pool)
    .await?;
    println!(
        "{:<12} {:>5} {:>10} {:>9} {:>9} {:>11} {:>7}",
        "phase", "conc", "calls/s", "p50 ms", "p99 ms", "statements", "errors"
    );
    for &concurrency in &args.concurrency {
        let phases = level(&pool, &store, run_id, concurrency, args.window).await;
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
            "ratios at {concurrency}: fresh/bare_fresh {:.2}, replay/bare_replay {:.2}, tx_fresh/tx_bare {:.2}",
            rate("fresh") / rate("bare_fresh"),
            rate("replay") / rate("bare_replay"),
            rate("tx_fresh") / rate("tx_bare"),
        );
    }
    pool.close().await;
    Ok(())
}
