//! The replay cache on MemoryStore (MODEL.md, "The replay cache"): a replay or a key reuse
//! of a record this process has seen is answered with no store command, exactly as the
//! store would answer it; a record is never served past the time the store gave it; the
//! bounds hold; operations, tenants and fingerprints never meet. Each check is shown to
//! catch the deliberately broken cache it is about (`CacheFlaw`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Fault, FlakyStore, Provider, fingerprint};
use idem::replay_cache::CacheFlaw;
use idem::{
    Coordinator, Error, Fingerprint, MemoryStore, Options, Provenance, ReplayCacheConfig, Store,
};
use idem_core::record::{Command, CommandKind, Reply, StoredResult};
use idem_core::{Body, Key, Operation, OwnerToken};

type Flaky = FlakyStore<MemoryStore>;

fn bounds() -> ReplayCacheConfig {
    ReplayCacheConfig::builder()
        .max_age(Duration::from_secs(3600))
        .build()
        .unwrap()
}

/// A coordinator on `store` with the replay cache on, within `bounds`.
fn cached(store: &Arc<Flaky>, bounds: ReplayCacheConfig) -> Coordinator<Flaky> {
    Coordinator::from_shared(Arc::clone(store), Options::default())
        .with_seed(11)
        .with_replay_cache(bounds)
}

fn flaky() -> Arc<Flaky> {
    Arc::new(FlakyStore::new(MemoryStore::new()))
}

/// Every command the store was sent.
fn commands(store: &Flaky) -> usize {
    CommandKind::ALL.iter().map(|kind| store.calls(*kind)).sum()
}

/// Charges `amount` for `order` under `key` in `operation`.
async fn charge<S: Store>(
    coordinator: &Coordinator<S>,
    provider: &Arc<Provider>,
    operation: &str,
    key: &'static str,
    amount: u64,
) -> Result<idem::Answer<common::Charge>, Error<common::ProviderTimeout>> {
    let provider = Arc::clone(provider);
    coordinator
        .execute_with_provenance(
            operation,
            key,
            fingerprint("o-1", amount),
            move |claim| async move {
                provider
                    .charge_for(claim, "o-1", amount, Duration::ZERO)
                    .await
            },
        )
        .await
}

#[tokio::test(start_paused = true)]
async fn a_record_this_process_completed_is_replayed_with_no_store_command() {
    let store = flaky();
    let payments = cached(&store, bounds());
    let provider = Arc::new(Provider::default());
    let first = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert!(matches!(first.provenance, Provenance::Executed { .. }));
    let sent = commands(&store);
    assert_eq!(sent, 2, "a reserve and a complete");
    for _ in 0..5 {
        let again = charge(&payments, &provider, "payment.charge", "k", 100)
            .await
            .unwrap();
        assert_eq!(again.value, first.value, "I8: the one execution's result");
        assert_eq!(again.provenance, Provenance::Replayed);
    }
    assert_eq!(commands(&store), sent, "no round trip");
    assert_eq!(provider.charges().len(), 1);
    let metrics = payments.metrics();
    assert_eq!((metrics.executed, metrics.replayed), (1, 5));
    assert_eq!(metrics.replay_cache.hits, 5);
    assert_eq!(metrics.replay_cache.entries, 1);
}

#[tokio::test(start_paused = true)]
async fn a_replay_the_store_answered_is_kept_and_answered_from_memory_next() {
    let store = flaky();
    let provider = Arc::new(Provider::default());
    // Another process (no cache) ran the action.
    let other = Coordinator::from_shared(Arc::clone(&store), Options::default()).with_seed(3);
    let first = charge(&other, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    let payments = cached(&store, bounds());
    let before = commands(&store);
    let replay = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert_eq!(
        commands(&store),
        before + 1,
        "the first replay asks the store"
    );
    assert_eq!(replay.value, first.value);
    let again = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert_eq!(again.value, first.value);
    assert_eq!(commands(&store), before + 1, "the second does not");
    let cache = payments.metrics().replay_cache;
    assert_eq!((cache.misses, cache.hits), (1, 1));
}

/// I4 through the cache: another fingerprint under a cached key is refused exactly as the
/// store refuses it, with no store command; with `flaw`, what the cache answered instead.
async fn key_reuse_is_refused(flaw: Option<CacheFlaw>) -> Result<(), String> {
    let store = flaky();
    let mut bounds = bounds();
    if let Some(flaw) = flaw {
        bounds = bounds.with_flaw(flaw);
    }
    let payments = cached(&store, bounds);
    let uncached = Coordinator::from_shared(Arc::clone(&store), Options::default());
    let provider = Arc::new(Provider::default());
    charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    let sent = commands(&store);
    let from_cache = charge(&payments, &provider, "payment.charge", "k", 5).await;
    if commands(&store) != sent {
        return Err("the cache sent a command".into());
    }
    let from_store = charge(&uncached, &provider, "payment.charge", "k", 5).await;
    match (&from_cache, &from_store) {
        (
            Err(Error::KeyReuse { stored, given }),
            Err(Error::KeyReuse {
                stored: s,
                given: g,
            }),
        ) if (stored, given) == (s, g) => {}
        _ => {
            return Err(format!(
                "the cache answered {from_cache:?}, the store {from_store:?}"
            ));
        }
    }
    if provider.charges().len() != 1 || payments.metrics().key_reuse != 1 {
        return Err(format!("charges {:?}", provider.charges()));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn another_fingerprint_is_key_reuse_from_the_cache_as_from_the_store() {
    key_reuse_is_refused(None).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cache_that_ignores_the_fingerprint_is_caught_replaying_another_request() {
    let caught = key_reuse_is_refused(Some(CacheFlaw::IgnoresFingerprint)).await;
    let failure = caught.expect_err("a cache that replays any fingerprint breaks I4");
    assert!(failure.contains("Ok(Answer"), "{failure}");
}

/// Expiry: a record completed by hand with `retention` is replayed by the cache until just
/// before the store lets it go, and after that the call goes to the store and runs again
/// (I9: an expired record is an absent one). With `flaw`, what went wrong.
async fn expiry_is_respected(flaw: Option<CacheFlaw>) -> Result<(), String> {
    let store = flaky();
    let retention = Duration::from_secs(2);
    let (operation, key) = (
        Operation::new("payment.charge").unwrap(),
        Key::new("k").unwrap(),
    );
    let fp = fingerprint("o-1", 100);
    let owner = OwnerToken::from_u128(99);
    let lease = Duration::from_secs(1);
    let reserve = Command::Reserve {
        owner,
        fingerprint: fp,
        lease,
    };
    store.apply(&operation, &key, reserve).await.unwrap();
    let body = Body::new(
        serde_json::to_vec(&common::Charge {
            id: "ch_0".into(),
            amount: 100,
        })
        .unwrap(),
    );
    let complete = Command::Complete {
        owner,
        fingerprint: fp,
        result: StoredResult::Value(body),
        retention,
    };
    store.apply(&operation, &key, complete).await.unwrap();

    let mut bounds = bounds();
    if let Some(flaw) = flaw {
        bounds = bounds.with_flaw(flaw);
    }
    let payments = cached(&store, bounds);
    let provider = Arc::new(Provider::default());
    // The replay comes halfway through the retention: the time the store says is left
    // counts from when the reserve left, not from the start of the process's clock.
    tokio::time::advance(retention / 2).await;
    let replayed = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert_eq!(replayed.value.id, "ch_0");
    tokio::time::advance(retention / 2 - Duration::from_millis(100)).await;
    let sent = commands(&store);
    let hit = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    if hit.value.id != "ch_0" || commands(&store) != sent {
        return Err("the cache forgot a live record".into());
    }
    // The store lets the record go at 2 s; a call just after must reach it and run.
    tokio::time::advance(Duration::from_millis(100)).await;
    let after = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    if commands(&store) == sent {
        return Err(format!("a record past its expiry was served: {after:?}"));
    }
    if !matches!(after.provenance, Provenance::Executed { .. }) || provider.charges().len() != 1 {
        return Err(format!("after the expiry the call got {after:?}"));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_record_is_never_served_past_the_time_the_store_gave_it() {
    expiry_is_respected(None).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cache_that_ignores_the_remaining_time_is_caught_serving_an_expired_record() {
    let caught = expiry_is_respected(Some(CacheFlaw::IgnoresRemaining)).await;
    let failure = caught.expect_err("a cache that keeps records for its max age breaks I9");
    assert!(failure.contains("past its expiry"), "{failure}");
}

#[tokio::test(start_paused = true)]
async fn a_record_this_process_completed_expires_with_its_retention() {
    let store = flaky();
    let retention = Options::default().retention();
    let bounds = ReplayCacheConfig::builder()
        .max_age(2 * retention)
        .build()
        .unwrap();
    let payments = cached(&store, bounds);
    let provider = Arc::new(Provider::default());
    charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    // Kept for 1% and 5 ms less than the retention, counted from the complete's send.
    tokio::time::advance(retention - retention / 50).await;
    let sent = commands(&store);
    let replay = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert_eq!(replay.provenance, Provenance::Replayed);
    assert_eq!(commands(&store), sent, "still kept inside its retention");
    tokio::time::advance(retention / 50).await;
    let again = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert!(
        matches!(again.provenance, Provenance::Executed { .. }),
        "{again:?}"
    );
    assert_eq!(
        provider.charges().len(),
        2,
        "the retention ended: the action runs again"
    );
    assert_eq!(payments.metrics().replay_cache.expired, 1);
}

/// Operations and tenants never meet in the cache: the same key and fingerprint under
/// another operation, or another tenant, runs its own action. With `flaw`, what met.
async fn scopes_never_meet(flaw: Option<CacheFlaw>) -> Result<(), String> {
    let store = flaky();
    let mut bounds = bounds();
    if let Some(flaw) = flaw {
        bounds = bounds.with_flaw(flaw);
    }
    let payments = cached(&store, bounds);
    let pay = payments
        .operation::<String, String>("payment.charge")
        .unwrap();
    let refund = payments
        .operation::<String, String>("payment.refund")
        .unwrap();
    let fp = Fingerprint::of_bytes(b"same request");
    let handles = [
        ("charge", pay.clone()),
        ("refund", refund),
        ("charge for alice", pay.for_tenant("alice").unwrap()),
        ("charge for bob", pay.for_tenant("bob").unwrap()),
    ];
    for (name, handle) in &handles {
        let value = (*name).to_owned();
        let got = handle
            .execute("k", fp, move |_claim| async move { Ok(value) })
            .await
            .map_err(|e| e.to_string())?;
        if got != *name {
            return Err(format!("{name} was answered {got:?}"));
        }
    }
    // Each scope's own record is cached and replayed.
    for (name, handle) in &handles {
        let got = handle
            .execute("k", fp, |_claim| async { Ok("again".to_owned()) })
            .await
            .map_err(|e| e.to_string())?;
        if got != *name {
            return Err(format!("{name}'s replay was {got:?}"));
        }
    }
    if payments.metrics().replay_cache.hits != 4 {
        return Err(format!("{:?}", payments.metrics().replay_cache));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn operations_and_tenants_never_meet_in_the_cache() {
    scopes_never_meet(None).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cache_keyed_by_key_alone_is_caught_answering_another_operation() {
    let caught = scopes_never_meet(Some(CacheFlaw::KeyAlone)).await;
    let failure = caught.expect_err("a cache keyed by key alone breaks I12");
    assert!(failure.contains("was answered"), "{failure}");
}

#[tokio::test(start_paused = true)]
async fn the_bounds_hold_by_count_and_by_bytes() {
    let store = flaky();
    let by_count = ReplayCacheConfig::builder().max_entries(4).build().unwrap();
    let payments = cached(&store, by_count);
    for n in 0..20 {
        let key = format!("k{n:02}");
        payments
            .execute(
                "payment.charge",
                &key,
                Fingerprint::of_bytes(b"r"),
                move |_claim| async move { Ok::<_, String>(n) },
            )
            .await
            .unwrap();
        assert!(payments.metrics().replay_cache.entries <= 4);
    }
    let cache = payments.metrics().replay_cache;
    assert_eq!((cache.entries, cache.evictions), (4, 16));

    // 600 bytes: records of 14 + 3 + 102 bytes, so five fit and never more.
    let by_bytes = ReplayCacheConfig::builder().max_bytes(600).build().unwrap();
    let payments = cached(&store, by_bytes);
    let value = "x".repeat(100);
    for n in 0..20 {
        let key = format!("b{n:02}");
        let value = value.clone();
        payments
            .execute(
                "payment.charge",
                &key,
                Fingerprint::of_bytes(b"r"),
                |_claim| async move { Ok::<_, String>(value) },
            )
            .await
            .unwrap();
        let cache = payments.metrics().replay_cache;
        assert!(cache.bytes <= 600, "{cache:?}");
    }
    let cache = payments.metrics().replay_cache;
    assert_eq!((cache.entries, cache.bytes), (5, 5 * 119), "{cache:?}");
    assert_eq!(cache.evictions, 15);
}

#[tokio::test(start_paused = true)]
async fn failures_and_records_not_yet_completed_are_never_kept() {
    let store = flaky();
    let payments = cached(&store, bounds());
    let fp = Fingerprint::of_bytes(b"r");
    let failed = payments
        .execute("payment.charge", "k", fp, |_claim| async {
            Err::<u32, _>("declined")
        })
        .await;
    assert!(matches!(failed, Err(Error::Action("declined"))));
    assert_eq!(
        payments.metrics().replay_cache.entries,
        0,
        "I5: failures are not kept"
    );
    // The retry runs (I5), and its record is kept.
    let ran = payments
        .execute("payment.charge", "k", fp, |_claim| async {
            Ok::<u32, &str>(7)
        })
        .await;
    assert_eq!(ran.unwrap(), 7);
    assert_eq!(payments.metrics().replay_cache.entries, 1);
}

#[tokio::test(start_paused = true)]
async fn with_the_cache_off_every_replay_asks_the_store() {
    let store = flaky();
    let payments = Coordinator::from_shared(Arc::clone(&store), Options::default());
    let provider = Arc::new(Provider::default());
    charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    let sent = commands(&store);
    charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert_eq!(commands(&store), sent + 1);
    assert_eq!(
        payments.metrics().replay_cache,
        idem::ReplayCacheStats::default()
    );
}

/// The store's own answer to a replay says how long the record has left.
#[tokio::test(start_paused = true)]
async fn memory_store_says_how_long_a_replayed_record_has_left() {
    let store = MemoryStore::new();
    let (operation, key) = (Operation::new("op").unwrap(), Key::new("k").unwrap());
    let fp = Fingerprint::of_bytes(b"r");
    let owner = OwnerToken::from_u128(1);
    let lease = Duration::from_secs(1);
    store
        .apply(
            &operation,
            &key,
            Command::Reserve {
                owner,
                fingerprint: fp,
                lease,
            },
        )
        .await
        .unwrap();
    let complete = Command::Complete {
        owner,
        fingerprint: fp,
        result: StoredResult::NotStored,
        retention: Duration::from_secs(60),
    };
    store.apply(&operation, &key, complete).await.unwrap();
    tokio::time::advance(Duration::from_secs(15)).await;
    let other = Command::Reserve {
        owner: OwnerToken::from_u128(2),
        fingerprint: fp,
        lease,
    };
    let reply = store.apply(&operation, &key, other).await.unwrap();
    assert_eq!(
        reply,
        Reply::Replay {
            result: StoredResult::NotStored,
            remaining: Some(Duration::from_secs(45)),
        }
    );
}

/// A complete whose reply was lost is sent again, and the record the first one wrote lives
/// its retention from the first: the cache counts from the first complete's send, never from
/// the retry's, or it would replay a record the store has already let go (`I9`).
#[tokio::test(start_paused = true)]
async fn a_retried_complete_is_kept_from_the_first_send() {
    // The first complete is applied and its answer lost; the retry comes a backoff later.
    let store = Arc::new(FlakyStore::new(MemoryStore::new()).fault(
        CommandKind::Complete,
        0..1,
        Fault::LoseReply,
    ));
    // The cache keeps a record 1% and 5 ms less than its retention: the retry comes later
    // than that margin, so an entry counted from it would outlive the record.
    let retention = Duration::from_secs(60);
    let options = Options::builder()
        .retention(retention)
        .backoff_initial(Duration::from_secs(1))
        .backoff_max(Duration::from_secs(1))
        .build()
        .unwrap();
    let payments = Coordinator::from_shared(Arc::clone(&store), options)
        .with_seed(11)
        .with_replay_cache(bounds());
    let provider = Arc::new(Provider::default());
    let start = tokio::time::Instant::now();
    let first = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert_eq!(
        store.calls(CommandKind::Complete),
        2,
        "the complete was sent again"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "{:?}",
        start.elapsed()
    );
    // Just past the first complete's retention the store has let the record go: the call
    // reaches it and runs again.
    tokio::time::advance(retention + Duration::from_millis(1) - start.elapsed()).await;
    let sent = commands(&store);
    let after = charge(&payments, &provider, "payment.charge", "k", 100)
        .await
        .unwrap();
    assert!(commands(&store) > sent, "served from memory: {after:?}");
    assert!(
        matches!(after.provenance, Provenance::Executed { .. }),
        "{after:?} after {first:?}"
    );
}
