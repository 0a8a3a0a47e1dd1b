//! MemoryStore: the record machine per (operation, key), expiry by its own clock (`I9`),
//! bounded memory, and change notifications without lost wake-ups.

mod common;

use common::Seeded;

use std::collections::HashMap;
use std::time::Duration;

use futures::FutureExt;
use idem::{Fence, Fingerprint, Key, MemoryStore, Operation, OwnerToken, Store};
use idem_core::record::{self, Body, Command, Record, Reply};
use tokio::time::Instant;

fn names(operation: &str, key: &str) -> (Operation, Key) {
    (operation.parse().unwrap(), key.parse().unwrap())
}

fn reserve(owner: u128, lease_ms: u64) -> Command {
    Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(b"request"),
        lease: Duration::from_millis(lease_ms),
    }
}

fn complete(owner: u128) -> Command {
    Command::Complete {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(b"request"),
        result: idem::StoredResult::Value(Body::new(b"1")),
        retention: Duration::from_secs(60),
    }
}

/// Runs a seeded sequence of commands over two operations and three keys, with time
/// moving, against `store` and against `record::apply_fenced` on a map, which hands a grant
/// the fence the store granted; returns the first step at which their replies differ, or
/// at which a grant's fence is not above the key's earlier grants' (F1).
async fn first_divergence<S: Store>(
    store: &S,
    clock: impl Fn() -> idem::Timestamp,
    seed: u64,
) -> Option<usize> {
    let mut reference: HashMap<(u64, u64), Option<Record>> = HashMap::new();
    let mut last_fence: HashMap<(u64, u64), Fence> = HashMap::new();
    let mut random = Seeded(seed);
    for step in 0..3_000 {
        tokio::time::advance(Duration::from_millis(random.below(400))).await;
        let (op, key) = (random.below(2), random.below(3));
        let owner = u128::from(random.below(3));
        let command = match random.below(5) {
            0 | 1 => reserve(owner, 1_000),
            2 => complete(owner),
            3 => Command::Renew {
                owner: OwnerToken::from_u128(owner),
                lease: Duration::from_millis(1_000),
            },
            _ => Command::Release {
                owner: OwnerToken::from_u128(owner),
            },
        };
        let now = clock();
        let (operation, name) = names(&format!("op{op}"), &format!("k{key}"));
        let got = store
            .apply(&operation, &name, command.clone())
            .await
            .unwrap();
        let granted = match &got {
            Reply::Reserved(grant) => grant.fence,
            _ => None,
        };
        let state = reference.entry((op, key)).or_default();
        let mut drawn = None;
        let expected = record::apply_fenced(state.as_ref(), command, now, || {
            let fence = granted.unwrap_or(Fence::MIN);
            drawn = Some(fence);
            fence
        })
        .apply_to(state);
        if got != expected {
            return Some(step);
        }
        if let Some(fence) = drawn
            && last_fence
                .insert((op, key), fence)
                .is_some_and(|last| fence <= last)
        {
            return Some(step);
        }
    }
    None
}

#[tokio::test(start_paused = true)]
async fn memory_store_is_the_record_machine_per_operation_and_key() {
    for seed in 0..4 {
        let store = MemoryStore::with_shards(2);
        assert_eq!(first_divergence(&store, || store.now(), seed).await, None);
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_ignores_the_operation_is_caught() {
    // Deliberately broken: one record per key whatever the operation (rule 8 forgotten).
    let store = common::InFront::new(idem_check::Variant::IgnoresOperation);
    assert!(
        first_divergence(&store, || store.inner.now(), 0)
            .await
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn expiry_is_judged_by_the_stores_clock() {
    let store = MemoryStore::new();
    let (op, key) = names("o", "k");
    assert!(matches!(
        store.apply(&op, &key, reserve(1, 1_000)).await,
        Ok(Reply::Reserved(_))
    ));
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(matches!(
        store.apply(&op, &key, reserve(2, 1_000)).await,
        Ok(Reply::InFlight { .. })
    ));
    tokio::time::advance(Duration::from_millis(1)).await;
    // I9: at its lease end the record is absent, and the next reserve takes the key (I6).
    assert!(matches!(
        store.apply(&op, &key, reserve(2, 1_000)).await,
        Ok(Reply::Reserved(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn expired_records_are_purged_so_memory_stays_bounded_under_steady_traffic() {
    // 1,000 fresh keys every 10 s, kept 60 s: at most 7,000 are live at any time.
    let store = MemoryStore::with_shards(2);
    let live = 7_000;
    let bound = 2 * live + 2 * idem::memory::SWEEP_MIN_WRITES;
    let mut written = 0;
    for round in 0..60 {
        for i in 0..1_000 {
            let (op, key) = names("o", &format!("k{round}-{i}"));
            store.apply(&op, &key, complete(1)).await.unwrap();
            written += 1;
        }
        assert!(
            store.len() <= bound,
            "round {round}: {} records held",
            store.len()
        );
        tokio::time::advance(Duration::from_secs(10)).await;
    }
    // The bound is far below what an unswept store would hold.
    assert!(written > 3 * bound);
    store.purge_expired();
    assert!(store.len() <= 6_000, "{} live records", store.len());
}

#[tokio::test(start_paused = true)]
async fn changed_resolves_at_once_when_the_key_is_not_pending() {
    let store = MemoryStore::new();
    let (op, key) = names("o", "k");
    assert_eq!(store.changed(&op, &key).now_or_never(), Some(()));
    store.apply(&op, &key, complete(1)).await.unwrap();
    assert_eq!(store.changed(&op, &key).now_or_never(), Some(()));
}

#[tokio::test(start_paused = true)]
async fn changed_wakes_on_complete_and_release_registered_at_the_call() {
    let store = MemoryStore::new();
    let (op, key) = names("o", "k");
    for settle in [
        complete(1),
        Command::Release {
            owner: OwnerToken::from_u128(1),
        },
    ] {
        store.apply(&op, &key, reserve(1, 30_000)).await.unwrap();
        // Created but not yet polled when the key settles: still woken (no lost wake-up).
        let changed = store.changed(&op, &key);
        let renewed = store.changed(&op, &key);
        store
            .apply(
                &op,
                &key,
                Command::Renew {
                    owner: OwnerToken::from_u128(1),
                    lease: Duration::from_secs(30),
                },
            )
            .await
            .unwrap();
        let mut renewed = Box::pin(renewed);
        assert_eq!(
            renewed.as_mut().now_or_never(),
            None,
            "a renewal is no change"
        );
        store.apply(&op, &key, settle).await.unwrap();
        assert_eq!(changed.now_or_never(), Some(()));
        assert_eq!(renewed.now_or_never(), Some(()));
        // Leave the key absent for the next round.
        tokio::time::advance(Duration::from_secs(61)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn changed_wakes_at_the_holders_lease_end() {
    let store = MemoryStore::new();
    let (op, key) = names("o", "k");
    store.apply(&op, &key, reserve(1, 5_000)).await.unwrap();
    tokio::time::advance(Duration::from_millis(1_000)).await;
    let start = Instant::now();
    store.changed(&op, &key).await;
    assert_eq!(start.elapsed(), Duration::from_millis(4_000));
}
