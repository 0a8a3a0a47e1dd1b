//! The cache's own rules, without a store: what it answers, how long it keeps a record, and
//! its bounds.

use std::time::Duration;

use idem_core::record::{Record, StoredResult, replay_life, reserve_live};
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken, Timestamp};

use super::*;

fn op(name: &str) -> Operation {
    Operation::new(name).unwrap()
}

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::from_bytes([n; 32])
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn value(text: &str) -> StoredResult {
    StoredResult::Value(Body::new(text))
}

fn cache(entries: usize, bytes: usize) -> ReplayCache {
    let config = ReplayCacheConfig::builder()
        .max_entries(entries)
        .max_bytes(bytes)
        .max_age(Duration::from_secs(3600))
        .build()
        .unwrap();
    ReplayCache::new(config)
}

#[test]
fn a_hit_answers_as_the_record_machine_does_for_a_completed_record() {
    let metrics = Metrics::default();
    let results = [
        value("ch_1"),
        StoredResult::NotStored,
        StoredResult::Panicked,
    ];
    for (n, result) in results.into_iter().enumerate() {
        let cache = cache(16, 1 << 16);
        let k = key(&format!("k{n}"));
        let from = at(0);
        let left = Duration::from_secs(60);
        cache.keep(
            &op("pay"),
            &k,
            fp(1),
            result.clone(),
            from,
            left,
            at(0),
            &metrics,
        );
        let record = Record::Completed {
            owner: OwnerToken::from_u128(1),
            fingerprint: fp(1),
            result,
            expires_at: at(60_000),
        };
        for asking in [fp(1), fp(2)] {
            let got = cache.answer(&op("pay"), &k, asking, at(10), &metrics);
            let expected = reserve_live(record.live(), OwnerToken::from_u128(2), asking);
            assert_eq!(
                got,
                Some(expected.reply_without_clock()),
                "asked with {asking:?}"
            );
        }
    }
}

#[test]
fn a_record_is_kept_for_less_than_the_store_said_and_at_most_its_max_age() {
    let left = Duration::from_secs(10);
    let kept = replay_life(left, Duration::from_secs(3600));
    assert!(kept < left, "{kept:?}");
    assert_eq!(kept, Duration::from_millis(10_000 - 100 - 5));
    assert_eq!(
        replay_life(left, Duration::from_secs(2)),
        Duration::from_secs(2)
    );
    assert_eq!(
        replay_life(Duration::from_millis(4), Duration::MAX),
        Duration::ZERO
    );

    let metrics = Metrics::default();
    let cache = cache(16, 1 << 16);
    cache.keep(
        &op("pay"),
        &key("k"),
        fp(1),
        value("v"),
        at(1_000),
        left,
        at(1_050),
        &metrics,
    );
    let until = 1_000 + 10_000 - 100 - 5;
    assert!(
        cache
            .answer(&op("pay"), &key("k"), fp(1), at(until - 1), &metrics)
            .is_some()
    );
    assert_eq!(
        cache.answer(&op("pay"), &key("k"), fp(1), at(until), &metrics),
        None
    );
    assert_eq!(cache.usage(), (0, 0), "the expired record is dropped");
    let stats = metrics.snapshot().replay_cache;
    assert_eq!((stats.hits, stats.misses, stats.expired), (1, 1, 1));
}

#[test]
fn a_record_with_no_time_left_is_not_kept() {
    let metrics = Metrics::default();
    let cache = cache(16, 1 << 16);
    let left = Duration::from_millis(500);
    cache.keep(
        &op("pay"),
        &key("k"),
        fp(1),
        value("v"),
        at(0),
        left,
        at(600),
        &metrics,
    );
    assert_eq!(cache.usage(), (0, 0));
}

#[test]
fn operations_and_keys_never_meet() {
    let metrics = Metrics::default();
    let cache = cache(16, 1 << 16);
    let left = Duration::from_secs(60);
    cache.keep(
        &op("pay"),
        &key("k"),
        fp(1),
        value("a"),
        at(0),
        left,
        at(0),
        &metrics,
    );
    let tenant = op("pay").for_tenant("alice").unwrap();
    for (operation, k) in [
        (op("refund"), key("k")),
        (tenant, key("k")),
        (op("pay"), key("K")),
    ] {
        assert_eq!(cache.answer(&operation, &k, fp(1), at(1), &metrics), None);
    }
}

#[test]
fn the_bounds_hold_by_count_and_by_bytes() {
    let metrics = Metrics::default();
    let left = Duration::from_secs(60);
    let by_count = cache(3, 1 << 20);
    for n in 0..50 {
        let k = key(&format!("k{n}"));
        by_count.keep(
            &op("pay"),
            &k,
            fp(1),
            value("v"),
            at(0),
            left,
            at(0),
            &metrics,
        );
        assert!(by_count.usage().0 <= 3);
    }
    assert_eq!(by_count.usage().0, 3);
    assert_eq!(metrics.snapshot().replay_cache.evictions, 47);

    let by_bytes = cache(1_000, 1_000);
    let body = "x".repeat(100);
    for n in 0..50 {
        let k = key(&format!("k{n:02}"));
        by_bytes.keep(
            &op("pay"),
            &k,
            fp(1),
            value(&body),
            at(0),
            left,
            at(0),
            &metrics,
        );
        assert!(by_bytes.usage().1 <= 1_000, "{:?}", by_bytes.usage());
    }
    // Each record counts 3 + 3 + 100 bytes: nine fit in 1,000.
    assert_eq!(by_bytes.usage(), (9, 9 * 106));
    // A record larger than the bound is never kept.
    let huge = "x".repeat(2_000);
    by_bytes.keep(
        &op("pay"),
        &key("big"),
        fp(1),
        value(&huge),
        at(0),
        left,
        at(0),
        &metrics,
    );
    assert_eq!(
        by_bytes.answer(&op("pay"), &key("big"), fp(1), at(1), &metrics),
        None
    );
}

#[test]
fn a_record_hit_since_the_hand_passed_gets_a_second_chance() {
    let metrics = Metrics::default();
    let left = Duration::from_secs(60);
    let cache = cache(2, 1 << 20);
    let pay = op("pay");
    cache.keep(
        &pay,
        &key("a"),
        fp(1),
        value("a"),
        at(0),
        left,
        at(0),
        &metrics,
    );
    cache.keep(
        &pay,
        &key("b"),
        fp(1),
        value("b"),
        at(0),
        left,
        at(0),
        &metrics,
    );
    assert!(
        cache
            .answer(&pay, &key("a"), fp(1), at(1), &metrics)
            .is_some()
    );
    cache.keep(
        &pay,
        &key("c"),
        fp(1),
        value("c"),
        at(2),
        left,
        at(2),
        &metrics,
    );
    assert!(
        cache
            .answer(&pay, &key("a"), fp(1), at(3), &metrics)
            .is_some(),
        "a was used"
    );
    assert_eq!(
        cache.answer(&pay, &key("b"), fp(1), at(3), &metrics),
        None,
        "b was not"
    );
    assert!(
        cache
            .answer(&pay, &key("c"), fp(1), at(3), &metrics)
            .is_some()
    );
}

#[test]
fn bounds_that_keep_nothing_are_refused() {
    let build = |entries, bytes, age| {
        ReplayCacheConfig::builder()
            .max_entries(entries)
            .max_bytes(bytes)
            .max_age(age)
            .build()
    };
    let second = Duration::from_secs(1);
    assert_eq!(build(0, 1, second), Err(ReplayCacheError::NoEntries));
    assert_eq!(build(1, 0, second), Err(ReplayCacheError::NoBytes));
    assert_eq!(build(1, 1, Duration::ZERO), Err(ReplayCacheError::NoAge));
    assert!(build(1, 1, second).is_ok());
}
