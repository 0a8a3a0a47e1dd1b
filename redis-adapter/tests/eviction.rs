//! A server whose `maxmemory-policy` may evict idem's keys: refused at connect by default,
//! served with a warning or unchecked as configured, and reported by `health()` when the
//! policy changes at run time; on a standalone server and on a Cluster.

mod support;

use std::fmt::{Debug, Write as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::Store;
use idem_core::record::{Command, Reply};
use idem_core::{Fingerprint, Key, Operation, OwnerToken};
use idem_redis::{
    ConnectError, EvictionCheck, HealthError, PolicyReadError, RedisStore, RedisStoreBuilder,
};
use support::{RedisCluster, RedisServer};

fn reserve() -> Command {
    Command::Reserve {
        owner: OwnerToken::from_u128(1),
        fingerprint: Fingerprint::of_bytes(b"charge 100"),
        lease: Duration::from_secs(30),
    }
}

/// A reserve of a fresh key through the store is granted.
async fn reserves(store: &RedisStore, key: &str) {
    let op = Operation::new("charge").unwrap();
    let key = Key::new(key).unwrap();
    let reply = store.apply(&op, &key, reserve()).await.unwrap();
    assert!(matches!(reply, Reply::Reserved(_)), "{reply:?}");
}

fn builder(check: EvictionCheck) -> RedisStoreBuilder {
    RedisStore::builder().eviction_check(check)
}

async fn set_policy(server: &RedisServer, policy: &str) {
    let mut conn = server.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// Asserts that connecting to `server` is refused for its evicting `policy`, naming both.
async fn refused_for(server: &RedisServer, policy: &str) {
    let refusal = RedisStore::connect(&server.url()).await.unwrap_err();
    let message = refusal.to_string();
    match refusal {
        ConnectError::EvictingPolicy {
            node,
            policy: reported,
        } => {
            assert_eq!(node, format!("127.0.0.1:{}", server.port));
            assert_eq!(reported, policy);
        }
        other => panic!("expected EvictingPolicy, got {other:?}"),
    }
    assert!(
        message.contains(&format!("127.0.0.1:{}", server.port)),
        "{message}"
    );
    assert!(message.contains(policy), "{message}");
    assert!(
        message.contains("CONFIG SET maxmemory-policy noeviction"),
        "{message}"
    );
}

#[tokio::test]
async fn an_allkeys_lru_server_is_refused_at_connect() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    refused_for(&server, "allkeys-lru").await;
}

#[tokio::test]
async fn a_volatile_ttl_server_is_refused_at_connect() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-ttl"]);
    refused_for(&server, "volatile-ttl").await;
}

#[tokio::test]
async fn a_noeviction_server_is_accepted_and_healthy() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    reserves(&store, "k").await;
    let health = store.health().await.unwrap();
    assert!(!health.can_evict(), "{health:?}");
    assert_eq!(health.nodes().len(), 1);
    assert_eq!(
        health.nodes()[0].node(),
        format!("127.0.0.1:{}", server.port)
    );
    assert_eq!(health.nodes()[0].policy(), "noeviction");
}

/// A store connected under [`EvictionCheck::Warn`], and the warnings logged meanwhile.
async fn connect_warning(server: &RedisServer) -> (RedisStore, Vec<String>) {
    let warnings = Warnings::default();
    let store = {
        let _capture = tracing::subscriber::set_default(warnings.clone());
        builder(EvictionCheck::Warn)
            .connect(&server.url())
            .await
            .unwrap()
    };
    (store, warnings.taken())
}

#[tokio::test]
async fn under_warn_an_evicting_server_is_served_and_the_warning_names_it() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let (store, warnings) = connect_warning(&server).await;
    reserves(&store, "k").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&format!("127.0.0.1:{}", server.port)),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("allkeys-lru"), "{warnings:?}");
    assert!(store.health().await.unwrap().can_evict());
}

#[tokio::test]
async fn under_warn_a_noeviction_server_warns_nothing() {
    let server = RedisServer::start();
    let warnings = Warnings::default();
    {
        let _capture = tracing::subscriber::set_default(warnings.clone());
        builder(EvictionCheck::Warn)
            .connect(&server.url())
            .await
            .unwrap();
    }
    assert_eq!(warnings.taken(), Vec::<String>::new());
}

#[tokio::test]
async fn health_reports_a_policy_changed_after_connect() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    assert!(!store.health().await.unwrap().can_evict());

    set_policy(&server, "allkeys-lru").await;
    let health = store.health().await.unwrap();
    assert!(health.can_evict(), "{health:?}");
    let evicting: Vec<_> = health.evicting().collect();
    assert_eq!(evicting.len(), 1);
    assert_eq!(evicting[0].node(), format!("127.0.0.1:{}", server.port));
    assert_eq!(evicting[0].policy(), "allkeys-lru");

    set_policy(&server, "noeviction").await;
    assert!(!store.health().await.unwrap().can_evict());
}

#[tokio::test]
async fn a_lazy_store_does_not_check_but_health_tells() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let store = RedisStore::builder().connect_lazy(&server.url()).unwrap();
    reserves(&store, "k").await;
    let health = store.health().await.unwrap();
    assert!(health.can_evict(), "{health:?}");
    assert_eq!(health.nodes()[0].policy(), "volatile-lru");
}

#[tokio::test]
async fn a_server_without_config_is_refused_under_refuse_and_accepted_under_skip() {
    let server = RedisServer::start_with(&["--rename-command", "CONFIG", ""]);

    let refusal = RedisStore::connect(&server.url()).await.unwrap_err();
    let message = refusal.to_string();
    match refusal {
        ConnectError::EvictionPolicyUnknown { node, source } => {
            assert_eq!(node, format!("127.0.0.1:{}", server.port));
            assert!(matches!(source, PolicyReadError::Refused(_)), "{source:?}");
        }
        other => panic!("expected EvictionPolicyUnknown, got {other:?}"),
    }
    for hint in ["CONFIG", "EvictionCheck::Warn", "EvictionCheck::Skip"] {
        assert!(message.contains(hint), "{message}");
    }

    let store = builder(EvictionCheck::Skip)
        .connect(&server.url())
        .await
        .unwrap();
    reserves(&store, "skip").await;
    match store.health().await {
        Err(HealthError::PolicyUnknown { node, .. }) => {
            assert_eq!(node, format!("127.0.0.1:{}", server.port));
        }
        other => panic!("expected PolicyUnknown, got {other:?}"),
    }

    let (store, warnings) = connect_warning(&server).await;
    reserves(&store, "warn").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(&format!("127.0.0.1:{}", server.port)),
        "{warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_one_evicting_master_is_refused_naming_it() {
    let cluster = RedisCluster::start();
    let store = RedisStore::builder()
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    let health = store.health().await.unwrap();
    assert_eq!(health.nodes().len(), 3, "{health:?}");
    assert!(!health.can_evict(), "{health:?}");

    // One master, through a direct connection.
    let evicting = &cluster.nodes[1];
    set_policy(evicting, "allkeys-lru").await;

    let refusal = RedisStore::builder()
        .connect_cluster(cluster.urls())
        .await
        .unwrap_err();
    match refusal {
        ConnectError::EvictingPolicy { node, policy } => {
            assert_eq!(node, format!("127.0.0.1:{}", evicting.port));
            assert_eq!(policy, "allkeys-lru");
        }
        other => panic!("expected EvictingPolicy, got {other:?}"),
    }

    // The store built before the change sees it too.
    let health = store.health().await.unwrap();
    let nodes: Vec<_> = health.evicting().map(|n| n.node().to_owned()).collect();
    assert_eq!(nodes, vec![format!("127.0.0.1:{}", evicting.port)]);

    // A Cluster whose masters keep their keys again is accepted.
    set_policy(evicting, "noeviction").await;
    let store = RedisStore::builder()
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    reserves(&store, "cluster").await;
}

/// The `tracing` warnings logged while it is the default subscriber, each as its message
/// and fields.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut text = Text::default();
            event.record(&mut text);
            self.0.lock().unwrap().push(text.0);
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

#[derive(Default)]
struct Text(String);

impl tracing::field::Visit for Text {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn Debug) {
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}
