//! Differential test on SQLite: random command sequences, with time moving, applied to the
//! core's record machine and to an SQLite file through the adapter; every reply must agree,
//! step for step, judged at the instant each command reports (the checker is the
//! conformance kit's differential check, `idem_conformance`).
//!
//! The checker is shown to catch bugs: deliberately broken stores (without the owner
//! check, with expiry judged by another clock, handing a takeover the first holder's
//! fence), played in front of the real store by the kit
//! (`idem_conformance::broken::InFront`), must each be caught.

mod support;

use std::time::Duration;

use idem_conformance::broken::{Bug, InFront};
use idem_conformance::{Check, Config, Subject, Verdict, run};
use idem_sqlite::SqliteStore;
use support::subject::OnSqlite;
use support::{TempDir, runtime};

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
    let report = runtime.block_on(run("SQLite", subject, &config));
    match report
        .result(Check::Differential)
        .map(|result| &result.verdict)
    {
        Some(Verdict::Passed(_)) => Ok(()),
        Some(Verdict::Failed(divergence)) => Err(divergence.to_string()),
        _ => Err(format!("the differential check did not run: {report}")),
    }
}

fn open(runtime: &tokio::runtime::Runtime, dir: &TempDir, read_first: bool) -> SqliteStore {
    open_with(runtime, dir, read_first, true)
}

fn open_with(
    runtime: &tokio::runtime::Runtime,
    dir: &TempDir,
    read_first: bool,
    group_commit: bool,
) -> SqliteStore {
    runtime.block_on(async {
        let store = SqliteStore::builder()
            .read_first(read_first)
            .group_commit(group_commit)
            .open(dir.db())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        store
    })
}

#[test]
fn sqlite_agrees_with_the_record_machine() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = open(&runtime, &dir, true);
    if let Err(failure) = check(&runtime, &OnSqlite(store.clone()), 200) {
        panic!("{failure}");
    }
    let stats = store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0, "{stats:?}");
    assert!(stats.commands > 500, "{stats:?}");
    // Both paths ran: answers from a plain read, and write transactions.
    assert!(
        stats.read_only > 50 && stats.write_transactions > 200,
        "{stats:?}"
    );
}

/// The same with every command in a write transaction.
#[test]
fn the_write_transaction_alone_agrees_with_the_record_machine() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = open(&runtime, &dir, false);
    if let Err(failure) = check(&runtime, &OnSqlite(store.clone()), 200) {
        panic!("{failure}");
    }
    let stats = store.stats();
    assert_eq!(
        stats.unavailable + stats.corrupt + stats.read_only,
        0,
        "{stats:?}"
    );
}

/// The same with each command committed on its own, without the writer task.
#[test]
fn sqlite_without_group_commit_agrees_with_the_record_machine() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = open_with(&runtime, &dir, true, false);
    if let Err(failure) = check(&runtime, &OnSqlite(store.clone()), 200) {
        panic!("{failure}");
    }
    let stats = store.stats();
    assert_eq!(
        stats.unavailable + stats.corrupt + stats.batches,
        0,
        "{stats:?}"
    );
}

#[test]
fn the_checker_catches_a_store_without_the_owner_check() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = InFront::new(OnSqlite(open(&runtime, &dir, true)), Bug::NoOwnerCheck);
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_without_the_fingerprint_check() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = InFront::new(
        OnSqlite(open(&runtime, &dir, true)),
        Bug::NoFingerprintCheck,
    );
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_expiry_judged_by_another_clock() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = InFront::new(OnSqlite(open(&runtime, &dir, true)), SKEWED);
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_takeover_under_the_first_holders_fence() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = InFront::new(OnSqlite(open(&runtime, &dir, true)), Bug::FirstFenceForever);
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("F1"), "{failure}");
}
