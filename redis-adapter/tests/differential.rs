//! Differential test on standalone Redis: random command sequences, with time moving,
//! applied to the core's record machine and to Redis through the adapter; every reply must
//! agree, step for step (the checker is in `support/differential.rs`).
//!
//! The checker is shown to catch bugs: four deliberately broken stores (a script without the
//! owner check, one without the fingerprint check, a claim whose key outlives its lease, a
//! complete that records a panic as a result not stored), built here in the harness around
//! the real store, must each be caught.

mod support;

use idem::StoreError;
use idem_core::record::{Command, Record, Reply, StoredResult};
use idem_core::{Key, Operation};
use idem_redis::RedisStore;
use support::RedisServer;
use support::differential::{Claiming, TimedStore, Timing, check};

/// Broken on purpose: as if the scripts did not check the owner token (complete, renew and
/// release act for whoever holds the key).
struct Unfenced(RedisStore);

/// Broken on purpose: as if the reserve script did not compare fingerprints.
struct NoFingerprintCheck(RedisStore);

async fn holder(store: &RedisStore, operation: &Operation, key: &Key) -> Option<Record> {
    match store.apply_timed(operation, key, Command::Read).await {
        Ok((Reply::Read(record), _)) => record,
        _ => None,
    }
}

impl TimedStore for Unfenced {
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
        TimedStore::apply_timed(&self.0, operation, key, command).await
    }
}

impl TimedStore for NoFingerprintCheck {
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
        TimedStore::apply_timed(&self.0, operation, key, command).await
    }
}

/// Broken on purpose: as if the complete script wrote a panicked action's record as a
/// completion without a body (state 2 instead of 6), so that a replay says "result not
/// stored" where it must say "outcome unknown".
struct PanicAsNotStored(RedisStore);

impl TimedStore for PanicAsNotStored {
    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        mut command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        if let Command::Complete { result, .. } = &mut command
            && *result == StoredResult::Panicked
        {
            *result = StoredResult::NotStored;
        }
        TimedStore::apply_timed(&self.0, operation, key, command).await
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn redis_agrees_with_the_record_machine() {
    let server = RedisServer::start();
    let runtime = runtime();
    let store = runtime
        .block_on(RedisStore::connect(&server.url()))
        .unwrap();
    if let Err(failure) = check(&runtime, &store, 200) {
        panic!("{failure}");
    }
    assert_eq!(store.stats().unavailable + store.stats().corrupt, 0);
}

/// A store built by `builder` on `server`, its reserves taking the single-command path.
fn claiming(
    runtime: &tokio::runtime::Runtime,
    server: &RedisServer,
    builder: idem_redis::RedisStoreBuilder,
) -> Claiming {
    runtime.block_on(async {
        let store = builder.connect(&server.url()).await.unwrap();
        Claiming::new(store, server.conn().await)
    })
}

#[test]
fn the_single_command_reserve_agrees_with_the_record_machine() {
    let server = RedisServer::start();
    let runtime = runtime();
    let claiming = claiming(&runtime, &server, RedisStore::builder());
    if let Err(failure) = check(&runtime, &claiming, 200) {
        panic!("{failure}");
    }
    let stats = claiming.store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0);
}

/// Without change notices nobody marks a record, so a waiter's claim answers "in flight"
/// itself from a record's bytes.
#[test]
fn the_single_command_reserve_agrees_without_change_notices() {
    let server = RedisServer::start();
    let runtime = runtime();
    let claiming = claiming(&runtime, &server, RedisStore::builder().watch(false));
    if let Err(failure) = check(&runtime, &claiming, 200) {
        panic!("{failure}");
    }
}

#[test]
fn the_checker_catches_a_claim_that_outlives_its_lease() {
    let server = RedisServer::start();
    let runtime = runtime();
    let broken = Claiming {
        outlives_lease: true,
        ..claiming(&runtime, &server, RedisStore::builder())
    };
    let failure = check(&runtime, &broken, 256).expect_err("must be caught");
    assert!(failure.contains("lease"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_without_the_owner_check() {
    let server = RedisServer::start();
    let runtime = runtime();
    let store = runtime
        .block_on(RedisStore::connect(&server.url()))
        .unwrap();
    let failure = check(&runtime, &Unfenced(store), 256).expect_err("must be caught");
    assert!(failure.contains("model"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_without_the_fingerprint_check() {
    let server = RedisServer::start();
    let runtime = runtime();
    let store = runtime
        .block_on(RedisStore::connect(&server.url()))
        .unwrap();
    let failure = check(&runtime, &NoFingerprintCheck(store), 256).expect_err("must be caught");
    assert!(failure.contains("model"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_that_forgets_a_panic() {
    let server = RedisServer::start();
    let runtime = runtime();
    let store = runtime
        .block_on(RedisStore::connect(&server.url()))
        .unwrap();
    let failure = check(&runtime, &PanicAsNotStored(store), 256).expect_err("must be caught");
    assert!(failure.contains("Panicked"), "{failure}");
}
