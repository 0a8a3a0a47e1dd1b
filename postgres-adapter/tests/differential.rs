//! Differential test on PostgreSQL: random command sequences, with time moving, applied to
//! the core's record machine and to PostgreSQL through the adapter; every reply must agree,
//! step for step, judged at the server instant each statement reports (the checker is the
//! conformance kit's differential check, `idem_conformance`).
//!
//! The checker is shown to catch bugs: deliberately broken stores (statements without the
//! owner check, without the fingerprint check, with expiry judged by the client's clock, and
//! handing a takeover the first holder's fence), played in front of the real store
//! by the kit (`idem_conformance::broken::InFront`), must each be caught.

mod support;

use std::time::Duration;

use idem_conformance::broken::{Bug, InFront};
use idem_conformance::{Check, Config, Subject, Verdict, run};
use idem_postgres::PostgresStore;
use support::TestDb;
use support::subject::OnPostgres;

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
    let report = runtime.block_on(run("PostgreSQL", subject, &config));
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
fn postgres_agrees_with_the_record_machine() {
    let runtime = runtime();
    let (db, subject) = runtime.block_on(async {
        let db = TestDb::create().await;
        let store = db.store(2).await;
        let pool = db.pool(1).await;
        (db, OnPostgres { store, pool })
    });
    if let Err(failure) = check(&runtime, &subject, 200) {
        panic!("{failure}");
    }
    let stats = subject.store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0, "{stats:?}");
    assert!(stats.commands > 500, "{stats:?}");
    drop(db);
}

/// The same without the read-first step: every reserve is the one reserve statement, which
/// answers live records itself.
#[test]
fn the_reserve_statement_alone_agrees_with_the_record_machine() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let subject = runtime.block_on(async {
        let store = PostgresStore::builder()
            .read_first(false)
            .build(db.pool(2).await);
        store.migrate().await.unwrap();
        OnPostgres {
            store,
            pool: db.pool(1).await,
        }
    });
    if let Err(failure) = check(&runtime, &subject, 200) {
        panic!("{failure}");
    }
    let stats = subject.store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0, "{stats:?}");
}

/// The store on a pool of two, its table migrated, as the kit's subject.
fn on_postgres(runtime: &tokio::runtime::Runtime, db: &TestDb) -> OnPostgres {
    runtime.block_on(async {
        OnPostgres {
            store: db.store(2).await,
            pool: db.pool(1).await,
        }
    })
}

#[test]
fn the_checker_catches_a_store_without_the_owner_check() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let subject = on_postgres(&runtime, &db);
    let failure = check(&runtime, &InFront::new(subject, Bug::NoOwnerCheck), 256)
        .expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_without_the_fingerprint_check() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let subject = on_postgres(&runtime, &db);
    let failure = check(
        &runtime,
        &InFront::new(subject, Bug::NoFingerprintCheck),
        256,
    )
    .expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_expiry_judged_by_another_clock() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let subject = on_postgres(&runtime, &db);
    let failure = check(&runtime, &InFront::new(subject, SKEWED), 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_takeover_under_the_first_holders_fence() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = InFront::new(on_postgres(&runtime, &db), Bug::FirstFenceForever);
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("F1"), "{failure}");
}
