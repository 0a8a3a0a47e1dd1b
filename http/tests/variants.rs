//! The checks of the draft's central rules pass on the layer, on both stores, and catch
//! deliberately broken stand-ins: a result cache, and one that caches failures too.

mod support;

use std::time::Duration;

use support::broken::ResultCache;
use support::{Bank, Fixture, StoreKind, checks, options};

on_both_stores![every_check_passes_on_the_layer];

async fn every_check_passes_on_the_layer(kind: StoreKind) {
    let f = Fixture::new(kind, Duration::ZERO, options(), |layer| layer).await;
    let (base, bank) = (f.base.as_str(), &f.bank);
    checks::replay_is_the_first_response(base, bank)
        .await
        .unwrap();
    checks::reuse_is_refused_while_running_and_after(base, bank)
        .await
        .unwrap();
    checks::a_concurrent_duplicate_gets_the_first_response(base, bank)
        .await
        .unwrap();
    checks::failures_are_not_recorded(base, bank).await.unwrap();
}

/// Serves the bank behind `cache` in place of the layer.
async fn behind(cache: ResultCache) -> (String, Bank, tokio::task::JoinHandle<()>) {
    let bank = Bank::new(Duration::ZERO);
    let app = support::routes(bank.clone(), |charges| charges.layer(cache));
    let (base, server) = support::serve(app).await;
    (base, bank, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_cache_is_caught_by_every_check_it_breaks() {
    let (base, bank, server) = behind(ResultCache::default()).await;
    let found = checks::replay_is_the_first_response(&base, &bank)
        .await
        .unwrap_err();
    assert!(found.starts_with("the replay does not say"), "{found}");
    let found = checks::reuse_is_refused_while_running_and_after(&base, &bank)
        .await
        .unwrap_err();
    assert!(found.contains("while the first ran got 201"), "{found}");
    let found = checks::a_concurrent_duplicate_gets_the_first_response(&base, &bank)
        .await
        .unwrap_err();
    assert_eq!(found, "charged 2 times");
    // It does not cache failures, so that check passes: it is about something else.
    checks::failures_are_not_recorded(&base, &bank)
        .await
        .unwrap();
    server.abort();

    let (base, bank, server) = behind(ResultCache::caching_failures()).await;
    let found = checks::failures_are_not_recorded(&base, &bank)
        .await
        .unwrap_err();
    assert_eq!(found, "the retry after a 503 got 503");
    server.abort();
}
