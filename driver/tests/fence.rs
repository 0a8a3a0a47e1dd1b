//! The fence (MODEL.md `F1`) on `MemoryStore`: every grant of a key hands its action a fence
//! above every earlier grant's: the first holder, the caller that takes the key over after
//! the holder's lease lapsed, a retry after a failed action gave the key back, a run after the
//! record expired. A run under `FailOpen` while the store is down has no grant and no fence.
//! Time is paused, so every step happens when the test says.

mod common;

use std::time::Duration;

use common::{Fault, FlakyStore, ProviderTimeout, fingerprint};
use idem::{Coordinator, Error, Fence, MemoryStore, OwnerToken};
use idem_core::record::CommandKind;
use tokio::sync::oneshot;

const OP: &str = "payment.charge";

/// Runs `key` once to its end, its action failing if `fail`; the fence and owner its action
/// saw.
async fn run(
    coordinator: &Coordinator<FlakyStore<MemoryStore>>,
    key: &str,
    fail: bool,
) -> (Option<Fence>, OwnerToken) {
    let (seen_tx, seen_rx) = oneshot::channel();
    let result = coordinator
        .execute(OP, key, fingerprint("o", 1), move |claim| async move {
            let _ = seen_tx.send((claim.fence(), claim.owner()));
            if fail { Err(ProviderTimeout) } else { Ok(()) }
        })
        .await;
    assert_eq!(result.is_err(), fail, "{result:?}");
    seen_rx.await.expect("the action ran")
}

#[tokio::test(start_paused = true)]
async fn every_grant_of_a_key_is_fenced_above_the_ones_before() {
    // Renewals hang: the holder's lease lapses while it runs, and another caller takes over.
    let store =
        FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..usize::MAX, Fault::Hang);
    let coordinator = Coordinator::new(store, common::takeover_options()).with_seed(11);

    let (first_tx, first_rx) = oneshot::channel();
    let (seen_tx, seen_rx) = oneshot::channel();
    let (taken_tx, taken_rx) = oneshot::channel::<()>();
    let holder = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), move |claim| async move {
                    let first = claim.fence();
                    let _ = first_tx.send(());
                    claim.lease_lost().await;
                    // Still running when the key is taken over; its fence has not moved.
                    let _ = taken_rx.await;
                    let _ = seen_tx.send((first, claim.fence()));
                    Ok::<_, ProviderTimeout>(())
                })
                .await
        })
    };
    first_rx.await.unwrap();
    let taker = loop {
        match coordinator
            .execute(OP, "k", fingerprint("o", 1), |claim| async move {
                // The value is recorded, so it travels as a number.
                Ok::<_, ProviderTimeout>(claim.fence().map(Fence::get))
            })
            .await
        {
            Err(Error::InProgress) => tokio::time::sleep(Duration::from_millis(5)).await,
            other => break other.unwrap(),
        }
    };
    let _ = taken_tx.send(());
    holder.await.unwrap().unwrap();
    let (first, first_at_end) = seen_rx.await.unwrap();
    let first = first.expect("a grant on MemoryStore carries a fence");
    assert_eq!(first_at_end, Some(first), "a holder's fence never changes");
    let taker = taker.and_then(Fence::new).expect("the takeover is a grant");
    assert!(taker > first, "{taker:?} after {first:?}");

    // A failed action gives the key back; the retry is a new grant, fenced above.
    let (failed, failed_owner) = run(&coordinator, "k2", true).await;
    let (retried, retried_owner) = run(&coordinator, "k2", false).await;
    assert_ne!(failed_owner, retried_owner);
    assert!(retried.unwrap() > failed.unwrap());

    // The store is down: the call fails open and runs unprotected, with no fence.
    coordinator.store().set_down(true);
    let (unprotected, _) = run(&coordinator, "k3", false).await;
    assert_eq!(unprotected, None);
    coordinator.store().set_down(false);

    // The completed record expires; a new call is a new grant, fenced above the takeover's.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let (after_expiry, _) = run(&coordinator, "k", false).await;
    assert!(after_expiry.unwrap() > taker);
}
