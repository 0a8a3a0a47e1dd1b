//! A call dropped mid-way, or an action that panics: what is left in the store.
//!
//! - dropped while the action runs: the key is released at once (a spawned release);
//! - dropped after the action succeeded, while its complete is outstanding: the result is
//!   completed, never released (the effect happened);
//! - dropped outside a runtime: nothing can be sent, and the lease frees the key (`I6`);
//! - dropped while waiting on another holder: nothing is sent, the holder is untouched;
//! - a panicking action: the key is released, then the panic reaches the caller.

mod common;

use std::time::Duration;

use common::{Broken, Bug, Fault, FlakyStore, Provider, ProviderTimeout, fingerprint, read};
use idem::{Coordinator, InFlightPolicy, MemoryStore, Options, Provenance, Store};
use idem_core::Record;

const OP: &str = "payment.charge";

fn raise() -> Options {
    Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .lease(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// Starts a call whose action takes an hour, drops it at 1 s, lets spawned tasks run, and
/// says whether the key is free then.
async fn drop_mid_action<S: Store>(store: S) -> (bool, Coordinator<S>) {
    let coordinator = Coordinator::new(store, raise()).with_seed(2);
    let call = common::spawn_call(
        &coordinator,
        "k",
        fingerprint("o", 1),
        Duration::from_secs(3_600),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(1)).await;
    let free = read(&**coordinator.store(), OP, "k").await.is_none();
    (free, coordinator)
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_action_releases_the_key() {
    let (free, coordinator) = drop_mid_action(MemoryStore::new()).await;
    assert!(free);
    // A retry runs at once, well inside the dropped call's lease.
    let retry = coordinator
        .execute_with_provenance(OP, "k", fingerprint("o", 1), |_claim| async {
            Ok::<_, ProviderTimeout>(2)
        })
        .await
        .unwrap();
    assert_eq!(retry.value, 2);
    assert!(retry.provenance.executed());
}

/// The broken variant: a store that acknowledges releases without applying them. The
/// check above sees the key still held.
#[tokio::test(start_paused = true)]
async fn a_store_that_drops_releases_is_caught_keeping_the_key() {
    let (free, _coordinator) = drop_mid_action(Broken::new(Bug::DropsReleases)).await;
    assert!(!free);
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_after_its_action_succeeded_completes_the_result() {
    // The first complete takes 10 s to answer; the call is dropped while it is out.
    let store = FlakyStore::new(MemoryStore::new()).fault(
        "complete",
        0..1,
        Fault::Delay(Duration::from_secs(10)),
    );
    let coordinator = Coordinator::new(store, raise()).with_seed(4);
    let provider = std::sync::Arc::new(Provider::default());
    let call = {
        let (coordinator, provider) = (coordinator.clone(), provider.clone());
        tokio::spawn(async move {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), |claim| async move {
                    provider
                        .charge_for(claim, "o", 1, Duration::from_millis(100))
                        .await
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(1)).await;
    let record = read(&**coordinator.store(), OP, "k").await;
    assert!(
        matches!(record, Some(Record::Completed { body: Some(_), .. })),
        "{record:?}"
    );
    // The retry replays the one charge instead of charging again.
    let retry = coordinator
        .execute_with_provenance(OP, "k", fingerprint("o", 1), |claim| {
            provider.charge_for(claim, "o", 1, Duration::ZERO)
        })
        .await
        .unwrap();
    assert_eq!(retry.provenance, Provenance::Replayed);
    assert_eq!(retry.value.id, "ch_1");
    assert_eq!(common::one_effect(&provider), Ok(()));
}

#[test]
fn a_call_dropped_outside_a_runtime_leaves_the_key_to_the_lease() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let (coordinator, mut call) = runtime.block_on(async {
        let coordinator = Coordinator::new(MemoryStore::new(), raise()).with_seed(6);
        let (started, running) = tokio::sync::oneshot::channel();
        let call = Box::pin({
            let coordinator = coordinator.clone();
            async move {
                coordinator
                    .execute(OP, "k", fingerprint("o", 1), |_claim| async move {
                        let _ = started.send(());
                        std::future::pending::<Result<u32, ProviderTimeout>>().await
                    })
                    .await
            }
        });
        (coordinator, (call, running))
    });
    runtime.block_on(async {
        tokio::select! {
            _ = &mut call.0 => unreachable!("the action never ends"),
            started = &mut call.1 => started.unwrap(),
        }
    });
    // Outside the runtime now: nothing can be spawned.
    drop(call);
    runtime.block_on(async {
        let held = read(&**coordinator.store(), OP, "k").await;
        assert!(matches!(held, Some(Record::Pending { .. })), "{held:?}");
        // I6: the key frees itself when the lease ends.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(read(&**coordinator.store(), OP, "k").await, None);
    });
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_sends_nothing_and_leaves_the_holder_alone() {
    let options = Options::builder().build().unwrap();
    let store = FlakyStore::new(MemoryStore::new());
    let coordinator = Coordinator::new(store, options).with_seed(8);
    let holder = common::spawn_call(
        &coordinator,
        "k",
        fingerprint("o", 1),
        Duration::from_secs(2),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiter = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), |_claim| async {
                    Ok::<_, ProviderTimeout>(2)
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(coordinator.store().calls("release"), 0);
    assert_eq!(holder.await.unwrap().unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_action_releases_the_key_and_the_panic_reaches_the_caller() {
    let coordinator = Coordinator::new(MemoryStore::new(), raise()).with_seed(10);
    let call = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), |_claim| async {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if true {
                        panic!("card reader on fire");
                    }
                    Ok::<u32, ProviderTimeout>(1)
                })
                .await
        })
    };
    let panic = call.await.unwrap_err().into_panic();
    assert_eq!(panic.downcast_ref::<&str>(), Some(&"card reader on fire"));
    // Released by the call itself, before the panic resumed: no spawned task needed.
    assert_eq!(read(&**coordinator.store(), OP, "k").await, None);
    assert_eq!(coordinator.metrics().action_failed, 1);
    let retry = coordinator
        .execute(OP, "k", fingerprint("o", 1), |_claim| async {
            Ok::<_, ProviderTimeout>(2)
        })
        .await
        .unwrap();
    assert_eq!(retry, 2);
}
