//! The kit on the stores it needs no server for: `MemoryStore` conforms, and each broken
//! store is caught by the check that exists for its bug.

use std::time::Duration;

use idem::MemoryStore;
use idem_conformance::broken::{BrokenStore, Flaw};
use idem_conformance::{Check, Config, Verdict, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_conforms() {
    let report = run("MemoryStore", &MemoryStore::new(), &Config::default()).await;
    println!("{report}");
    assert!(report.passed(), "{report}");
    // It keeps typed records: the one check it cannot take is said, not hidden. Its change
    // notices are checked.
    assert!(
        matches!(
            report.result(Check::Notices).map(|result| &result.verdict),
            Some(Verdict::Passed(_))
        ),
        "{report}"
    );
    let skipped: Vec<Check> = report.skipped().map(|result| result.check).collect();
    assert_eq!(skipped, vec![Check::Corrupt], "{report}");
}

/// Runs the kit on a store with `flaw` and answers the checks that failed.
async fn caught(flaw: Flaw) -> Vec<Check> {
    let report = run(
        &format!("{flaw:?}"),
        &BrokenStore::new(flaw),
        &Config::default(),
    )
    .await;
    println!("{report}");
    report.failures().map(|result| result.check).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_skips_the_owner_check_is_caught() {
    let failed = caught(Flaw::SkipsOwnerCheck).await;
    assert!(failed.contains(&Check::Owners), "{failed:?}");
    assert!(failed.contains(&Check::Transitions), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_reads_the_clients_clock_is_caught() {
    let failed = caught(Flaw::ClientClock {
        ahead: Duration::from_millis(30),
    })
    .await;
    assert!(failed.contains(&Check::Expiry), "{failed:?}");
    assert!(failed.contains(&Check::Differential), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_a_lock_is_caught_by_the_races() {
    let failed = caught(Flaw::Unlocked).await;
    // Sent one at a time its commands are right: only the races see it.
    assert_eq!(failed, vec![Check::Races]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_starts_at_its_first_poll_is_caught_by_the_notices() {
    let failed = caught(Flaw::WatchFromFirstPoll).await;
    // Its commands are right: only a change before the first poll shows the lost wake-up.
    assert_eq!(failed, vec![Check::Notices]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_folds_the_case_of_keys_is_caught_by_the_names() {
    let failed = caught(Flaw::CaseInsensitiveKeys).await;
    // The kit's own keys are lower case: only the names check sends two that differ in case.
    assert_eq!(failed, vec![Check::Names]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cuts_large_bodies_is_caught_by_the_sizes() {
    let failed = caught(Flaw::TruncatesBodies).await;
    assert_eq!(failed, vec![Check::Sizes]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_names_its_seed_and_a_short_history() {
    let config = Config {
        checks: vec![Check::Differential],
        ..Config::default()
    };
    let report = run(
        "client clock",
        &BrokenStore::new(Flaw::ClientClock {
            ahead: Duration::from_millis(30),
        }),
        &config,
    )
    .await;
    let Some(Verdict::Failed(divergence)) = report
        .result(Check::Differential)
        .map(|result| &result.verdict)
    else {
        panic!("not caught: {report}");
    };
    assert!(
        divergence.detail.contains(&format!("{:#x}", config.seed)),
        "{divergence}"
    );
    // Shrunk: a clock 30 ms ahead shows in one grant's lease end.
    assert!(divergence.history.len() <= 3, "{divergence}");
}
