//! Differential test on SQLite: random command sequences, with time moving, applied to the
//! core's record machine and to an SQLite file through the adapter; every reply must agree,
//! step for step, judged at the instant each command reports (the checker is the
//! conformance kit's differential check, `idem_conformance`).
//!
//! The checker is shown to catch bugs: deliberately broken stores (without the owner
//! check, with expiry judged by another clock, handing a takeover the first holder's
//! fence), built here around the real store, must each be caught.

mod support;

use std::collections::HashMap;
use std::sync::Mutex;

use idem::StoreError;
use idem_conformance::{Check, Config, Subject, Timing, Verdict, run};
use idem_core::record::{Command, Record, Reply};
use idem_core::{Fence, Key, Operation, Timestamp};
use idem_sqlite::SqliteStore;
use support::subject::OnSqlite;
use support::{TempDir, runtime};

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

async fn holder(store: &SqliteStore, operation: &Operation, key: &Key) -> Option<Record> {
    match store.apply_timed(operation, key, Command::Read).await {
        Ok((Reply::Read(record), _)) => record,
        _ => None,
    }
}

/// Broken on purpose: as if complete, renew and release did not check the owner token.
struct NoOwnerCheck(SqliteStore);

impl Subject for NoOwnerCheck {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.0.now())
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        mut command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        if let Some(record) = holder(&self.0, operation, key).await {
            match &mut command {
                Command::Complete { owner, .. }
                | Command::Renew { owner, .. }
                | Command::Release { owner } => *owner = record.owner(),
                _ => {}
            }
        }
        let (reply, now) = self.0.apply_timed(operation, key, command).await?;
        Ok((reply, Timing::At(now)))
    }
}

/// Broken on purpose: every grant of a key carries the fence of its first grant.
struct FirstFenceForever {
    store: SqliteStore,
    first: Mutex<HashMap<(Operation, Key), Fence>>,
}

impl Subject for FirstFenceForever {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.store.now())
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let (mut reply, now) = self.store.apply_timed(operation, key, command).await?;
        if let Reply::Reserved(grant) = &mut reply
            && let Some(fence) = grant.fence
        {
            let mut first = self.first.lock().unwrap();
            grant.fence = Some(
                *first
                    .entry((operation.clone(), key.clone()))
                    .or_insert(fence),
            );
        }
        Ok((reply, Timing::At(now)))
    }
}

/// Broken on purpose: reports its decisions as made 20 ms before the store's clock, as a
/// store that judged expiry by a clock running behind would.
struct SkewedClock(SqliteStore);

impl Subject for SkewedClock {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.0.now())
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let (reply, now) = self.0.apply_timed(operation, key, command).await?;
        Ok((
            reply,
            Timing::At(Timestamp::from_millis(now.as_millis().saturating_sub(20))),
        ))
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
    let store = NoOwnerCheck(open(&runtime, &dir, true));
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_expiry_judged_by_another_clock() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = SkewedClock(open(&runtime, &dir, true));
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_takeover_under_the_first_holders_fence() {
    let runtime = runtime();
    let dir = TempDir::new();
    let store = FirstFenceForever {
        store: open(&runtime, &dir, true),
        first: Mutex::default(),
    };
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("F1"), "{failure}");
}
