//! The article's scenarios on MemoryStore, with time paused: the provider charges in
//! 300 ms, and the client retries 50 ms after its first request, while it still runs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Charge, FlakyStore, InFront, Provider, ProviderTimeout, fingerprint, one_effect};
use idem::{
    Coordinator, Error, InFlightPolicy, MemoryStore, Options, Provenance, Recording,
    StoreFailurePolicy,
};
use idem_check::Variant;

const CHARGE_TAKES: Duration = Duration::from_millis(300);
const RETRY_AFTER: Duration = Duration::from_millis(50);

/// Two requests with one key, the second 50 ms after the first; returns both answers.
async fn first_request_still_running(
    policy: InFlightPolicy,
    provider: Arc<Provider>,
) -> Vec<Result<Charge, Error<ProviderTimeout>>> {
    let options = Options::builder().in_flight(policy).build().unwrap();
    let payments = common::coordinator(options);
    let request = |payments: Coordinator<MemoryStore>, provider: Arc<Provider>| async move {
        payments
            .execute(
                "payment.charge",
                "order-1",
                fingerprint("o-1", 100),
                move |claim| async move { provider.charge_for(claim, "o-1", 100, CHARGE_TAKES).await },
            )
            .await
    };
    let first = tokio::spawn(request(payments.clone(), provider.clone()));
    tokio::time::sleep(RETRY_AFTER).await;
    let second = tokio::spawn(request(payments.clone(), provider.clone()));
    vec![first.await.unwrap(), second.await.unwrap()]
}

#[tokio::test(start_paused = true)]
async fn wait_policy_answers_both_with_one_charge() {
    let provider = Arc::new(Provider::default());
    let answers = first_request_still_running(InFlightPolicy::Wait, provider.clone()).await;
    let ids: Vec<_> = answers.into_iter().map(|a| a.unwrap().id).collect();
    assert_eq!(ids, ["ch_1", "ch_1"]);
    assert_eq!(one_effect(&provider), Ok(()));
    // The provider was handed the idempotency key, to deduplicate on its own.
    assert_eq!(provider.references(), ["o-1:order-1"]);
}

#[tokio::test(start_paused = true)]
async fn raise_policy_answers_in_progress_to_the_second() {
    let provider = Arc::new(Provider::default());
    let answers = first_request_still_running(InFlightPolicy::Raise, provider.clone()).await;
    assert_eq!(answers[0].as_ref().unwrap().id, "ch_1");
    let second = answers[1].as_ref().unwrap_err();
    assert!(matches!(second, Error::InProgress), "{second:?}");
    assert_eq!(second.http_status(), Some(409));
    assert_eq!(one_effect(&provider), Ok(()));
}

/// The broken variant: a result cache (`idem_check`'s, in front of the MemoryStore) never
/// reserves, so the retry that comes while the first request runs charges again. The
/// checker the two tests above rely on must catch it.
#[tokio::test(start_paused = true)]
async fn a_result_cache_charges_twice_and_the_checker_catches_it() {
    let provider = Arc::new(Provider::default());
    let payments = Coordinator::new(InFront::new(Variant::ResultCache), Options::default());
    let request = |payments: Coordinator<InFront>, provider: Arc<Provider>| async move {
        payments
            .execute(
                "payment.charge",
                "order-1",
                fingerprint("o-1", 100),
                move |claim| async move { provider.charge_for(claim, "o-1", 100, CHARGE_TAKES).await },
            )
            .await
    };
    let first = tokio::spawn(request(payments.clone(), provider.clone()));
    tokio::time::sleep(RETRY_AFTER).await;
    let second = tokio::spawn(request(payments.clone(), provider.clone()));
    let ids = [
        first.await.unwrap().unwrap().id,
        second.await.unwrap().unwrap().id,
    ];
    // Each execution is answered with its own value (a service that answers from the cache
    // would say ch_1 twice, as in the article): the bug shows on the statement.
    assert_eq!(ids, ["ch_1", "ch_2"]);
    assert_eq!(provider.charges(), ["ch_1", "ch_2"]);
    assert!(one_effect(&provider).is_err());
}

#[tokio::test(start_paused = true)]
async fn same_key_same_amount_replays_another_amount_is_key_reuse() {
    let provider = Provider::default();
    let payments = common::coordinator(Options::default());
    let charge = |amount: u64| {
        let provider = &provider;
        payments.execute_attached_with_provenance(
            "payment.charge",
            "order-1",
            fingerprint("o-1", amount),
            move |claim| provider.charge_for(claim, "o-1", amount, CHARGE_TAKES),
        )
    };
    let first = charge(100).await.unwrap();
    assert!(matches!(
        first.provenance,
        Provenance::Executed {
            lease_lost: false,
            ..
        }
    ));
    let replay = charge(100).await.unwrap();
    assert_eq!(replay.value, first.value);
    assert_eq!(replay.provenance, Provenance::Replayed);

    let reused = charge(5).await.unwrap_err();
    match &reused {
        Error::KeyReuse { stored, given } => {
            assert_eq!(*stored, fingerprint("o-1", 100));
            assert_eq!(*given, fingerprint("o-1", 5));
        }
        other => panic!("expected KeyReuse, got {other:?}"),
    }
    assert_eq!(reused.http_status(), Some(422));
    assert_eq!(provider.charges(), ["ch_1"]);
    let counted = payments.metrics();
    assert_eq!(
        (counted.executed, counted.replayed, counted.key_reuse),
        (1, 1, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_failure_is_not_cached_and_the_retry_charges_once() {
    let provider = Provider::default();
    let payments = common::coordinator(Options::default());
    let first = payments
        .execute_attached(
            "payment.charge",
            "order-1",
            fingerprint("o-1", 100),
            move |_claim| async move {
                tokio::time::sleep(CHARGE_TAKES).await;
                Err::<Charge, _>(ProviderTimeout)
            },
        )
        .await;
    assert!(matches!(first, Err(Error::Action(ProviderTimeout))));
    assert_eq!(first.unwrap_err().http_status(), None);

    let second = payments
        .execute_attached(
            "payment.charge",
            "order-1",
            fingerprint("o-1", 100),
            |claim| provider.charge_for(claim, "o-1", 100, CHARGE_TAKES),
        )
        .await
        .unwrap();
    assert_eq!(second.id, "ch_1");
    assert_eq!(one_effect(&provider), Ok(()));
    assert_eq!(payments.metrics().action_failed, 1);
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_store_fails_open_by_default_and_says_so() {
    let store = FlakyStore::new(MemoryStore::new());
    store.set_down(true);
    let payments = Coordinator::new(store, Options::default()).with_seed(1);
    assert_eq!(
        payments.options().on_store_failure(),
        StoreFailurePolicy::FailOpen
    );
    let provider = Provider::default();
    let outcome = payments
        .execute_attached_with_provenance(
            "payment.charge",
            "order-1",
            fingerprint("o-1", 100),
            |claim| {
                let provider = &provider;
                async move {
                    assert!(!claim.is_protected());
                    Ok::<_, ProviderTimeout>(
                        provider.charge("o-1", 100, "order-1", CHARGE_TAKES).await,
                    )
                }
            },
        )
        .await
        .unwrap();
    assert_eq!(outcome.value.id, "ch_1");
    assert_eq!(
        outcome.provenance,
        Provenance::ExecutedUnprotected {
            recording: Recording::Unknown
        }
    );
    assert_eq!(one_effect(&provider), Ok(()));
    let counted = payments.metrics();
    assert_eq!(counted.failed_open, 1);
    // One reserve and its two retries, then the complete and its two retries.
    assert_eq!(counted.store_errors.reserve, 3);
    assert_eq!(counted.store_errors.complete, 3);
}

#[tokio::test(start_paused = true)]
async fn one_key_under_two_operations_is_two_records() {
    let payments = common::coordinator(Options::default());
    let provider = Provider::default();
    for operation in ["order.create", "order.cancel", "order.create"] {
        payments
            .execute_attached(operation, "order-1", fingerprint("o-1", 100), |_claim| {
                let provider = &provider;
                async move {
                    Ok::<_, ProviderTimeout>(
                        provider
                            .charge(operation, 0, "order-1", Duration::ZERO)
                            .await,
                    )
                }
            })
            .await
            .unwrap();
    }
    assert_eq!(
        provider.references(),
        ["order.create:order-1", "order.cancel:order-1"]
    );
    assert_eq!(payments.store().len(), 2);
}

/// Same seed, same owner tokens (and jitter): a test's run is repeatable.
#[tokio::test(start_paused = true)]
async fn a_seeded_coordinator_draws_the_same_tokens_every_run() {
    let owners = |seed: u64| async move {
        let payments = Coordinator::new(MemoryStore::new(), Options::default()).with_seed(seed);
        let mut owners = Vec::new();
        for key in ["a", "b"] {
            let owner = payments
                .execute_attached(
                    "payment.charge",
                    key,
                    fingerprint(key, 1),
                    move |claim| async move { Ok::<_, ProviderTimeout>(claim.owner().to_string()) },
                )
                .await
                .unwrap();
            owners.push(owner);
        }
        owners
    };
    let first = owners(42).await;
    assert_eq!(first, owners(42).await);
    assert_ne!(first, owners(43).await);
    assert_ne!(first[0], first[1]);
}
