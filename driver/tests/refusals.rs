//! Every refusal: its variant, its HTTP status, and that it stores and runs nothing it
//! should not.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{ProviderTimeout, fingerprint};
use idem::{
    Coordinator, Error, InFlightPolicy, KeyError, MemoryStore, OperationError, Options,
    OptionsError, Provenance, Recording,
};

const OP: &str = "payment.charge";

/// Calls with `operation` and `key`, counting action runs.
async fn attempt(
    coordinator: &Coordinator<MemoryStore>,
    operation: &str,
    key: &str,
    runs: &AtomicU32,
) -> Result<u32, Error<ProviderTimeout>> {
    coordinator
        .execute_attached(
            operation,
            key,
            fingerprint("o", 1),
            move |_claim| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(1)
            },
        )
        .await
}

#[tokio::test]
async fn invalid_keys_are_refused_with_400_never_trimmed() {
    let coordinator = common::coordinator(Options::default());
    let runs = AtomicU32::new(0);
    let long = "k".repeat(256);
    for key in ["", " k", "k ", "a\tb", "ключ", long.as_str()] {
        let error = attempt(&coordinator, OP, key, &runs).await.unwrap_err();
        assert!(matches!(error, Error::InvalidKey(_)), "{key:?}: {error:?}");
        assert_eq!(error.http_status(), Some(400));
        assert!(!error.is_retryable());
    }
    let error = attempt(&coordinator, OP, &long, &runs).await.unwrap_err();
    assert!(matches!(
        error,
        Error::InvalidKey(KeyError::TooLong { len: 256 })
    ));
    // The longest key accepted is 255 characters.
    assert_eq!(
        attempt(&coordinator, OP, &long[1..], &runs).await.unwrap(),
        1
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(coordinator.store().len(), 1);
    assert_eq!(coordinator.metrics().invalid_input, 7);
}

#[tokio::test]
async fn invalid_operations_are_refused_with_400() {
    let coordinator = common::coordinator(Options::default());
    let runs = AtomicU32::new(0);
    let long = "o".repeat(101);
    for operation in ["", "pay ment", "order/cancel", long.as_str()] {
        let error = attempt(&coordinator, operation, "k", &runs)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::InvalidOperation(_)),
            "{operation:?}: {error:?}"
        );
        assert_eq!(error.http_status(), Some(400));
    }
    let error = attempt(&coordinator, "", "k", &runs).await.unwrap_err();
    assert!(matches!(
        error,
        Error::InvalidOperation(OperationError::Empty)
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(coordinator.store().is_empty());
}

#[test]
fn invalid_options_are_refused_when_the_coordinator_is_built() {
    let build = |builder| Coordinator::build(MemoryStore::new(), builder).map(|_| ());
    assert!(matches!(
        build(Options::builder().retention(Duration::from_secs(59))),
        Err(OptionsError::RetentionTooShort { .. })
    ));
    assert!(matches!(
        build(Options::builder().lease(Duration::from_millis(999))),
        Err(OptionsError::LeaseTooShort { .. })
    ));
    assert!(matches!(
        build(Options::builder().lease(Duration::from_secs(24 * 60 * 60))),
        Err(OptionsError::LeaseNotBelowRetention { .. })
    ));
    assert!(matches!(
        build(
            Options::builder()
                .lease(Duration::from_secs(2))
                .renew_every(Duration::from_secs(2))
        ),
        Err(OptionsError::RenewNotWithinLease { .. })
    ));
    assert!(matches!(
        build(Options::builder().wait_deadline(Duration::ZERO)),
        Err(OptionsError::WaitDeadlineZero)
    ));
    assert!(matches!(
        build(Options::builder().store_retries(11)),
        Err(OptionsError::TooManyStoreRetries { store_retries: 11 })
    ));
    assert!(build(Options::builder()).is_ok());
}

#[tokio::test(start_paused = true)]
async fn key_reuse_is_refused_with_422_while_pending_and_when_completed() {
    let coordinator = common::coordinator(Options::default());
    let holder = common::spawn_call(
        &coordinator,
        "k",
        fingerprint("o", 100),
        Duration::from_secs(1),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let reuse = |amount| {
        coordinator.execute_attached(
            OP,
            "k",
            fingerprint("o", amount),
            move |_claim| async move { Ok::<u32, ProviderTimeout>(2) },
        )
    };
    // I4 while the first request is still running: refused, not waited for.
    let pending = reuse(5).await.unwrap_err();
    assert_eq!(pending.http_status(), Some(422));
    // Both fingerprints are in the error for the service's logs, and neither is in its
    // text, which a service may show the client: another request's is never revealed.
    let Error::KeyReuse { stored, given } = &pending else {
        panic!("expected KeyReuse, got {pending:?}")
    };
    assert_eq!(
        (*stored, *given),
        (fingerprint("o", 100), fingerprint("o", 5))
    );
    let shown = pending.to_string();
    assert!(!shown.contains(&stored.to_string()), "{shown}");
    assert!(!shown.contains(&given.to_string()), "{shown}");
    assert_eq!(holder.await.unwrap().unwrap(), 1);
    let completed = reuse(5).await.unwrap_err();
    assert!(matches!(completed, Error::KeyReuse { .. }));
    assert_eq!(coordinator.metrics().key_reuse, 2);
}

#[tokio::test(start_paused = true)]
async fn in_progress_is_409() {
    let options = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .build()
        .unwrap();
    let coordinator = common::coordinator(options);
    let holder = common::spawn_call(
        &coordinator,
        "k",
        fingerprint("o", 1),
        Duration::from_secs(1),
        Ok(1),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let runs = AtomicU32::new(0);
    let error = attempt(&coordinator, OP, "k", &runs).await.unwrap_err();
    assert!(matches!(error, Error::InProgress));
    assert_eq!(error.http_status(), Some(409));
    assert!(error.is_retryable());
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    holder.await.unwrap().unwrap();
}

/// Runs a call whose action returns `value` twice: the first call returns it, recorded
/// without a body; the retry is answered `ResultNotStored` without running the action.
async fn returned_once_then_not_stored<T>(options: Options, value: T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug,
{
    let coordinator = common::coordinator(options);
    let runs = AtomicU32::new(0);
    let action = |_claim| async {
        runs.fetch_add(1, Ordering::SeqCst);
        Ok::<T, ProviderTimeout>(value.clone())
    };
    let first = coordinator
        .execute_attached_with_provenance(OP, "k", fingerprint("o", 1), action)
        .await
        .unwrap();
    assert_eq!(
        first.provenance,
        Provenance::Executed {
            lease_lost: false,
            recording: Recording::StoredWithoutBody
        }
    );
    // The effect happened: a retry is told so, and does not run the action again.
    let retry = coordinator
        .execute_attached(OP, "k", fingerprint("o", 1), action)
        .await
        .unwrap_err();
    assert!(matches!(retry, Error::ResultNotStored));
    assert_eq!(retry.http_status(), Some(500));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(coordinator.metrics().result_not_stored, 1);
    first.value
}

#[tokio::test]
async fn an_oversized_result_is_returned_once_then_not_stored_is_500() {
    let options = Options::builder().max_body_bytes(16).build().unwrap();
    let value = returned_once_then_not_stored(options, "x".repeat(100)).await;
    assert_eq!(value.len(), 100);
}

#[tokio::test]
async fn a_value_that_cannot_be_encoded_is_returned_and_never_released() {
    // JSON object keys must be strings: a map keyed by pairs does not encode.
    let unencodable: BTreeMap<(u8, u8), u8> = BTreeMap::from([((1, 2), 3)]);
    let value = returned_once_then_not_stored(Options::default(), unencodable).await;
    assert_eq!(value.get(&(1, 2)), Some(&3));
}

#[tokio::test]
async fn a_stored_result_of_another_type_is_a_decode_error_not_a_panic() {
    let coordinator = common::coordinator(Options::default());
    let runs = AtomicU32::new(0);
    assert_eq!(attempt(&coordinator, OP, "k", &runs).await.unwrap(), 1);
    let error = coordinator
        .execute_attached(OP, "k", fingerprint("o", 1), move |_claim| async move {
            Ok::<Vec<String>, ProviderTimeout>(Vec::new())
        })
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Decode(_)), "{error:?}");
    assert_eq!(error.http_status(), Some(500));
    assert_eq!(coordinator.metrics().decode_failed, 1);
}

#[tokio::test]
async fn the_actions_own_error_comes_back_unchanged_with_no_status() {
    let coordinator = common::coordinator(Options::default());
    let error = coordinator
        .execute_attached(OP, "k", fingerprint("o", 1), move |_claim| async move {
            Err::<u32, _>(ProviderTimeout)
        })
        .await
        .unwrap_err();
    assert_eq!(error.http_status(), None);
    assert!(error.is_retryable());
    assert_eq!(error.into_action(), Some(ProviderTimeout));
    assert!(coordinator.store().is_empty());
}
