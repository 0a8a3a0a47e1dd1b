//! The cost of `Coordinator::execute` on MemoryStore: a fresh key (reserve, run, complete),
//! a replay (one reserve), and 64 tasks on one key (one runs, the others wait or replay).
//! Baselines in the same run: a bare `HashMap` insert of a fresh key of the same shape, the
//! least an in-process store could do per call, and a bare `HashMap` lookup, the least a
//! replay cache could do. `replay_cached` is a replay answered by the replay cache, which
//! sends nothing to the store, so it costs the same on every store.
//!
//! The detached calls (the default, one spawned task per call) are measured beside attached
//! ones (the call runs in the caller's future), so the cost of surviving a dropped caller is
//! a ratio in the same run.
//!
//! `cargo bench -p idem-driver --bench execute`

use std::collections::HashMap;
use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use idem::{Coordinator, Fingerprint, MemoryStore, Options, ReplayCacheConfig};

const OP: &str = "payment.charge";
const TASKS: u64 = 64;

fn coordinator() -> Coordinator<MemoryStore> {
    Coordinator::new(MemoryStore::new(), Options::default())
}

async fn call(coordinator: &Coordinator<MemoryStore>, key: &str, fp: Fingerprint) -> u64 {
    let outcome = coordinator
        .execute(OP, key, fp, |_claim| async { Ok::<_, Infallible>(42_u64) })
        .await;
    match outcome {
        Ok(value) => value,
        Err(error) => panic!("the benchmark's call failed: {error}"),
    }
}

async fn attached(coordinator: &Coordinator<MemoryStore>, key: &str, fp: Fingerprint) -> u64 {
    let outcome = coordinator
        .execute_attached(OP, key, fp, |_claim| async { Ok::<_, Infallible>(42_u64) })
        .await;
    match outcome {
        Ok(value) => value,
        Err(error) => panic!("the benchmark's call failed: {error}"),
    }
}

fn benches(c: &mut Criterion) {
    let fp = Fingerprint::of_bytes(b"order-1 100");
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");

    let mut group = c.benchmark_group("execute");
    group.throughput(Throughput::Elements(1));
    group.bench_function("baseline_hashmap_insert_fresh_key", |b| {
        b.iter_custom(|iters| {
            let mut map = HashMap::new();
            let start = Instant::now();
            for i in 0..iters {
                map.insert(format!("{OP}:k{i}"), black_box(b"42".to_vec()));
            }
            start.elapsed()
        });
    });
    group.bench_function("fresh_key", |b| {
        b.iter_custom(|iters| {
            current.block_on(async {
                let coordinator = coordinator();
                let start = Instant::now();
                for i in 0..iters {
                    black_box(call(&coordinator, &format!("k{i}"), fp).await);
                }
                start.elapsed()
            })
        });
    });
    group.bench_function("replay", |b| {
        b.iter_custom(|iters| {
            current.block_on(async {
                let coordinator = coordinator();
                call(&coordinator, "k", fp).await;
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(call(&coordinator, "k", fp).await);
                }
                start.elapsed()
            })
        });
    });
    group.bench_function("baseline_hashmap_lookup", |b| {
        let map: HashMap<String, Vec<u8>> = (0..10_000)
            .map(|i| (format!("{OP}:k{i}"), b"42".to_vec()))
            .collect();
        let key = format!("{OP}:k42");
        b.iter(|| black_box(map.get(black_box(key.as_str())).map(Vec::len)));
    });
    group.bench_function("replay_cached", |b| {
        b.iter_custom(|iters| {
            current.block_on(async {
                let coordinator = coordinator().with_replay_cache(ReplayCacheConfig::default());
                call(&coordinator, "k", fp).await;
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(call(&coordinator, "k", fp).await);
                }
                let elapsed = start.elapsed();
                assert_eq!(coordinator.metrics().replay_cache.hits, iters);
                elapsed
            })
        });
    });
    group.bench_function("fresh_key_attached", |b| {
        b.iter_custom(|iters| {
            current.block_on(async {
                let coordinator = coordinator();
                let start = Instant::now();
                for i in 0..iters {
                    black_box(attached(&coordinator, &format!("k{i}"), fp).await);
                }
                start.elapsed()
            })
        });
    });
    group.bench_function("replay_attached", |b| {
        b.iter_custom(|iters| {
            current.block_on(async {
                let coordinator = coordinator();
                attached(&coordinator, "k", fp).await;
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(attached(&coordinator, "k", fp).await);
                }
                start.elapsed()
            })
        });
    });
    group.throughput(Throughput::Elements(TASKS));
    group.bench_function("64_tasks_on_one_key", |b| {
        b.iter_custom(|iters| {
            multi.block_on(async {
                let coordinator = coordinator();
                let mut elapsed = Duration::ZERO;
                for i in 0..iters {
                    let key: Arc<str> = format!("k{i}").into();
                    let start = Instant::now();
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|_| {
                            let (coordinator, key) = (coordinator.clone(), key.clone());
                            tokio::spawn(async move { call(&coordinator, &key, fp).await })
                        })
                        .collect();
                    for task in tasks {
                        black_box(task.await.expect("the call's task"));
                    }
                    elapsed += start.elapsed();
                }
                elapsed
            })
        });
    });
    group.finish();
}

criterion_group! {
    name = execute;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).sample_size(30);
    targets = benches
}
criterion_main!(execute);
