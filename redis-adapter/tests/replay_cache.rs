//! The driver's replay cache on a real Redis (MODEL.md, "The replay cache"): the reserve
//! script says how long a replayed record has left, the cache answers the next replay and
//! key reuse with no command, and never serves a record past the time the server gave it.
//! The broken cache that ignores that time is caught here too.

mod support;

use std::time::Duration;

use idem::replay_cache::CacheFlaw;
use idem::{Coordinator, Error, Fingerprint, Options, Provenance, ReplayCacheConfig, Store};
use idem_core::record::{Command, Reply, StoredResult};
use idem_core::{Body, Key, Operation, OwnerToken};
use idem_redis::RedisStore;
use support::RedisServer;

const OP: &str = "payment.charge";

fn bounds(flaw: Option<CacheFlaw>) -> ReplayCacheConfig {
    let bounds = ReplayCacheConfig::builder()
        .max_age(Duration::from_secs(3600))
        .build()
        .unwrap();
    match flaw {
        Some(flaw) => bounds.with_flaw(flaw),
        None => bounds,
    }
}

/// A store whose reserves all run the script (which reads the server's clock), or, with
/// `fast_reserve`, try the single-command reserve first (the default).
async fn store(server: &RedisServer, fast_reserve: bool) -> RedisStore {
    RedisStore::builder()
        .single_command_reserve(fast_reserve)
        .connect(&server.url())
        .await
        .unwrap()
}

async fn charge(
    coordinator: &Coordinator<RedisStore>,
    key: &str,
    amount: u64,
    id: &str,
) -> Result<idem::Answer<String>, Error<String>> {
    let id = id.to_owned();
    let fp = Fingerprint::builder()
        .field("amount", amount)
        .finish()
        .unwrap();
    coordinator
        .execute_with_provenance(OP, key, fp, move |_claim| async move { Ok(id) })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_says_how_long_a_replayed_record_has_left() {
    let server = RedisServer::start();
    let store = store(&server, false).await;
    let (operation, key) = (Operation::new(OP).unwrap(), Key::new("k").unwrap());
    let fp = Fingerprint::of_bytes(b"r");
    let (owner, lease) = (OwnerToken::from_u128(1), Duration::from_secs(5));
    let reserve = |owner| Command::Reserve {
        owner,
        fingerprint: fp,
        lease,
    };
    store.apply(&operation, &key, reserve(owner)).await.unwrap();
    let complete = Command::Complete {
        owner,
        fingerprint: fp,
        result: StoredResult::Value(Body::new("v")),
        retention: Duration::from_secs(60),
    };
    store.apply(&operation, &key, complete).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = store
        .apply(&operation, &key, reserve(OwnerToken::from_u128(2)))
        .await
        .unwrap();
    let Reply::Replay {
        result,
        remaining: Some(left),
    } = reply
    else {
        panic!("a replay that says how long it has left: {reply:?}");
    };
    assert_eq!(result, StoredResult::Value(Body::new("v")));
    assert!(
        left <= Duration::from_millis(59_700) && left > Duration::from_secs(55),
        "{left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_through_the_script_is_kept_and_the_next_sends_nothing() {
    let server = RedisServer::start();
    let store = store(&server, false).await;
    let elsewhere = Coordinator::new(store.clone(), Options::default());
    let first = charge(&elsewhere, "k", 100, "ch_1").await.unwrap();
    let payments =
        Coordinator::new(store.clone(), Options::default()).with_replay_cache(bounds(None));
    let before = store.stats().commands;
    let replay = charge(&payments, "k", 100, "ch_2").await.unwrap();
    assert_eq!(
        (replay.value.as_str(), replay.provenance),
        ("ch_1", Provenance::Replayed)
    );
    assert_eq!(
        store.stats().commands,
        before + 1,
        "the first replay asks the server"
    );
    for _ in 0..10 {
        let again = charge(&payments, "k", 100, "ch_3").await.unwrap();
        assert_eq!(again.value, first.value, "I8");
    }
    // I4: another request under the key is refused, also from memory.
    let reused = charge(&payments, "k", 5, "ch_4").await;
    assert!(matches!(reused, Err(Error::KeyReuse { .. })), "{reused:?}");
    assert_eq!(
        store.stats().commands,
        before + 1,
        "no round trip for the others"
    );
    let cache = payments.metrics().replay_cache;
    assert_eq!((cache.misses, cache.hits, cache.entries), (1, 11, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_single_command_reserve_a_record_completed_here_is_kept() {
    let server = RedisServer::start();
    let store = store(&server, true).await;
    let payments =
        Coordinator::new(store.clone(), Options::default()).with_replay_cache(bounds(None));
    charge(&payments, "mine", 100, "ch_1").await.unwrap();
    let before = store.stats().commands;
    for _ in 0..10 {
        let again = charge(&payments, "mine", 100, "ch_2").await.unwrap();
        assert_eq!(
            (again.value.as_str(), again.provenance),
            ("ch_1", Provenance::Replayed)
        );
    }
    assert_eq!(store.stats().commands, before, "replayed from memory");
    // A record completed elsewhere is replayed by the single-command reserve, which reads
    // no clock and so cannot say how long the record has left: it is not kept.
    let elsewhere = Coordinator::new(store.clone(), Options::default());
    charge(&elsewhere, "theirs", 100, "ch_9").await.unwrap();
    let before = store.stats().commands;
    for _ in 0..3 {
        let replay = charge(&payments, "theirs", 100, "ch_10").await.unwrap();
        assert_eq!(replay.value, "ch_9");
    }
    assert_eq!(store.stats().commands, before + 3);
}

/// With `replay_time_left`, the fast reserve says how long a record it replays has left (its
/// key's `PTTL`, in the same atomic step): a record completed elsewhere is kept too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replay_time_left_a_record_completed_elsewhere_is_kept() {
    let server = RedisServer::start();
    let store = RedisStore::builder()
        .replay_time_left(true)
        .connect(&server.url())
        .await
        .unwrap();
    let elsewhere = Coordinator::new(store.clone(), Options::default());
    charge(&elsewhere, "theirs", 100, "ch_9").await.unwrap();
    let payments =
        Coordinator::new(store.clone(), Options::default()).with_replay_cache(bounds(None));
    let before = store.stats().commands;
    for _ in 0..3 {
        let replay = charge(&payments, "theirs", 100, "ch_10").await.unwrap();
        assert_eq!(replay.value, "ch_9");
    }
    assert_eq!(store.stats().commands, before + 1, "the first replay only");
    let cache = payments.metrics().replay_cache;
    assert_eq!((cache.misses, cache.hits, cache.entries), (1, 2, 1));
}

/// A record completed with a 1.5 s retention is replayed from memory for less than that,
/// and the first call after the server let it go runs the action (I9). The replay that
/// fills the cache comes from the reserve script, or with `time_left`, from the fast reserve
/// with `replay_time_left`. With `flaw`, what went wrong.
async fn expiry_is_respected(flaw: Option<CacheFlaw>, time_left: bool) -> Result<(), String> {
    let server = RedisServer::start();
    let store = RedisStore::builder()
        .single_command_reserve(time_left)
        .replay_time_left(time_left)
        .connect(&server.url())
        .await
        .unwrap();
    let (operation, key) = (Operation::new(OP).unwrap(), Key::new("short").unwrap());
    let fp = Fingerprint::builder()
        .field("amount", 100)
        .finish()
        .unwrap();
    let owner = OwnerToken::from_u128(7);
    let lease = Duration::from_secs(5);
    let reserve = Command::Reserve {
        owner,
        fingerprint: fp,
        lease,
    };
    store.apply(&operation, &key, reserve).await.unwrap();
    let complete = Command::Complete {
        owner,
        fingerprint: fp,
        result: StoredResult::Value(Body::new(b"\"ch_0\"")),
        retention: Duration::from_millis(1500),
    };
    store.apply(&operation, &key, complete).await.unwrap();
    let payments =
        Coordinator::new(store.clone(), Options::default()).with_replay_cache(bounds(flaw));
    let replay = charge(&payments, "short", 100, "ch_1").await.unwrap();
    assert_eq!(replay.value, "ch_0");
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let before = store.stats().commands;
    let after = charge(&payments, "short", 100, "ch_1").await.unwrap();
    if store.stats().commands == before {
        return Err(format!("a record past its expiry was served: {after:?}"));
    }
    if after.value != "ch_1" || !matches!(after.provenance, Provenance::Executed { .. }) {
        return Err(format!("after the expiry the call got {after:?}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_is_never_served_past_the_time_the_server_gave_it() {
    expiry_is_respected(None, false).await.unwrap();
    expiry_is_respected(None, true).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_that_ignores_the_remaining_time_is_caught_on_redis() {
    for time_left in [false, true] {
        let caught = expiry_is_respected(Some(CacheFlaw::IgnoresRemaining), time_left).await;
        let failure = caught.expect_err("a cache that keeps records for its max age breaks I9");
        assert!(failure.contains("past its expiry"), "{failure}");
    }
}
