//! The store on a three-master Redis Cluster started by the harness: the article's
//! scenarios and concurrency through the Coordinator, the differential check, foreign
//! values, and a stalled node under the store's backstop timeout.

mod support;

use std::time::{Duration, Instant};

use idem::{Store, StoreError};
use idem_core::record::{Command, Reply};
use idem_core::{Fingerprint, Key, Operation, OwnerToken};
use idem_redis::{DEFAULT_COMMAND_TIMEOUT, RedisStore};
use redis::AsyncCommands;
use support::differential::{FastPaths, ThroughScripts, assert_grants_are_fenced, check};
use support::scenarios;
use support::{RedisCluster, raw_command};

async fn store(cluster: &RedisCluster, timeout: Duration) -> RedisStore {
    RedisStore::builder()
        .command_timeout(timeout)
        .connect_cluster(cluster.urls())
        .await
        .unwrap()
}

fn keys_on(port: u16) -> u64 {
    let reply = raw_command(port, "DBSIZE").unwrap();
    reply.trim().trim_start_matches(':').parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_and_concurrency_on_a_cluster() {
    let cluster = RedisCluster::start();
    let store = store(&cluster, DEFAULT_COMMAND_TIMEOUT).await;
    scenarios::article_wait(&store, "order-wait").await;
    scenarios::article_raise(&store, "order-raise").await;
    scenarios::sequential_rules(&store, "order-seq").await;
    scenarios::concurrent_callers(&store, "one-key", 1, 32).await;
    scenarios::concurrent_callers(&store, "many-keys", 40, 8).await;
    // A key with a hash tag lands on its tag's node; nothing crosses slots.
    scenarios::sequential_rules(&store, "{user-7}order").await;
    for node in &cluster.nodes {
        assert!(keys_on(node.port) > 0, "node {} holds no record", node.port);
    }
    assert_eq!(store.stats().unavailable, 0);
}

#[test]
fn redis_cluster_agrees_with_the_record_machine() {
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let subject = ThroughScripts(runtime.block_on(store(&cluster, DEFAULT_COMMAND_TIMEOUT)));
    if let Err(failure) = check(&runtime, &subject, 60) {
        panic!("{failure}");
    }
    assert_eq!(subject.0.stats().unavailable, 0);
}

#[test]
fn with_fences_a_cluster_agrees_with_the_record_machine() {
    // F1 on a Cluster: each key's grants are fenced by the clock of the node that holds it,
    // above the ones before; the differential holds every slot to it.
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let subject = ThroughScripts(
        runtime
            .block_on(
                RedisStore::builder()
                    .fences(true)
                    .connect_cluster(cluster.urls()),
            )
            .unwrap(),
    );
    if let Err(failure) = check(&runtime, &subject, 60) {
        panic!("{failure}");
    }
    let stats = subject.0.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0);
    assert_grants_are_fenced(&runtime, &subject.0);
}

#[test]
fn the_fast_paths_agree_with_the_record_machine_on_a_cluster() {
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // With `replay_time_left`: the fast reserve's `MULTI` … `EXEC` on the key's node.
    let (store, conn) = runtime.block_on(async {
        let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
        let conn = client.get_async_connection().await.unwrap();
        let store = RedisStore::builder()
            .replay_time_left(true)
            .connect_cluster(cluster.urls())
            .await
            .unwrap();
        (store, conn)
    });
    let fast_paths = FastPaths::new(store, conn);
    if let Err(failure) = check(&runtime, &fast_paths, 60) {
        panic!("{failure}");
    }
    assert_eq!(fast_paths.store.stats().unavailable, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_values_and_a_stalled_node_on_a_cluster() {
    let cluster = RedisCluster::start();
    let timeout = Duration::from_millis(300);
    let store = store(&cluster, timeout).await;
    let op = Operation::new("payment.charge").unwrap();
    let reserve = Command::Reserve {
        owner: OwnerToken::from_u128(1),
        fingerprint: Fingerprint::of_bytes(b"a"),
        lease: Duration::from_secs(30),
    };

    // A foreign value is reported and left alone, on whichever node holds it.
    let foreign = Key::new("foreign").unwrap();
    let redis_key = store.layout().record_key(&op, &foreign);
    let mut plain = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let _: () = plain.hset(&redis_key, "status", "done").await.unwrap();
    let result = store.apply(&op, &foreign, reserve.clone()).await;
    assert!(
        matches!(&result, Err(StoreError::Corrupt { key, .. }) if *key == redis_key),
        "{result:?}"
    );
    let kind: String = redis::cmd("TYPE")
        .arg(&redis_key)
        .query_async(&mut plain)
        .await
        .unwrap();
    assert_eq!(kind, "hash");

    // Every node stalls for 1.5 s: a command sent with no deadline of its own (straight to
    // the store, not through an attempt) gives up at the store's backstop timeout.
    let key = Key::new("stalled").unwrap();
    store.apply(&op, &key, Command::Read).await.unwrap();
    let sleepers: Vec<_> = cluster
        .nodes
        .iter()
        .map(|node| {
            let port = node.port;
            std::thread::spawn(move || raw_command(port, "DEBUG SLEEP 1.5"))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let result = store.apply(&op, &key, reserve.clone()).await;
    let waited = started.elapsed();
    assert!(
        matches!(&result, Err(error) if error.is_outcome_unknown()),
        "{result:?}"
    );
    assert!(waited < Duration::from_millis(1400), "waited {waited:?}");
    for sleeper in sleepers {
        let _ = sleeper.join();
    }
    // Once the nodes answer again, the same store does too; the reserve that timed out may
    // have run, and its retry with the same token is recognised (I11).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.apply(&op, &key, reserve.clone()).await {
            Ok(reply) => {
                assert!(matches!(reply, Reply::Reserved(r) if r.owner == OwnerToken::from_u128(1)));
                break;
            }
            Err(error) => {
                assert!(Instant::now() < deadline, "{error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Layout 2 hashes the whole Redis key: client keys that all carry one hash tag, `{x}1`,
/// `{x}2`, …, spread over the masters like any others instead of landing on the slot the
/// client chose (layout 1 put every one of them on the node of slot `x`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_hash_tags_do_not_choose_the_slot() {
    let cluster = RedisCluster::start();
    let store = store(&cluster, DEFAULT_COMMAND_TIMEOUT).await;
    let o = Operation::new("payment.charge").unwrap();
    let fingerprint = Fingerprint::of_bytes(b"charge");
    let count = 60;
    for i in 0..count {
        let k = Key::new(format!("{{x}}{i}")).unwrap();
        let reserve = Command::Reserve {
            owner: OwnerToken::from_u128(1),
            fingerprint,
            lease: Duration::from_secs(30),
        };
        assert!(matches!(
            store.apply(&o, &k, reserve).await,
            Ok(Reply::Reserved(_))
        ));
    }
    let per_node: Vec<u64> = cluster.nodes.iter().map(|n| keys_on(n.port)).collect();
    assert_eq!(per_node.iter().sum::<u64>(), count);
    assert!(
        per_node.iter().all(|&keys| keys > 0 && keys < count),
        "records per master: {per_node:?}"
    );
}

/// A Cluster node that lost its scripts (a restart, `SCRIPT FLUSH`, a new node) gets each one
/// again with `EVAL`, on the key's own node; every call still succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_a_node_lost_are_sent_again_on_the_keys_node() {
    let cluster = RedisCluster::start();
    let store = store(&cluster, DEFAULT_COMMAND_TIMEOUT).await;
    let o = Operation::new("payment.charge").unwrap();
    let fingerprint = Fingerprint::of_bytes(b"charge");
    let reserve = |owner| Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint,
        lease: Duration::from_secs(30),
    };
    for round in 0..2 {
        for node in &cluster.nodes {
            raw_command(node.port, "SCRIPT FLUSH").unwrap();
        }
        for i in 0..30 {
            let k = Key::new(format!("k-{round}-{i}")).unwrap();
            store.apply(&o, &k, reserve(1)).await.unwrap();
            // Another owner's reserve is "in flight", which only the reserve script answers.
            assert!(matches!(
                store.apply(&o, &k, reserve(2)).await,
                Ok(Reply::InFlight { .. })
            ));
        }
    }
    let stats = store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0);
    // Each flushed master needs the reserve script again, once: the `EVAL` caches it on the
    // key's node (a `SCRIPT LOAD` sent to some other node would leave it missing there).
    assert_eq!(stats.script_fallbacks, 2 * cluster.nodes.len() as u64);
}
