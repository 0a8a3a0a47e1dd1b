//! The driver's `Coordinator` on a real standalone Redis: the article's scenarios, the
//! sequential rules, concurrency, renewal of a slow action, and the store failure policies.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem::{
    Coordinator, Error, Fingerprint, InFlightPolicy, Options, Provenance, StoreFailurePolicy,
};
use idem_redis::RedisStore;
use support::RedisServer;
use support::scenarios::{self, Provider};

/// How long the attempts of the store-failure tests await a reply. The store's own
/// per-command timeout stays at its default backstop: the attempt decides (rule 12).
const REPLY_TIMEOUT: Duration = Duration::from_millis(200);

async fn store(server: &RedisServer) -> RedisStore {
    RedisStore::connect(&server.url()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn article_wait_charges_once_and_both_get_ch_1() {
    let server = RedisServer::start();
    scenarios::article_wait(&store(&server).await, "order-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn article_raise_charges_once_and_the_retry_is_in_progress() {
    let server = RedisServer::start();
    scenarios::article_raise(&store(&server).await, "order-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_key_reuse_and_uncached_failures() {
    let server = RedisServer::start();
    scenarios::sequential_rules(&store(&server).await, "order-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_charge_once_per_key() {
    let server = RedisServer::start();
    let store = store(&server).await;
    scenarios::concurrent_callers(&store, "one-key", 1, 64).await;
    scenarios::concurrent_callers(&store, "many-keys", 40, 8).await;
}

/// An action three times longer than the lease keeps its key: the renew script extends the
/// lease on the server's clock, so an identical request meanwhile is still in progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_slow_actions_key() {
    let server = RedisServer::start();
    let store = store(&server).await;
    let options = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .lease(Duration::from_secs(1))
        .renew_every(Duration::from_millis(250))
        .build()
        .unwrap();
    let payments = Coordinator::new(store, options);
    let provider = Provider::new(Duration::from_millis(3000));
    let fp = Fingerprint::of_bytes(b"slow charge");
    let slow = {
        let (payments, provider) = (payments.clone(), provider.clone());
        tokio::spawn(async move {
            payments
                .execute("payment.charge", "slow", fp, |claim| async move {
                    let id = provider.charge(claim.key().as_str()).await;
                    assert!(!claim.is_lease_lost());
                    id
                })
                .await
        })
    };
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let retry = payments
            .execute("payment.charge", "slow", fp, |_claim| async {
                Ok::<String, String>("second charge".into())
            })
            .await;
        assert!(matches!(retry, Err(Error::InProgress)), "{retry:?}");
    }
    assert_eq!(slow.await.unwrap().unwrap(), "ch_1");
    assert_eq!(provider.charges(), 1);
    assert_eq!(payments.metrics().lease_lost, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_fails_open_or_closed_and_is_counted() {
    let mut server = RedisServer::start();
    let store = store(&server).await;
    server.kill();
    let ran = Arc::new(AtomicU32::new(0));
    let policy = |on_failure| {
        let options = Options::builder()
            .on_store_failure(on_failure)
            .reply_timeout(REPLY_TIMEOUT)
            .backoff_initial(Duration::from_millis(5))
            .build()
            .unwrap();
        Coordinator::new(store.clone(), options)
    };
    let fp = Fingerprint::of_bytes(b"charge");
    let run = |coordinator: Coordinator<RedisStore>| {
        let ran = ran.clone();
        async move {
            coordinator
                .execute("payment.charge", "k", fp, |_claim| async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<u32, String>(1)
                })
                .await
        }
    };
    let closed = policy(StoreFailurePolicy::FailClosed);
    let result = run(closed.clone()).await;
    assert!(
        matches!(result, Err(Error::StoreUnavailable(_))),
        "{result:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert!(closed.metrics().store_errors.total() >= 1);

    let open = policy(StoreFailurePolicy::FailOpen);
    assert_eq!(run(open.clone()).await.unwrap(), 1);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(open.metrics().failed_open, 1);
    assert!(store.stats().unavailable >= 2);
}

/// Callers in a loop while the server is killed under them: every call ends in an answer
/// its policy allows, nothing panics, and the failures are counted.
async fn killed_mid_run(on_failure: StoreFailurePolicy) -> (Vec<Result<Provenance, String>>, u64) {
    let mut server = RedisServer::start();
    let store = store(&server).await;
    let options = Options::builder()
        .on_store_failure(on_failure)
        .reply_timeout(REPLY_TIMEOUT)
        .backoff_initial(Duration::from_millis(5))
        .build()
        .unwrap();
    let payments = Coordinator::new(store, options);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (payments, stop) = (payments.clone(), stop.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let key = format!("task-{t}-call-{i}");
                    let fp = Fingerprint::of_bytes(key.as_bytes());
                    let answer = payments
                        .execute_with_provenance("payment.charge", &key, fp, |_claim| async {
                            tokio::time::sleep(Duration::from_millis(30)).await;
                            Ok::<u32, String>(1)
                        })
                        .await;
                    answers.push(answer.map(|o| o.provenance).map_err(|e| e.to_string()));
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(900)).await;
    stop.store(true, Ordering::SeqCst);
    let mut answers = Vec::new();
    for task in tasks {
        answers.extend(task.await.expect("no caller panics"));
    }
    (answers, payments.metrics().store_errors.total())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_fails_closed_for_every_caller() {
    let (answers, store_errors) = killed_mid_run(StoreFailurePolicy::FailClosed).await;
    let executed = answers.iter().filter(|a| a.is_ok()).count();
    let refused = answers
        .iter()
        .filter(|a| matches!(a, Err(e) if e.starts_with("idempotency store unavailable")))
        .count();
    assert!(executed > 0, "calls before the kill ran");
    assert!(refused > 0, "calls after the kill were refused");
    assert_eq!(executed + refused, answers.len(), "{answers:?}");
    assert!(store_errors > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_fails_open_for_every_caller() {
    let (answers, store_errors) = killed_mid_run(StoreFailurePolicy::FailOpen).await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let unprotected = answers
        .iter()
        .filter(|a| matches!(a, Ok(Provenance::ExecutedUnprotected { .. })))
        .count();
    assert!(unprotected > 0);
    assert!(
        answers.len() > unprotected,
        "calls before the kill were protected"
    );
    assert!(store_errors > 0);
}

/// When a waiter gets its answer, in milliseconds from the holder's start: the holder takes
/// 300 ms; the waiter arrives 50 ms in and, between reserves, backs off 2 to 4 s.
async fn waiter_answer_ms(store: RedisStore) -> u128 {
    let options = Options::builder()
        .backoff_initial(Duration::from_secs(4))
        .backoff_max(Duration::from_secs(4))
        .build()
        .unwrap();
    let payments = Coordinator::new(store, options);
    let fp = Fingerprint::of_bytes(b"charge");
    let start = std::time::Instant::now();
    let holder = {
        let payments = payments.clone();
        tokio::spawn(async move {
            payments
                .execute("payment.charge", "k", fp, |_claim| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok::<u32, String>(1)
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let waited = payments
        .execute_with_provenance("payment.charge", "k", fp, |_claim| async {
            Ok::<u32, String>(2)
        })
        .await
        .unwrap();
    let at = start.elapsed().as_millis();
    assert_eq!(holder.await.unwrap().unwrap(), 1);
    assert_eq!((waited.value, waited.provenance), (1, Provenance::Replayed));
    at
}

/// The notice published by the complete script wakes the waiter; without notices (the
/// broken variant) it answers only after its backoff. The margins are seconds wide: this
/// checks which event woke the waiter, not how fast anything is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_completes_notice() {
    let server = RedisServer::start();
    let watched = RedisStore::connect(&server.url()).await.unwrap();
    let at = waiter_answer_ms(watched).await;
    assert!(at < 1_500, "answered at {at} ms");

    let silent = RedisStore::builder()
        .prefix("silent:")
        .watch(false)
        .connect(&server.url())
        .await
        .unwrap();
    let at = waiter_answer_ms(silent).await;
    assert!(at >= 2_000, "answered at {at} ms without a notice");
}
