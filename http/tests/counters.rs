//! The counters an operator scrapes: per-route replays, conflicts, key reuse and waits, and
//! the coordinator's own, through the `metrics` facade into a recorder installed here.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use http::StatusCode;
use idem::InFlightPolicy;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use support::{Fixture, StoreKind, options, order};

/// A recorder that keeps every counter and gauge by its name and labels, e.g.
/// `idem_http_replays_total{route=POST /charges}` (a gauge's value is its `f64`'s bits).
#[derive(Debug, Default)]
struct Counters(Mutex<HashMap<String, Arc<AtomicU64>>>);

fn name(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|label| format!("{}={}", label.key(), label.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Counters {
    /// Every counter and gauge whose name and labels contain `part`, with its value.
    fn matching(&self, part: &str) -> Vec<(String, u64)> {
        let counters = self.0.lock().unwrap();
        counters
            .iter()
            .filter(|(name, _)| name.contains(part))
            .map(|(name, value)| {
                let bits = value.load(Ordering::SeqCst);
                let value = match name.strip_prefix("gauge ") {
                    Some(_) => f64::from_bits(bits) as u64,
                    None => bits,
                };
                (name.clone(), value)
            })
            .collect()
    }

    fn read(&self, counter: &str) -> u64 {
        let counters = self.0.lock().unwrap();
        counters
            .get(counter)
            .map_or(0, |value| value.load(Ordering::SeqCst))
    }
}

#[derive(Debug)]
struct Installed(&'static Counters);

impl Recorder for Installed {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.0.0.lock().unwrap();
        Counter::from_arc(Arc::clone(counters.entry(name(key)).or_default()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut counters = self.0.0.lock().unwrap();
        Gauge::from_arc(Arc::clone(
            counters.entry(format!("gauge {}", name(key))).or_default(),
        ))
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn counters() -> &'static Counters {
    static COUNTERS: OnceLock<&'static Counters> = OnceLock::new();
    COUNTERS.get_or_init(|| {
        let counters: &'static Counters = Box::leak(Box::default());
        metrics::set_global_recorder(Installed(counters)).expect("the only recorder");
        counters
    })
}

const CHARGES: &str = "route=POST /charges";

fn layer_counter(event: &str) -> u64 {
    counters().read(&format!("idem_http_{event}_total{{{CHARGES}}}"))
}

/// What moved in `counters` across `step`.
async fn moved<F: std::future::Future<Output = ()>>(step: F) -> HashMap<&'static str, u64> {
    let events = [
        "executed",
        "replays",
        "waits",
        "conflicts",
        "key_reuse",
        "released",
        "failed_open",
    ];
    let before: Vec<u64> = events.iter().map(|e| layer_counter(e)).collect();
    step.await;
    events
        .iter()
        .zip(before)
        .map(|(event, before)| (*event, layer_counter(event) - before))
        .filter(|(_, delta)| *delta > 0)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counters_move_with_each_decision() {
    let counters = counters();
    let f = Fixture::new(
        StoreKind::Memory,
        Duration::from_millis(300),
        options(),
        |l| l,
    )
    .await;
    let fresh = moved(async { assert_eq!(f.post(Some("\"k\""), &order(1)).await.status, 201) });
    assert_eq!(fresh.await, HashMap::from([("executed", 1)]));
    let replay = moved(async { assert!(f.post(Some("\"k\""), &order(1)).await.replayed()) });
    assert_eq!(replay.await, HashMap::from([("replays", 1)]));
    let reuse = moved(async { assert_eq!(f.post(Some("\"k\""), &order(2)).await.status, 422) });
    assert_eq!(reuse.await, HashMap::from([("key_reuse", 1)]));
    let one = order(1);
    let wait = moved(async {
        let (first, second) = tokio::join!(f.post(Some("\"w\""), &one), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            f.post(Some("\"w\""), &order(1)).await
        });
        assert!(!first.replayed() && second.replayed());
    });
    assert_eq!(
        wait.await,
        HashMap::from([("executed", 1), ("waits", 1), ("replays", 1)])
    );
    f.bank.fail_next(StatusCode::BAD_GATEWAY);
    let released = moved(async { assert_eq!(f.post(Some("\"r\""), &order(1)).await.status, 502) });
    assert_eq!(released.await, HashMap::from([("released", 1)]));

    let raise = options().in_flight(InFlightPolicy::Raise);
    let g = Fixture::new(StoreKind::Memory, Duration::from_millis(300), raise, |l| l).await;
    let conflict = moved(async {
        let (_, second) = tokio::join!(g.post(Some("\"c\""), &one), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            g.post(Some("\"c\""), &order(1)).await
        });
        assert_eq!(second.status, 409);
    });
    assert_eq!(
        conflict.await,
        HashMap::from([("executed", 1), ("conflicts", 1)])
    );

    let open = options().on_store_failure(idem::StoreFailurePolicy::FailOpen);
    let h = Fixture::new(StoreKind::Memory, Duration::ZERO, open, |l| l).await;
    h.store.set_down(true);
    let failed_open =
        moved(async { assert_eq!(h.post(Some("\"o\""), &order(1)).await.status, 201) });
    assert_eq!(failed_open.await, HashMap::from([("failed_open", 1)]));

    // Problems, by type.
    let missing = format!("idem_http_problems_total{{{CHARGES},type=KeyMissing}}");
    let before = counters.read(&missing);
    f.post(None, &order(1)).await;
    assert_eq!(counters.read(&missing), before + 1);

    // The coordinator's own counters, published as absolute values.
    idem_http::metrics::publish_coordinator_metrics(&f.coordinator, "payments");
    let snapshot = f.coordinator.metrics();
    let read = |outcome: &str| {
        counters.read(&format!(
            "idem_calls_total{{coordinator=payments,outcome={outcome}}}"
        ))
    };
    assert_eq!(
        (read("executed"), read("replayed"), read("key_reuse")),
        (2, 2, 1)
    );
    assert_eq!(read("executed"), snapshot.executed);
    assert_eq!(read("action_failed"), 1, "the 502 released its key");
    let spawned = idem_http::metrics::spawn_coordinator_metrics(
        h.coordinator.clone(),
        "open",
        Duration::from_millis(10),
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    spawned.abort();
    assert_eq!(counters.read("idem_failed_open_total{coordinator=open}"), 1);
}

/// Every leaf field of a snapshot's `Debug` form (`executed: 1`, `hits: 20`, ...), so that a
/// counter the driver adds is seen here without this test naming it.
fn snapshot_fields(snapshot: &idem::MetricsSnapshot) -> Vec<(String, u64)> {
    format!("{snapshot:?}")
        .split([',', '{', '}'])
        .filter_map(|part| {
            let (name, value) = part.trim().split_once(": ")?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn every_field_of_the_coordinators_snapshot_is_published() {
    let counters = counters();
    type Field = fn(&mut idem::MetricsSnapshot) -> &mut u64;
    let fields: [Field; 35] = [
        |s| &mut s.executed,
        |s| &mut s.replayed,
        |s| &mut s.in_progress,
        |s| &mut s.key_reuse,
        |s| &mut s.store_unavailable,
        |s| &mut s.action_failed,
        |s| &mut s.panicked,
        |s| &mut s.result_not_stored,
        |s| &mut s.outcome_unknown,
        |s| &mut s.corrupt_record,
        |s| &mut s.decode_failed,
        |s| &mut s.invalid_input,
        |s| &mut s.failed_open,
        |s| &mut s.lease_lost,
        |s| &mut s.abandoned,
        |s| &mut s.left_to_lease,
        |s| &mut s.rolled_back,
        |s| &mut s.commit_unknown,
        |s| &mut s.action_unknown,
        |s| &mut s.overloaded,
        |s| &mut s.shutting_down,
        |s| &mut s.shutdown_cut,
        |s| &mut s.detached_running,
        |s| &mut s.max_detached,
        |s| &mut s.replay_cache.hits,
        |s| &mut s.replay_cache.misses,
        |s| &mut s.replay_cache.evictions,
        |s| &mut s.replay_cache.expired,
        |s| &mut s.replay_cache.entries,
        |s| &mut s.replay_cache.bytes,
        |s| &mut s.store_errors.reserve,
        |s| &mut s.store_errors.complete,
        |s| &mut s.store_errors.renew,
        |s| &mut s.store_errors.release,
        |s| &mut s.store_errors.read,
    ];
    // Each field its own value: 101, 102, ...
    let mut snapshot = idem::MetricsSnapshot::default();
    for (i, field) in (101..).zip(fields) {
        *field(&mut snapshot) = i;
    }
    let leaves = snapshot_fields(&snapshot);
    assert_eq!(
        leaves.len(),
        fields.len(),
        "the snapshot has fields this test does not set: {leaves:?}"
    );
    assert!(leaves.iter().all(|(_, value)| *value > 100), "{leaves:?}");

    idem_http::metrics::publish_snapshot(&snapshot, "every-field");
    let published = counters.matching("coordinator=every-field");
    let mut values: Vec<u64> = published.iter().map(|(_, value)| *value).collect();
    values.sort_unstable();
    let mut expected: Vec<u64> = leaves.iter().map(|(_, value)| *value).collect();
    expected.sort_unstable();
    assert_eq!(
        values, expected,
        "every field published once, and nothing else: {published:?}"
    );
    assert_eq!(
        idem_http::metrics::snapshot_metrics(&snapshot).len(),
        leaves.len()
    );
    // A few by name, as an operator reads them.
    let read = |name: &str| {
        published
            .iter()
            .find(|(published, _)| published == name)
            .map(|(_, value)| *value)
    };
    assert_eq!(
        read("idem_calls_total{coordinator=every-field,outcome=executed}"),
        Some(snapshot.executed)
    );
    assert_eq!(
        read("idem_calls_total{coordinator=every-field,outcome=commit_unknown}"),
        Some(snapshot.commit_unknown)
    );
    assert_eq!(
        read("idem_replay_cache_total{coordinator=every-field,event=hit}"),
        Some(snapshot.replay_cache.hits)
    );
    assert_eq!(
        read("gauge idem_replay_cache_bytes{coordinator=every-field}"),
        Some(snapshot.replay_cache.bytes)
    );
    assert_eq!(
        read("gauge idem_detached_running{coordinator=every-field}"),
        Some(snapshot.detached_running)
    );
}
