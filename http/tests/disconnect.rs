//! A client that goes away mid-charge, and a timeout that fires mid-charge: the charge
//! happens once, and the retry gets its response. A result cache in place of the layer is
//! caught charging twice by the same checks.

mod support;

use std::convert::Infallible;
use std::time::Duration;

use http::StatusCode;
use support::broken::ResultCache;
use support::{Bank, Fixture, StoreKind, options, order};
use tower_http::timeout::TimeoutLayer;

/// How long the provider takes after it has charged.
const TAKES: Duration = Duration::from_millis(200);

on_both_stores![
    a_client_that_hangs_up_10ms_in_and_retries_at_once_is_charged_once,
    under_a_timeout_layer_the_charge_completes_and_the_retry_replays,
];

async fn post(base: &str, timeout: Option<Duration>) -> Result<support::Answer, reqwest::Error> {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/charges"))
        .header("idempotency-key", "\"k\"")
        .header("content-type", "application/json")
        .body(order(100).to_string());
    if let Some(timeout) = timeout {
        request = request.timeout(timeout);
    }
    Ok(support::Answer::of(request.send().await?).await)
}

/// The client hangs up 10 ms into the charge and retries at once with the same key. The
/// card must be charged once, and the retry must get the first's charge.
async fn check_disconnect_then_retry(base: &str, bank: &Bank) -> Result<(), String> {
    match post(base, Some(Duration::from_millis(10))).await {
        Err(error) if error.is_timeout() => {}
        other => return Err(format!("the first request was not cut off: {other:?}")),
    }
    let retry = post(base, None).await.map_err(|e| e.to_string())?;
    // Let anything still running end before counting.
    tokio::time::sleep(TAKES + Duration::from_millis(200)).await;
    let charges = bank.charges();
    if charges != 1 {
        return Err(format!("charged {charges} times: {:?}", bank.statement()));
    }
    if retry.status != 201 || retry.json()["id"] != "ch_1" {
        return Err(format!("the retry did not get the first charge: {retry:?}"));
    }
    Ok(())
}

/// A timeout layer cuts the first request off mid-charge; a retry at once waits and is cut
/// off too; a retry after the charge's end gets its response. One charge.
async fn check_timeout_then_retry(base: &str, bank: &Bank) -> Result<(), String> {
    for attempt in ["first", "immediate retry"] {
        let answer = post(base, None).await.map_err(|e| e.to_string())?;
        if answer.status != 408 {
            return Err(format!("the {attempt} was not timed out: {answer:?}"));
        }
    }
    tokio::time::sleep(TAKES + Duration::from_millis(100)).await;
    let retry = post(base, None).await.map_err(|e| e.to_string())?;
    let charges = bank.charges();
    if charges != 1 {
        return Err(format!("charged {charges} times: {:?}", bank.statement()));
    }
    if retry.status != 201 || retry.json()["id"] != "ch_1" {
        return Err(format!("the retry did not get the first charge: {retry:?}"));
    }
    Ok(())
}

fn timeout() -> TimeoutLayer {
    TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, Duration::from_millis(60))
}

async fn a_client_that_hangs_up_10ms_in_and_retries_at_once_is_charged_once(kind: StoreKind) {
    let f = Fixture::new(kind, TAKES, options(), |layer| layer).await;
    check_disconnect_then_retry(&f.base, &f.bank).await.unwrap();
    assert_eq!(f.bank.runs(), 1);
}

async fn under_a_timeout_layer_the_charge_completes_and_the_retry_replays(kind: StoreKind) {
    let (store, redis) = support::store(kind).await;
    let coordinator = idem::Coordinator::new(store.clone(), options().build().unwrap());
    let layer = idem_http::IdempotencyLayer::new(coordinator.clone());
    let bank = Bank::new(TAKES);
    let app = support::routes(bank.clone(), |charges| {
        charges.layer::<_, Infallible>(layer).layer(timeout())
    });
    let f = Fixture::serve(bank, app, store, coordinator, redis).await;
    check_timeout_then_retry(&f.base, &f.bank).await.unwrap();
    assert_eq!(f.bank.runs(), 1);
    assert_eq!(f.coordinator.metrics().executed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_cache_in_place_of_the_layer_is_caught_charging_twice() {
    let bank = Bank::new(TAKES);
    let app = support::routes(bank.clone(), |charges| {
        charges.layer(ResultCache::default())
    });
    let (base, server) = support::serve(app).await;
    let found = check_disconnect_then_retry(&base, &bank).await.unwrap_err();
    assert!(found.starts_with("charged 2 times"), "{found}");
    server.abort();

    let bank = Bank::new(TAKES);
    let app = support::routes(bank.clone(), |charges| {
        charges
            .layer::<_, Infallible>(ResultCache::default())
            .layer(timeout())
    });
    let (base, server) = support::serve(app).await;
    let found = check_timeout_then_retry(&base, &bank).await.unwrap_err();
    assert!(found.starts_with("charged"), "{found}");
    server.abort();
}
