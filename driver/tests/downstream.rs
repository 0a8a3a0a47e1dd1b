//! The downstream key (MODEL.md `D1`): every attempt of one (operation, key) hands its action
//! the same key to pass on to its provider, whatever the store said: the first holder, the
//! caller that takes the key over after the holder's lease lapsed, a run under `FailOpen`
//! while the store is down, and a run after the record expired. Time is paused, so every
//! step happens when the test says.

mod common;

use std::time::Duration;

use common::{Fault, FlakyStore, ProviderTimeout, fingerprint};
use idem::{Coordinator, DownstreamKey, Error, Key, MemoryStore, Operation, OwnerToken};
use idem_core::record::CommandKind;
use tokio::sync::oneshot;

const OP: &str = "payment.charge";

/// What one attempt's action saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    downstream: DownstreamKey,
    owner: OwnerToken,
    protected: bool,
}

/// Runs `key` under `operation` once to its end; what its action saw.
async fn run(
    coordinator: &Coordinator<FlakyStore<MemoryStore>>,
    operation: &Operation,
    key: &str,
) -> Result<Seen, Error<ProviderTimeout>> {
    let (seen_tx, seen_rx) = oneshot::channel::<Seen>();
    coordinator
        .operation_of::<(), ProviderTimeout, _>(operation.clone(), idem::Json)
        .execute(key, fingerprint("o", 1), |claim| async move {
            let _ = seen_tx.send(Seen {
                downstream: claim.downstream_key(),
                owner: claim.owner(),
                protected: claim.is_protected(),
            });
            Ok(())
        })
        .await?;
    Ok(seen_rx.await.expect("the action ran"))
}

#[tokio::test(start_paused = true)]
async fn every_attempt_of_a_call_passes_on_the_same_key() {
    // Renewals hang: the holder's lease lapses while it runs, and another caller takes over.
    let store =
        FlakyStore::new(MemoryStore::new()).fault(CommandKind::Renew, 0..usize::MAX, Fault::Hang);
    let coordinator = Coordinator::new(store, common::takeover_options()).with_seed(7);
    let operation = Operation::new(OP).unwrap();
    let expected = DownstreamKey::derive(&operation, &Key::new("k").unwrap());

    let (seen_tx, seen_rx) = oneshot::channel::<Seen>();
    let (taken_tx, taken_rx) = oneshot::channel::<()>();
    let holder = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .execute(OP, "k", fingerprint("o", 1), move |claim| async move {
                    let _ = seen_tx.send(Seen {
                        downstream: claim.downstream_key(),
                        owner: claim.owner(),
                        protected: claim.is_protected(),
                    });
                    claim.lease_lost().await;
                    // Still running when the key is taken over.
                    let _ = taken_rx.await;
                    Ok::<_, ProviderTimeout>(())
                })
                .await
        })
    };
    let first = seen_rx.await.unwrap();
    let taker = loop {
        match run(&coordinator, &operation, "k").await {
            Err(Error::InProgress) => tokio::time::sleep(Duration::from_millis(5)).await,
            other => break other.unwrap(),
        }
    };
    let _ = taken_tx.send(());
    let _ = holder.await.unwrap();
    assert_ne!(first.owner, taker.owner, "the key was taken over");
    assert!(first.protected && taker.protected);

    // The store is down: the call fails open and runs unprotected, under the same key.
    coordinator.store().set_down(true);
    let unprotected = run(&coordinator, &operation, "k").await.unwrap();
    assert!(!unprotected.protected, "{unprotected:?}");
    coordinator.store().set_down(false);

    // The completed record expires; a new call runs again, under the same key.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let after_expiry = run(&coordinator, &operation, "k").await.unwrap();
    assert!(after_expiry.protected);
    assert_ne!(after_expiry.owner, taker.owner);

    for seen in [first, taker, unprotected, after_expiry] {
        assert_eq!(seen.downstream, expected, "{seen:?}");
    }

    // Another key, another operation, another tenant: other keys.
    let others = [
        run(&coordinator, &operation, "k2").await.unwrap(),
        run(
            &coordinator,
            &Operation::new("payment.refund").unwrap(),
            "k",
        )
        .await
        .unwrap(),
        run(&coordinator, &operation.for_tenant("acme").unwrap(), "k")
            .await
            .unwrap(),
        run(&coordinator, &operation.for_tenant("globex").unwrap(), "k")
            .await
            .unwrap(),
    ];
    for (i, seen) in others.iter().enumerate() {
        assert_ne!(seen.downstream, expected, "{i}");
        for other in &others[i + 1..] {
            assert_ne!(seen.downstream, other.downstream);
        }
    }
}
