//! Differential test on MariaDB: random command sequences, with time moving, applied to
//! the core's record machine and to MariaDB through the adapter; every reply must agree,
//! step for step, judged at the server instant each command reports (the checker is the
//! conformance kit's differential check, `idem_conformance`).
//!
//! The checker is shown to catch bugs: deliberately broken stores (commands without the
//! owner check, without the fingerprint check, with expiry judged by the client's clock, and
//! handing a takeover the first holder's fence), built here in the harness around the real
//! store, must each be caught.

mod support;

use std::collections::HashMap;
use std::sync::Mutex;

use idem::StoreError;
use idem_conformance::{Check, Config, Subject, Timing, Verdict, run};
use idem_core::record::{Command, Record, Reply};
use idem_core::{Fence, Key, Operation, Timestamp};
use idem_mysql::MySqlStore;
use support::TestDb;
use support::subject::OnMySql;

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

async fn holder(store: &MySqlStore, operation: &Operation, key: &Key) -> Option<Record> {
    match store.apply_timed(operation, key, Command::Read).await {
        Ok((Reply::Read(record), _)) => record,
        _ => None,
    }
}

/// Broken on purpose: as if the store did not check the owner token (complete, renew
/// and release act for whoever holds the key).
struct NoOwnerCheck(MySqlStore);

impl Subject for NoOwnerCheck {
    type Store = MySqlStore;

    fn store(&self) -> &MySqlStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.0.now().await
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

/// Broken on purpose: as if the reserve did not compare fingerprints.
struct NoFingerprintCheck(MySqlStore);

impl Subject for NoFingerprintCheck {
    type Store = MySqlStore;

    fn store(&self) -> &MySqlStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.0.now().await
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        mut command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        if let (Some(record), Command::Reserve { fingerprint, .. }) =
            (holder(&self.0, operation, key).await, &mut command)
        {
            *fingerprint = record.fingerprint();
        }
        let (reply, now) = self.0.apply_timed(operation, key, command).await?;
        Ok((reply, Timing::At(now)))
    }
}

/// Broken on purpose: every grant of a key carries the fence of its first grant, as a store
/// that kept one fence per key and never advanced it on a takeover would.
struct FirstFenceForever {
    store: MySqlStore,
    first: Mutex<HashMap<(Operation, Key), Fence>>,
}

impl Subject for FirstFenceForever {
    type Store = MySqlStore;

    fn store(&self) -> &MySqlStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.store.now().await
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

/// Broken on purpose: reports its decisions as made 20 ms before the server's clock, as a
/// store that judged expiry by a client clock running behind would.
struct SkewedClock(MySqlStore);

impl Subject for SkewedClock {
    type Store = MySqlStore;

    fn store(&self) -> &MySqlStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.0.now().await
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
    let failure = check(&runtime, &NoOwnerCheck(store), 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_without_the_fingerprint_check() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = runtime.block_on(db.store(2));
    let failure = check(&runtime, &NoFingerprintCheck(store), 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_expiry_judged_by_another_clock() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = runtime.block_on(db.store(2));
    let failure = check(&runtime, &SkewedClock(store), 256).expect_err("must be caught");
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_takeover_under_the_first_holders_fence() {
    let runtime = runtime();
    let db = runtime.block_on(TestDb::create());
    let store = FirstFenceForever {
        store: runtime.block_on(db.store(2)),
        first: Mutex::default(),
    };
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("F1"), "{failure}");
}
