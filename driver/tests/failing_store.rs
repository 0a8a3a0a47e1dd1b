//! A store that fails on schedule: fail closed and fail open, retried commands whose reply
//! was lost (`I11`, `I3`), and the outcomes that say what is known.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{Fault, FlakyStore, ProviderTimeout, fingerprint, read};
use idem::{
    Coordinator, Error, MemoryStore, Options, Provenance, Recording, StoreError, StoreFailurePolicy,
};
use idem_core::Record;

const OP: &str = "payment.charge";

fn over(
    store: FlakyStore<MemoryStore>,
    policy: StoreFailurePolicy,
) -> Coordinator<FlakyStore<MemoryStore>> {
    let options = Options::builder()
        .on_store_failure(policy)
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    Coordinator::new(store, options).with_seed(12)
}

/// Runs one call whose action counts its runs and returns 42.
async fn call(
    coordinator: &Coordinator<FlakyStore<MemoryStore>>,
    runs: &AtomicU32,
) -> Result<idem::Answer<u32>, Error<ProviderTimeout>> {
    coordinator
        .execute_attached_with_provenance(OP, "k", fingerprint("o", 1), move |_claim| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(42)
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn fail_closed_runs_nothing_and_answers_503() {
    let store = FlakyStore::new(MemoryStore::new());
    store.set_down(true);
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let runs = AtomicU32::new(0);
    let error = call(&coordinator, &runs).await.unwrap_err();
    match &error {
        Error::StoreUnavailable(StoreError::Unavailable { command, .. }) => {
            assert_eq!(*command, idem_core::record::CommandKind::Reserve);
        }
        other => panic!("expected StoreUnavailable, got {other:?}"),
    }
    assert_eq!(error.http_status(), Some(503));
    assert!(error.is_retryable());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let counted = coordinator.metrics();
    assert_eq!(counted.store_unavailable, 1);
    assert_eq!(counted.store_errors.reserve, 3);
    assert_eq!(counted.store_errors.total(), 3);
}

#[tokio::test(start_paused = true)]
async fn fail_open_records_the_result_if_the_store_is_back_for_the_complete() {
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Reserve,
        0..3,
        Fault::Fail,
    );
    let coordinator = over(store, StoreFailurePolicy::FailOpen);
    let runs = AtomicU32::new(0);
    let outcome = call(&coordinator, &runs).await.unwrap();
    assert_eq!(
        outcome.provenance,
        Provenance::ExecutedUnprotected {
            recording: Recording::Stored
        }
    );
    let replay = call(&coordinator, &runs).await.unwrap();
    assert_eq!(
        (replay.value, replay.provenance),
        (42, Provenance::Replayed)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(coordinator.metrics().failed_open, 1);
}

#[tokio::test(start_paused = true)]
async fn a_transient_reserve_failure_is_retried() {
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Reserve,
        0..1,
        Fault::Fail,
    );
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let runs = AtomicU32::new(0);
    let outcome = call(&coordinator, &runs).await.unwrap();
    assert_eq!(
        outcome.provenance,
        Provenance::Executed {
            lease_lost: false,
            recording: Recording::Stored
        }
    );
    assert_eq!(coordinator.metrics().store_errors.reserve, 1);
}

#[tokio::test(start_paused = true)]
async fn a_reserve_whose_reply_was_lost_is_retried_with_the_same_token() {
    // I11: the retry finds its own reservation, not someone else's, and runs once.
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Reserve,
        0..1,
        Fault::LoseReply,
    );
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let runs = AtomicU32::new(0);
    let outcome = call(&coordinator, &runs).await.unwrap();
    assert!(matches!(
        outcome.provenance,
        Provenance::Executed {
            lease_lost: false,
            ..
        }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        coordinator
            .store()
            .calls(idem_core::record::CommandKind::Reserve),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_complete_whose_reply_was_lost_is_recognised() {
    // I3: the retried complete is answered `Repeated`; the result is recorded once.
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Complete,
        0..1,
        Fault::LoseReply,
    );
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let runs = AtomicU32::new(0);
    let outcome = call(&coordinator, &runs).await.unwrap();
    assert_eq!(
        outcome.provenance,
        Provenance::Executed {
            lease_lost: false,
            recording: Recording::Stored
        }
    );
    let replay = call(&coordinator, &runs).await.unwrap();
    assert_eq!(replay.provenance, Provenance::Replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_complete_that_keeps_failing_returns_the_value_and_says_unknown() {
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Complete,
        0..3,
        Fault::Fail,
    );
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let runs = AtomicU32::new(0);
    let outcome = call(&coordinator, &runs).await.unwrap();
    assert_eq!(outcome.value, 42);
    assert_eq!(
        outcome.provenance,
        Provenance::Executed {
            lease_lost: false,
            recording: Recording::Unknown
        }
    );
    // Nothing was recorded: the reservation is left to its lease (I6).
    let held = read(&**coordinator.store(), OP, "k").await;
    assert!(matches!(held, Some(Record::Pending { .. })), "{held:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(read(&**coordinator.store(), OP, "k").await, None);
}

#[tokio::test(start_paused = true)]
async fn a_release_that_keeps_failing_returns_the_error_and_leaves_the_key_to_the_lease() {
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Release,
        0..3,
        Fault::Fail,
    );
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let failed = coordinator
        .execute_attached(OP, "k", fingerprint("o", 1), move |_claim| async move {
            Err::<u32, _>(ProviderTimeout)
        })
        .await;
    assert!(matches!(failed, Err(Error::Action(ProviderTimeout))));
    assert_eq!(coordinator.metrics().store_errors.release, 3);
    let held = read(&**coordinator.store(), OP, "k").await;
    assert!(matches!(held, Some(Record::Pending { .. })), "{held:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = AtomicU32::new(0);
    assert_eq!(call(&coordinator, &runs).await.unwrap().value, 42);
}

#[tokio::test(start_paused = true)]
async fn renewals_that_fail_for_a_while_keep_the_key() {
    let store = FlakyStore::new(MemoryStore::new()).fault(
        idem_core::record::CommandKind::Renew,
        0..2,
        Fault::Fail,
    );
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let outcome = coordinator
        .execute_attached_with_provenance(OP, "k", fingerprint("o", 1), move |_claim| async move {
            tokio::time::sleep(Duration::from_secs(6)).await;
            Ok::<_, ProviderTimeout>(1)
        })
        .await
        .unwrap();
    assert_eq!(
        outcome.provenance,
        Provenance::Executed {
            lease_lost: false,
            recording: Recording::Stored
        }
    );
    assert_eq!(coordinator.metrics().store_errors.renew, 2);
    assert_eq!(coordinator.metrics().lease_lost, 0);
}

#[tokio::test(start_paused = true)]
async fn a_fail_closed_refusal_releases_a_reserve_that_may_have_landed() {
    // The first reserve is applied but its reply is lost; the two retries fail outright.
    let store = FlakyStore::new(MemoryStore::new())
        .fault(
            idem_core::record::CommandKind::Reserve,
            0..1,
            Fault::LoseReply,
        )
        .fault(idem_core::record::CommandKind::Reserve, 1..3, Fault::Fail);
    let coordinator = over(store, StoreFailurePolicy::FailClosed);
    let runs = AtomicU32::new(0);
    let refused = call(&coordinator, &runs).await.unwrap_err();
    assert!(matches!(refused, Error::StoreUnavailable(_)), "{refused:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // The store is back: the release sent as the call returned frees the key at once,
    // instead of leaving it reserved for a lease.
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        coordinator
            .store()
            .calls(idem_core::record::CommandKind::Release),
        1
    );
    assert_eq!(read(&**coordinator.store(), OP, "k").await, None);
    assert_eq!(call(&coordinator, &runs).await.unwrap().value, 42);
}
