//! Throughput of the Redis store against baselines measured in the same run, on a
//! `redis-server` started here: `cargo bench -p idem-redis`.
//!
//! Rows: PING and a single `SET NX PX` (what a plain lock costs) on a multiplexed
//! connection, then the store's reserve alone and a whole reserve + complete, each at
//! concurrency 1 and 64, for a fixed time. Compare rows of one run only: the machine is
//! shared and absolute numbers move between runs.

#[path = "../tests/support/mod.rs"]
mod support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idem::Store;
use idem_core::record::{Command, StoredResult};
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken};
use idem_redis::RedisStore;
use support::RedisServer;

const RUN_FOR: Duration = Duration::from_secs(2);

/// Runs `op(i)` from `concurrency` tasks for `RUN_FOR`; returns operations per second.
async fn rate<F, Fut>(concurrency: usize, op: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (op, next) = (op.clone(), next.clone());
            tokio::spawn(async move {
                while start.elapsed() < RUN_FOR {
                    op(next.fetch_add(1, Ordering::Relaxed)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    next.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    runtime.block_on(async {
        let conn = server.conn().await;
        let store = RedisStore::connect(&server.url()).await.unwrap();
        let op = Operation::new("bench.charge").unwrap();
        let fp = Fingerprint::of_bytes(b"bench");
        println!(
            "{:<28} {:>12} {:>12}",
            "operation", "c=1 ops/s", "c=64 ops/s"
        );
        for name in [
            "PING",
            "SET NX PX",
            "store reserve",
            "store reserve+complete",
        ] {
            let mut rates = Vec::new();
            for concurrency in [1, 64] {
                let (conn, store, op) = (conn.clone(), store.clone(), op.clone());
                let run = rate(concurrency, move |i| {
                    let (mut conn, store, op) = (conn.clone(), store.clone(), op.clone());
                    async move {
                        let key = Key::new(format!("{}-{concurrency}-{i}", name.replace(' ', "_")))
                            .unwrap();
                        let owner = OwnerToken::from_u128(u128::from(i) + 1);
                        let reserve = Command::Reserve {
                            owner,
                            fingerprint: fp,
                            lease: Duration::from_secs(30),
                        };
                        match name {
                            "PING" => {
                                let _: String =
                                    redis::cmd("PING").query_async(&mut conn).await.unwrap();
                            }
                            "SET NX PX" => {
                                let _: Option<String> = redis::cmd("SET")
                                    .arg(key.as_str())
                                    .arg(owner.to_bytes().as_slice())
                                    .arg("NX")
                                    .arg("PX")
                                    .arg(30_000)
                                    .query_async(&mut conn)
                                    .await
                                    .unwrap();
                            }
                            "store reserve" => {
                                store.apply(&op, &key, reserve).await.unwrap();
                            }
                            _ => {
                                store.apply(&op, &key, reserve).await.unwrap();
                                let complete = Command::Complete {
                                    owner,
                                    fingerprint: fp,
                                    result: StoredResult::Value(Body::new(br#"{"charge":"ch_1"}"#)),
                                    retention: Duration::from_secs(3600),
                                };
                                store.apply(&op, &key, complete).await.unwrap();
                            }
                        }
                    }
                })
                .await;
                rates.push(rate_text(run));
            }
            println!("{name:<28} {:>12} {:>12}", rates[0], rates[1]);
        }
    });
}

fn rate_text(rate: f64) -> String {
    format!("{rate:.0}")
}
