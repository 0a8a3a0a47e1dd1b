//! Differential test on standalone Redis: random command sequences, with time moving,
//! applied to the core's record machine and to Redis through the adapter; every reply must
//! agree, step for step. The checker is the conformance kit's differential check
//! (`idem_conformance`); the Redis subjects it runs on, the scripts alone and the fast paths,
//! are in `support/differential.rs`.
//!
//! The checker is shown to catch bugs: the deliberately broken stores of `idem_check`'s
//! catalogue that can be played in front of the real store (each owner check forgotten, the
//! fingerprint check forgotten, a panic recorded as a result not stored), a fast reserve whose
//! key outlives its lease, and a fenced store that hands a takeover the first holder's fence,
//! played in front of the real store by the kit (`idem_conformance::broken::InFront`), must
//! each be caught.

mod support;

use idem_check::Variant;
use idem_conformance::broken::{Bug, InFront};
use idem_redis::RedisStore;
use support::RedisServer;
use support::broken::TimedInFront;
use support::differential::{FastPaths, ThroughScripts, assert_grants_are_fenced, check};

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
    let subject = ThroughScripts(
        runtime
            .block_on(RedisStore::connect(&server.url()))
            .unwrap(),
    );
    if let Err(failure) = check(&runtime, &subject, 200) {
        panic!("{failure}");
    }
    let stats = subject.0.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0);
    assert!(stats.commands > 500, "{stats:?}");
}

#[test]
fn redis_with_fences_agrees_with_the_record_machine() {
    // Every grant fenced (F1): the reserve script grants under the server's clock in
    // microseconds, renewals and repeated reserves answer the holder's, and every grant of a
    // key is above the ones before.
    let server = RedisServer::start();
    let runtime = runtime();
    let subject = ThroughScripts(
        runtime
            .block_on(RedisStore::builder().fences(true).connect(&server.url()))
            .unwrap(),
    );
    if let Err(failure) = check(&runtime, &subject, 200) {
        panic!("{failure}");
    }
    let stats = subject.0.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0);
    assert_grants_are_fenced(&runtime, &subject.0);
    // The same with the fast paths in front: the fenced fast reserve, which grants under the
    // server's clock in one `SET … NX … GET` (with the `PTTL` of a record it finds, when
    // asked), and the fast complete, which completes a fenced reservation too.
    for builder in [
        RedisStore::builder().fences(true),
        RedisStore::builder().fences(true).replay_time_left(true),
    ] {
        let fast = fast_paths(&runtime, &server, builder);
        if let Err(failure) = check(&runtime, &fast, 100) {
            panic!("{failure}");
        }
        let stats = fast.store.stats();
        assert_eq!(stats.unavailable + stats.corrupt, 0);
        assert_grants_are_fenced(&runtime, &fast.store);
    }
}

/// A store built by `builder` on `server`, its reserves and completes taking the fast paths.
fn fast_paths(
    runtime: &tokio::runtime::Runtime,
    server: &RedisServer,
    builder: idem_redis::RedisStoreBuilder,
) -> FastPaths {
    runtime.block_on(async {
        let store = builder.connect(&server.url()).await.unwrap();
        FastPaths::new(store, server.conn().await)
    })
}

#[test]
fn the_fast_paths_agree_with_the_record_machine() {
    let server = RedisServer::start();
    let runtime = runtime();
    let fast_paths = fast_paths(&runtime, &server, RedisStore::builder());
    if let Err(failure) = check(&runtime, &fast_paths, 200) {
        panic!("{failure}");
    }
    let stats = fast_paths.store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0);
}

/// With `replay_time_left`, a replay from the fast reserve says how long its record has left,
/// which must be the model's to the millisecond at some instant of the command's window.
#[test]
fn the_fast_paths_agree_with_replay_time_left() {
    let server = RedisServer::start();
    let runtime = runtime();
    let fast_paths = fast_paths(
        &runtime,
        &server,
        RedisStore::builder().replay_time_left(true),
    );
    if let Err(failure) = check(&runtime, &fast_paths, 200) {
        panic!("{failure}");
    }
}

/// Without change notices nobody marks a record, so every complete by its owner takes the
/// fast complete.
#[test]
fn the_fast_paths_agree_without_change_notices() {
    let server = RedisServer::start();
    let runtime = runtime();
    let fast_paths = fast_paths(&runtime, &server, RedisStore::builder().watch(false));
    if let Err(failure) = check(&runtime, &fast_paths, 200) {
        panic!("{failure}");
    }
}

#[test]
fn the_checker_catches_a_fast_reserve_that_outlives_its_lease() {
    let server = RedisServer::start();
    let runtime = runtime();
    let broken = FastPaths {
        outlives_lease: true,
        ..fast_paths(&runtime, &server, RedisStore::builder())
    };
    let failure = check(&runtime, &broken, 256).expect_err("must be caught");
    assert!(failure.contains("lease or retention ends"), "{failure}");
}

/// `variant` played in front of a fresh server's store must be caught; returns what the
/// checker said.
fn caught(variant: Variant) -> String {
    let server = RedisServer::start();
    let runtime = runtime();
    let store = runtime
        .block_on(RedisStore::connect(&server.url()))
        .unwrap();
    let broken = TimedInFront { variant, store };
    check(&runtime, &broken, 256).expect_err(&format!("{} must be caught", variant.name()))
}

#[test]
fn the_checker_catches_a_complete_without_the_owner_check() {
    let failure = caught(Variant::CompleteWithoutOwnerCheck);
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_release_without_the_owner_check() {
    let failure = caught(Variant::ReleaseWithoutOwnerCheck);
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_renew_without_the_owner_check() {
    let failure = caught(Variant::RenewWithoutOwnerCheck);
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_without_the_fingerprint_check() {
    let failure = caught(Variant::KeyOnlyLookup);
    assert!(failure.contains("record machine"), "{failure}");
}

#[test]
fn the_checker_catches_a_store_that_forgets_a_panic() {
    let failure = caught(Variant::PanicAsNotStored);
    assert!(failure.contains("record machine"), "{failure}");
    assert!(failure.contains("Panicked"), "{failure}");
}

#[test]
fn the_checker_catches_a_takeover_under_the_first_holders_fence() {
    let server = RedisServer::start();
    let runtime = runtime();
    let store = InFront::new(
        ThroughScripts(
            runtime
                .block_on(RedisStore::builder().fences(true).connect(&server.url()))
                .unwrap(),
        ),
        Bug::FirstFenceForever,
    );
    let failure = check(&runtime, &store, 256).expect_err("must be caught");
    assert!(failure.contains("F1"), "{failure}");
}
