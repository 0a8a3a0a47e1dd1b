//! Change notices through the Coordinator: a completion that lands between a waiter's
//! "in flight" reply and its subscription still wakes it at once; waiters on a three-master
//! Cluster are woken by sharded notices (their latency after the holder completes is
//! printed); waiters whose key's slot moves to another master while they wait are still
//! woken by a notice; a half-open notices connection is found by its health check.
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
use support::{RedisCluster, RedisServer, raw_command};
use tokio::sync::{mpsc, oneshot};

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

/// A waiter's store that watches its reserves answered "in flight": it reports each one
/// (`reports`), and, the first time, with `hook` set, holds the reply back until the holder has
/// completed, so that the completion lands between the waiter's reply and anything the waiter
/// does after it (its registration, its subscription).
struct WatchesInFlight {
    inner: RedisStore,
    hook: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
    reports: Option<mpsc::UnboundedSender<()>>,
}

impl Store for WatchesInFlight {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let reply = self.inner.apply(operation, key, command).await?;
        if matches!(reply, Reply::InFlight { .. }) {
            if let Some(reports) = &self.reports {
                let _ = reports.send(());
            }
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
    let store = WatchesInFlight {
        inner: waiter,
        hook: Mutex::new(Some((finish, completion))),
        reports: None,
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

/// The reply of a raw command, which must not be an error.
fn raw(port: u16, command: &str) -> String {
    let reply = raw_command(port, command).unwrap();
    assert!(!reply.starts_with('-'), "{command} on {port}: {reply}");
    reply
}

/// The text of a raw bulk or integer reply (`$40\r\nid\r\n`, `:12\r\n`).
fn raw_value(reply: &str) -> &str {
    let mut lines = reply.lines();
    let first = lines.next().unwrap_or_default();
    if first.starts_with('$') {
        lines.next().unwrap_or_default()
    } else {
        first.trim_start_matches([':', '+'])
    }
}

/// Moves the slot of `key` (a Redis key) with its keys to another master, as a resharding
/// does: the node that loses the slot unsubscribes its clients from the slot's sharded
/// channels.
fn move_slot(ports: &[u16], key: &str) {
    let slot = raw_value(&raw(ports[0], &format!("CLUSTER KEYSLOT {key}"))).to_owned();
    // The node that answers for the key instead of redirecting owns its slot.
    let source = *ports
        .iter()
        .find(|port| {
            !raw_command(**port, &format!("EXISTS {key}"))
                .unwrap()
                .starts_with("-MOVED")
        })
        .unwrap();
    let target = *ports.iter().find(|port| **port != source).unwrap();
    let id = |port| raw_value(&raw(port, "CLUSTER MYID")).to_owned();
    let (source_id, target_id) = (id(source), id(target));
    raw(
        target,
        &format!("CLUSTER SETSLOT {slot} IMPORTING {source_id}"),
    );
    raw(
        source,
        &format!("CLUSTER SETSLOT {slot} MIGRATING {target_id}"),
    );
    let migrated = raw(
        source,
        &format!("MIGRATE 127.0.0.1 {target} \"\" 0 5000 KEYS {key}"),
    );
    assert!(migrated.starts_with("+OK"), "{migrated}");
    raw(target, &format!("CLUSTER SETSLOT {slot} NODE {target_id}"));
    for port in ports.iter().filter(|port| **port != target) {
        raw(*port, &format!("CLUSTER SETSLOT {slot} NODE {target_id}"));
    }
    assert_eq!(raw_value(&raw(target, &format!("EXISTS {key}"))), "1");
}

/// Waiters back off 2 to 4 s between reserves, for up to a minute.
fn patient_options() -> Options {
    Options::builder()
        .backoff_initial(Duration::from_secs(4))
        .backoff_max(Duration::from_secs(4))
        .wait_deadline(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A call on `holders` holds `key` while a call on `waiters` waits on it; the key's slot moves
/// to another master; with notices, once the waiter's store has subscribed the key again on
/// the new owner and read the record (still held), the holder completes; without, 100 ms
/// after the move. The move does not wake the waiter (no reserve is sent meanwhile). How long
/// after the completion, and after the waiter's "in flight" reply, it answered: a waiter that
/// no notice wakes sleeps out a whole backoff after the reply, 2 s at least.
async fn waiter_latency_across_a_slot_move(
    cluster: &RedisCluster,
    holders: RedisStore,
    waiters: RedisStore,
    watching: bool,
    key: &str,
) -> (Duration, Duration) {
    let fp = Fingerprint::of_bytes(b"charge");
    let (started, running) = oneshot::channel();
    let (finish, finished) = oneshot::channel::<()>();
    // The holder retries a failed store command soon.
    let quick = Options::builder()
        .backoff_initial(Duration::from_millis(50))
        .build()
        .unwrap();
    let holder_store = holders.clone();
    let holder = Coordinator::new(holders, quick);
    let holder_key = key.to_owned();
    let holding = tokio::spawn(async move {
        holder
            .execute("payment.charge", holder_key, fp, move |_claim| async move {
                started.send(()).unwrap();
                finished.await.unwrap();
                Ok::<u32, String>(1)
            })
            .await
            .unwrap();
        Instant::now()
    });
    running.await.unwrap();
    let (in_flight, mut told) = mpsc::unbounded_channel();
    let store = WatchesInFlight {
        inner: waiters.clone(),
        hook: Mutex::new(None),
        reports: Some(in_flight),
    };
    let waiter = Coordinator::new(store, patient_options());
    let waiter_key = key.to_owned();
    let waiting = tokio::spawn(async move {
        let waited = waiter
            .execute_with_provenance("payment.charge", waiter_key, fp, |_claim| async {
                Ok::<u32, String>(2)
            })
            .await
            .unwrap();
        assert_eq!((waited.value, waited.provenance), (1, Provenance::Replayed));
        Instant::now()
    });
    // The waiter has been told "in flight" and waits; with notices, on its key's live
    // subscription.
    told.recv().await.unwrap();
    let replied = Instant::now();
    if watching {
        let deadline = Instant::now() + Duration::from_secs(10);
        while waiters.stats().notice_rechecks == 0 {
            assert!(Instant::now() < deadline, "the key was never subscribed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let redis_key = format!("idem:{{}}payment.charge:{key}");
    let ports: Vec<u16> = cluster.nodes.iter().map(|node| node.port).collect();
    tokio::task::spawn_blocking(move || move_slot(&ports, &redis_key))
        .await
        .unwrap();
    if watching {
        // The old owner dropped the subscription; the store makes it again on the new one
        // and, once it is live, the waiter reads the record again.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stats = waiters.stats();
            if stats.notice_resubscribes >= 1 && stats.notice_rechecks >= 2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the key was not subscribed again: {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    } else {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(told.try_recv().is_err(), "the move woke the waiter");
    finish.send(()).unwrap();
    let completed = holding.await.unwrap();
    let answered = waiting.await.unwrap();
    println!("holder's store: {:?}", holder_store.stats());
    (
        answered.saturating_duration_since(completed),
        answered.saturating_duration_since(replied),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_notices_after_their_keys_slot_moved() {
    let cluster = RedisCluster::start();
    let connect = || RedisStore::builder().connect_cluster(cluster.urls());
    let (holders, waiters) = (connect().await.unwrap(), connect().await.unwrap());
    let (after, after_reply) =
        waiter_latency_across_a_slot_move(&cluster, holders, waiters.clone(), true, "k").await;
    let stats = waiters.stats();
    println!(
        "waiter answered {after:?} after the holder completed ({after_reply:?} after its \
         last \"in flight\" reply), its key's slot moved: {stats:?}"
    );
    assert!(
        after < BEFORE_BACKOFF,
        "answered {after:?} after the completion"
    );
    assert!(
        after_reply < BEFORE_BACKOFF,
        "answered {after_reply:?} after its reply"
    );
    // The old owner dropped the key's subscription; the store subscribed it again on the
    // new one (without losing its connection), whose notice woke the waiter.
    assert!(stats.notice_resubscribes >= 1, "{stats:?}");
    assert!(stats.notices >= 1, "{stats:?}");
    assert_eq!(stats.notice_connections_lost, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_without_notices_sleeps_out_its_backoff_across_a_slot_move() {
    // The check above catches a waiter that no notice wakes after the move.
    let cluster = RedisCluster::start();
    let holders = RedisStore::builder()
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    let silent = RedisStore::builder()
        .watch(false)
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    let (after, after_reply) =
        waiter_latency_across_a_slot_move(&cluster, holders, silent, false, "k").await;
    println!(
        "a waiter without notices answered {after:?} after the holder completed \
         ({after_reply:?} after its last \"in flight\" reply)"
    );
    assert!(
        after >= BEFORE_BACKOFF,
        "answered {after:?} without notices"
    );
    assert!(
        after_reply >= BEFORE_BACKOFF,
        "answered {after_reply:?} after its reply without notices"
    );
}
