//! Several OS processes hammer the same keys on one Redis through their own Coordinators:
//! the total number of effects equals the number of distinct keys, and every caller of a
//! key, in every process, gets the same answer.
//!
//! The worker is this test binary itself: the parent test runs it again as child processes
//! (`hammer_worker`, with the server's URL in the environment). Run on its own, without
//! that environment, `hammer_worker` is a one-process check against a server of its own.
//! Effects are counted in Redis (`INCR effects:{key}` inside the action), so the count
//! spans processes.

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{Coordinator, Fingerprint, Options, Store};
use idem_redis::RedisStore;
use redis::AsyncCommands;
use support::RedisServer;
use support::broken::ResultCache;

const KEYS: usize = 30;
const CALLERS_PER_KEY: usize = 3;
const WORKERS: usize = 4;
const ENV_URL: &str = "IDEM_HAMMER_URL";
const ENV_WORKER: &str = "IDEM_HAMMER_WORKER";
const ENV_START: &str = "IDEM_HAMMER_START_MS";
const ENV_BROKEN: &str = "IDEM_HAMMER_RESULT_CACHE";

fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// One process's callers: `CALLERS_PER_KEY` concurrent calls on each key, starting at
/// `start_ms` (Unix time) so that the processes overlap. Returns (key, answer) pairs.
async fn work(url: &str, worker: usize, start_ms: u64) -> Vec<(usize, String)> {
    let store = RedisStore::connect(url).await.unwrap();
    if std::env::var_os(ENV_BROKEN).is_some() {
        let payments = Coordinator::new(ResultCache(store), Options::default());
        return calls(payments, url, worker, start_ms).await;
    }
    let payments = Coordinator::new(store, Options::default());
    calls(payments, url, worker, start_ms).await
}

async fn calls<S: Store>(
    payments: Coordinator<S>,
    url: &str,
    worker: usize,
    start_ms: u64,
) -> Vec<(usize, String)> {
    let effects = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(start_ms.saturating_sub(unix_ms()))).await;
    let mut tasks = Vec::new();
    for i in 0..KEYS {
        // Each process walks the keys from another place.
        let k = (i + worker * 7) % KEYS;
        for _ in 0..CALLERS_PER_KEY {
            let (payments, mut effects) = (payments.clone(), effects.clone());
            tasks.push(tokio::spawn(async move {
                let fp = Fingerprint::of_bytes(format!("charge {k}").as_bytes());
                let answer = payments
                    .execute(
                        "hammer.charge",
                        format!("key-{k}"),
                        fp,
                        move |_claim| async move {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            let n: u64 = effects.incr(format!("effects:{k}"), 1).await?;
                            Ok::<String, redis::RedisError>(format!("w{worker}-effect{n}"))
                        },
                    )
                    .await
                    .unwrap_or_else(|e| panic!("key {k}: {e}"));
                (k, answer)
            }));
        }
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// Every key has exactly one effect, and all its callers got the same answer.
async fn check(url: &str, answers: &[(usize, String)]) -> Result<(), String> {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let counters: Vec<String> = conn.keys("effects:*").await.unwrap();
    if counters.len() != KEYS {
        return Err(format!("{} keys ran, not {KEYS}", counters.len()));
    }
    for k in 0..KEYS {
        let n: u64 = conn.get(format!("effects:{k}")).await.unwrap();
        if n != 1 {
            return Err(format!("key {k} charged {n} times"));
        }
    }
    let mut by_key: HashMap<usize, &str> = HashMap::new();
    for (k, answer) in answers {
        let first = by_key.entry(*k).or_insert(answer);
        if *first != answer {
            return Err(format!("key {k}: answers {first} and {answer}"));
        }
    }
    if by_key.len() != KEYS {
        return Err(format!("answers for {} keys", by_key.len()));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hammer_worker() {
    if let Ok(url) = std::env::var(ENV_URL) {
        let worker: usize = std::env::var(ENV_WORKER).unwrap().parse().unwrap();
        let start: u64 = std::env::var(ENV_START).unwrap().parse().unwrap();
        for (k, answer) in work(&url, worker, start).await {
            println!("HAMMER {k} {answer}");
        }
        return;
    }
    let server = RedisServer::start();
    let answers = work(&server.url(), 0, unix_ms()).await;
    check(&server.url(), &answers).await.unwrap();
}

/// Runs `WORKERS` worker processes against a fresh server and checks the result.
async fn run_processes(result_cache: bool) -> Result<(), String> {
    let server = RedisServer::start();
    let url = server.url();
    let exe = std::env::current_exe().unwrap();
    let start = unix_ms() + 700;
    let children: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let mut command = Command::new(&exe);
            if result_cache {
                command.env(ENV_BROKEN, "1");
            }
            command
                .args(["hammer_worker", "--exact", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(ENV_URL, &url)
                .env(ENV_WORKER, worker.to_string())
                .env(ENV_START, start.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut answers = Vec::new();
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "worker failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // The harness may print "test hammer_worker ... " on the same line as the first.
        for line in stdout.lines() {
            if let Some((_, rest)) = line.split_once("HAMMER ") {
                let (k, answer) = rest.split_once(' ').unwrap();
                answers.push((k.parse::<usize>().unwrap(), answer.to_owned()));
            }
        }
    }
    assert_eq!(answers.len(), WORKERS * KEYS * CALLERS_PER_KEY);
    check(&url, &answers).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_hammering_one_redis_charge_once_per_key() {
    run_processes(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hammer_check_catches_a_result_cache() {
    let failure = run_processes(true)
        .await
        .expect_err("a result cache charges twice");
    assert!(failure.contains("charged"), "{failure}");
}
