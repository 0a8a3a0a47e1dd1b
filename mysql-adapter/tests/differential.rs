//! Differential test on MariaDB: random command sequences, with time moving, applied to
//! the core's record machine and to MariaDB through the adapter; every reply must agree,
//! step for step, judged at the server instant each command reports (the checker is the
//! conformance kit's differential check, `idem_conformance`).
//!
//! The checker is shown to catch bugs: deliberately broken stores (commands without the
//! owner check, without the fingerprint check, with expiry judged by the client's clock, and
//! handing a takeover the first holder's fence), played in front of the real store
//! by the kit (`idem_conformance::broken::InFront`), must each be caught.

mod support;

use std::time::Duration;

use idem_conformance::broken::{Bug, InFront};
use idem_conformance::{Check, Config, Subject, Verdict, run};
use idem_mysql::MySqlStore;
use support::TestDb;
use support::subject::OnMySql;

/// A store that reports its decisions 20 ms behind the clock it judged by, as one judging
/// expiry by a client clock running behind would.
const SKEWED: Bug = Bug::SkewedClock {
    behind: Duration::from_millis(20),
};

/// Runs `cases` random sequences of the kit's differential check; the first divergence,
/// shrunk, with its history, is the error.
fn check<S: Subject>(
    runtime: &tokio::runtime::Runtime,
    subject: &S,
    cases: u32,
) -> Result<(), String> {
    let config = Config {
        cases,
        checks: vec![Check::Differential],
        ..Config::default()
    };
    let report = runtime.block_on(run("MariaDB", subject, &config));
    match report
        .result(Check::Differential)
        .map(|result| &result.verdict)
    {
        Some(Verdict::Passed(_)) => Ok(()),
        Some(Verdict::Failed(divergence)) => Err(divergence.to_string()),
        _ => Err(format!("the differential check did not run: {report}")),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn mariadb_agrees_with_the_record_machine() {
    let runtime = runtime();
    let (db, store) = runtime.block_on(async {
        let db = TestDb::create().await;
        let store = db.store(2).await;
        (db, store)
    });
    if let Err(failure) = check(&runtime, &OnMySql(store.clone()), 200) {
        panic!("{failure}");
    }
    let stats = store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0, "{stats:?}");
    assert!(stats.commands > 500, "{stats:?}");
    drop(db);
}

/// The same with the insert tried first (`read_first(false)`): a live record is answered
/// after a duplicate insert and a read.
#[test]
fn the_insert_first_reserve_agrees_with_the_record_machine() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = runtime.block_on(async {
        let store = MySqlStore::builder()
            .read_first(false)
            .build(db.pool(2).await);
        store.migrate().await.unwrap();
        store
    });
    if let Err(failure) = check(&runtime, &OnMySql(store.clone()), 200) {
        panic!("{failure}");
    }
    let stats = store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0, "{stats:?}");
}

#[test]
fn the_checker_catches_a_store_without_the_owner_check() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = runtime.block_on(db.store(2));
    let failure = check(
        &runtime,
        &InFront::new(OnMySql(store), Bug::NoOwnerCheck),
        256,
    )
    .expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_without_the_fingerprint_check() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = runtime.block_on(db.store(2));
    let failure = check(
        &runtime,
        &InFront::new(OnMySql(store), Bug::NoFingerprintCheck),
        256,
    )
    .expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_expiry_judged_by_another_clock() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = runtime.block_on(db.store(2));
    let failure =
        check(&runtime, &InFront::new(OnMySql(store), SKEWED), 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_takeover_under_the_first_holders_fence() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = InFront::new(
        OnMySql(runtime.block_on(db.store(2))),
        Bug::FirstFenceForever,
    );
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("F1"), "{failure}");
}
