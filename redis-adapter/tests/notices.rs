//! Change notices through the Coordinator: a completion that lands between a waiter's
//! "in flight" reply and its subscription still wakes it at once; waiters on a three-master
//! Cluster are woken by sharded notices (their latency after the holder completes is
//! printed); a half-open notices connection is found by its health check.
//!
//! Every waiter here backs off 2 to 4 s between reserves, so an answer well under 2 s after
//! the holder completed was caused by a notice, which the store's counters confirm; the
//! same runs without notices (the broken variant) answer only after the backoff.

mod support;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use idem::{Coordinator, Fingerprint, Options, Provenance, Store, StoreError};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation};
use idem_redis::RedisStore;
use support::proxy::Proxy;
use support::{RedisCluster, RedisServer};
use tokio::sync::oneshot;

/// Waiters back off 2 to 4 s between reserves (the jitter takes up to half off).
fn waiting_options() -> Options {
    Options::builder()
        .backoff_initial(Duration::from_secs(4))
        .backoff_max(Duration::from_secs(4))
        .build()
        .unwrap()
}

/// An answer this soon after the holder completed cannot be the backoff's.
const BEFORE_BACKOFF: Duration = Duration::from_millis(1_500);

/// A store that, when a reserve is answered "in flight" for the first time, holds the reply
/// back until the holder has completed: the completion lands between the waiter's reply and
/// anything the waiter does after it (its registration, its subscription).
struct CompletesBeforeTheReply {
    inner: RedisStore,
    hook: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

impl Store for CompletesBeforeTheReply {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let reply = self.inner.apply(operation, key, command).await?;
        if matches!(reply, Reply::InFlight { .. }) {
            let hook = self.hook.lock().unwrap().take();
            if let Some((finish, completed)) = hook {
                finish.send(()).unwrap();
                completed.await.unwrap();
            }
        }
        Ok(reply)
    }

    fn changed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.inner.changed(operation, key)
    }

    fn watch<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.inner.watch(operation, key)
    }
}

/// The holder completes between the waiter's "in flight" reply and its subscription; how
/// long after the completion the waiter answered, and the waiter's store.
async fn completion_before_the_subscription(waiter: RedisStore, holder: RedisStore) -> Duration {
    let fp = Fingerprint::of_bytes(b"charge");
    let (finish, finished) = oneshot::channel();
    let (completed, completion) = oneshot::channel();
    let (started, running) = oneshot::channel();
    let holder = Coordinator::new(holder, waiting_options());
    let holding = tokio::spawn(async move {
        let value = holder
            .execute("payment.charge", "k", fp, |_claim| async move {
                started.send(()).unwrap();
                finished.await.unwrap();
                Ok::<u32, String>(1)
            })
            .await
            .unwrap();
        let at = Instant::now();
        completed.send(()).unwrap();
        (value, at)
    });
    running.await.unwrap();
    let store = CompletesBeforeTheReply {
        inner: waiter,
        hook: Mutex::new(Some((finish, completion))),
    };
    let waiter = Coordinator::new(store, waiting_options());
    let waited = waiter
        .execute_with_provenance("payment.charge", "k", fp, |_claim| async {
            Ok::<u32, String>(2)
        })
        .await
        .unwrap();
    let answered = Instant::now();
    let (value, completed_at) = holding.await.unwrap();
    assert_eq!(value, 1);
    assert_eq!((waited.value, waited.provenance), (1, Provenance::Replayed));
    answered.saturating_duration_since(completed_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_before_the_waiters_subscription_still_wakes_it_at_once() {
    let server = RedisServer::start();
    let waiter = RedisStore::connect(&server.url()).await.unwrap();
    let holder = RedisStore::connect(&server.url()).await.unwrap();
    let after = completion_before_the_subscription(waiter.clone(), holder).await;
    println!("waiter answered {after:?} after the holder completed");
    assert!(
        after < BEFORE_BACKOFF,
        "answered {after:?} after the completion"
    );
    // Woken by the read its store made once the key's subscription was live: the notice
    // itself went out before anyone here listened.
    let stats = waiter.stats();
    assert!(stats.notice_rechecks >= 1, "{stats:?}");

    // The check catches a waiter that has no notices: it sleeps out its backoff.
    let silent = RedisStore::builder()
        .prefix("silent:")
        .watch(false)
        .connect(&server.url())
        .await
        .unwrap();
    let holder = RedisStore::builder()
        .prefix("silent:")
        .connect(&server.url())
        .await
        .unwrap();
    let after = completion_before_the_subscription(silent, holder).await;
    assert!(
        after >= BEFORE_BACKOFF,
        "answered {after:?} without notices"
    );
}

/// `keys` waiters on `waiters`, each on its own key (named from `name`) held by a call on
/// `holders`; the holders complete all at once (`together`) or one after another. Each
/// waiter's latency after its own holder completed, sorted.
async fn waiter_latencies(
    holders: RedisStore,
    waiters: RedisStore,
    name: &str,
    keys: usize,
    together: bool,
) -> Vec<Duration> {
    let holders = Coordinator::new(holders, waiting_options());
    let waiters = Coordinator::new(waiters, waiting_options());
    let fp = Fingerprint::of_bytes(b"charge");
    let mut calls = Vec::new();
    for i in 0..keys {
        let key = format!("{name}-{i}");
        let (started, running) = oneshot::channel();
        let (finish, finished) = oneshot::channel::<()>();
        let holders = holders.clone();
        let holder_key = key.clone();
        let holding = tokio::spawn(async move {
            holders
                .execute("payment.charge", holder_key, fp, move |_claim| async move {
                    started.send(()).unwrap();
                    finished.await.unwrap();
                    Ok::<usize, String>(i)
                })
                .await
                .unwrap();
            Instant::now()
        });
        running.await.unwrap();
        let waiters = waiters.clone();
        let waiting = tokio::spawn(async move {
            let waited = waiters
                .execute_with_provenance("payment.charge", key, fp, |_claim| async {
                    Ok::<usize, String>(usize::MAX)
                })
                .await
                .unwrap();
            assert_eq!((waited.value, waited.provenance), (i, Provenance::Replayed));
            Instant::now()
        });
        calls.push((finish, holding, waiting));
    }
    // Every waiter has been told "in flight" and waits.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut latencies = Vec::new();
    let mut started = Vec::new();
    for (finish, holding, waiting) in calls {
        finish.send(()).unwrap();
        if together {
            started.push((holding, waiting));
            continue;
        }
        let completed = holding.await.unwrap();
        let answered = waiting.await.unwrap();
        latencies.push(answered.saturating_duration_since(completed));
    }
    for (holding, waiting) in started {
        let completed = holding.await.unwrap();
        let answered = waiting.await.unwrap();
        latencies.push(answered.saturating_duration_since(completed));
    }
    latencies.sort();
    latencies
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_a_cluster_are_woken_by_notices() {
    let cluster = RedisCluster::start();
    let connect = |watch| {
        RedisStore::builder()
            .watch(watch)
            .connect_cluster(cluster.urls())
    };
    let (holders, waiters) = (connect(true).await.unwrap(), connect(true).await.unwrap());
    let keys = 48;
    for (name, together) in [("one-by-one", false), ("all-at-once", true)] {
        let before = waiters.stats().notices;
        let latencies =
            waiter_latencies(holders.clone(), waiters.clone(), name, keys, together).await;
        println!(
            "cluster waiters woken after their holder completed, {name}: p50 {:?}, p90 {:?}, \
             max {:?} ({keys} waiters)",
            percentile(&latencies, 50),
            percentile(&latencies, 90),
            latencies[keys - 1],
        );
        assert!(
            latencies[keys - 1] < BEFORE_BACKOFF,
            "a waiter slept out its backoff: {latencies:?}"
        );
        let stats = waiters.stats();
        assert!(stats.notices - before >= keys as u64, "{stats:?}");
    }

    // The check catches Cluster waiters without notices: they sleep out their backoff.
    let (holders, silent) = (connect(true).await.unwrap(), connect(false).await.unwrap());
    let latencies = waiter_latencies(holders, silent, "silent", 3, true).await;
    assert!(latencies[0] >= BEFORE_BACKOFF, "{latencies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_notices_connection_is_found_by_its_health_check() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let store = RedisStore::builder()
        .notice_health_check(Duration::from_millis(100))
        .reply_timeout(Duration::from_millis(100))
        .connect(&proxy.url())
        .await
        .unwrap();
    let writer = RedisStore::connect(&server.url()).await.unwrap();
    let (o, k) = (Operation::new("op").unwrap(), Key::new("k").unwrap());
    let reserve = |owner| Command::Reserve {
        owner: idem_core::OwnerToken::from_u128(owner),
        fingerprint: idem_core::Fingerprint::of_bytes(b"a"),
        lease: Duration::from_secs(30),
    };
    writer.apply(&o, &k, reserve(1)).await.unwrap();
    let reply = store.apply(&o, &k, reserve(2)).await.unwrap();
    assert!(matches!(reply, Reply::InFlight { .. }), "{reply:?}");
    let changed = store.changed(&o, &k);
    tokio::pin!(changed);
    // Live, and the record read: still pending, so it waits.
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats().notice_rechecks == 0 {
        assert!(Instant::now() < deadline, "never live");
        let polled = tokio::time::timeout(Duration::from_millis(5), &mut changed).await;
        assert!(polled.is_err(), "woken with nothing changed");
    }
    // The connection stays open but carries nothing: the health check's PING goes
    // unanswered, and the waiter is woken to read the record itself.
    proxy.stall();
    let woken = tokio::time::timeout(Duration::from_secs(5), &mut changed).await;
    assert!(woken.is_ok(), "a half-open connection went unnoticed");
    assert!(store.stats().notice_connections_lost >= 1);
    assert_eq!(store.stats().notices, 0);
}
