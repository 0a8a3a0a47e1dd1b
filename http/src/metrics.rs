//! Counters through the [`metrics`] facade (feature `metrics`), so that whatever exporter
//! the service installs (Prometheus, StatsD, ...) picks them up.
//!
//! The layer counts, per route (label `route`, the method and route template such as
//! `POST /charges`; without axum's `MatchedPath`, the method and `(unmatched)`, never the
//! request's path, so a client cannot make a new series per request):
//!
//! | counter | what |
//! |---|---|
//! | `idem_http_executed_total` | the handler ran under a reservation and its response was recorded |
//! | `idem_http_replays_total` | a stored response was replayed |
//! | `idem_http_waits_total` | the request found an identical one in flight and waited for it (policy `Wait`) |
//! | `idem_http_conflicts_total` | answered 409: an identical request is in progress |
//! | `idem_http_key_reuse_total` | answered 422: the key belongs to another request |
//! | `idem_http_released_total` | the handler's answer was released, not recorded (marked [`Disposition::Release`](crate::Disposition), or 401, 407, 429), or the service was not ready |
//! | `idem_http_outcome_unknown_total` | the handler's answer was recorded as "outcome unknown" (an unmarked 5xx or 408, a service error, a panic) |
//! | `idem_http_failed_open_total` | the handler ran unprotected: the store was unavailable and the policy is fail-open |
//! | `idem_http_lease_lost_total` | the handler ran, but its lease lapsed while it did |
//! | `idem_http_problems_total` | answered with a problem; label `type` is its [`ProblemType`](crate::ProblemType) name |
//!
//! The coordinator's own counters ([`idem::MetricsSnapshot`]) are published by
//! [`publish_coordinator_metrics`] (or every period by [`spawn_coordinator_metrics`]), every
//! one of them, each with the label `coordinator`:
//!
//! | metric | from the snapshot |
//! |---|---|
//! | `idem_calls_total{outcome}` | how each call ended: `executed`, `replayed`, `in_progress`, `key_reuse`, `store_unavailable`, `action_failed`, `action_unknown`, `panicked`, `result_not_stored`, `outcome_unknown`, `corrupt_record`, `decode_failed`, `invalid_input`, `rolled_back`, `commit_unknown`, `overloaded`, `shutting_down` |
//! | `idem_failed_open_total`, `idem_lease_lost_total`, `idem_abandoned_total`, `idem_left_to_lease_total`, `idem_shutdown_cut_total` | executions without the full protection, calls their callers dropped, and actions a stop cut |
//! | `idem_detached_running`, `idem_max_detached` (gauges) | the detached actions running now, and their bound |
//! | `idem_store_errors_total{command}` | store errors by command: `reserve`, `complete`, `renew`, `release`, `read` |
//! | `idem_replay_cache_total{event}` | the replay cache's `hit`, `miss`, `eviction` and `expired` |
//! | `idem_replay_cache_entries`, `idem_replay_cache_bytes` (gauges) | what the replay cache keeps now |
//!
//! [`snapshot_metrics`] lists them for a snapshot, so an exporter that is not the `metrics`
//! facade can publish the same names. [`exported`] lists every metric of both tables, by
//! name, kind and labels, without values: what an operator's dashboards and alerts may
//! query (`METRICS.md`, at the repository's root, says what each one means and what to do
//! when it moves; a test holds that page to this list).
//!
//! A per-route counter appears at its first increment (the layer cannot know the routes
//! before their requests), while every one of the coordinator's metrics is published from
//! zero by the first [`publish_coordinator_metrics`].

use std::time::Duration;

use idem::{Coordinator, MetricsSnapshot};

use crate::telemetry::Event;

/// Whether a [`Metric`] is a counter (a running total) or a gauge (a level now).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// A running total, published as an absolute value.
    Counter,
    /// A level at the moment of the snapshot.
    Gauge,
}

/// One metric of a coordinator's snapshot: its name, its one label besides `coordinator`
/// (if any), and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The metric's name, such as `idem_calls_total`.
    pub name: &'static str,
    /// Its label (name, value), such as `("outcome", "executed")`.
    pub label: Option<(&'static str, &'static str)>,
    /// A counter or a gauge.
    pub kind: MetricKind,
    /// The value.
    pub value: u64,
}

/// A metric this crate can emit, without a value: see [`exported`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The metric's name, such as `idem_http_replays_total`.
    pub name: &'static str,
    /// A counter or a gauge.
    pub kind: MetricKind,
    /// Its label names, such as `["route"]` or `["coordinator", "outcome"]`.
    pub labels: Vec<&'static str>,
    /// The values its last label takes, where this crate names them all (a coordinator's
    /// `outcome`, `command` and `event`, a problem's `type`); empty where the service names
    /// them (`route`, `coordinator`).
    pub values: Vec<&'static str>,
}

/// Every metric this crate can emit, each name once: the layer's per-route counters, then
/// the coordinator's metrics in the order of [`snapshot_metrics`].
pub fn exported() -> Vec<Exported> {
    let mut all: Vec<Exported> = Event::COUNTERS
        .iter()
        .map(|event| Exported {
            name: event.name(),
            kind: MetricKind::Counter,
            labels: event.labels().to_vec(),
            values: match event {
                Event::Problem(_) => crate::ProblemType::ALL.iter().map(|t| t.name()).collect(),
                _ => Vec::new(),
            },
        })
        .collect();
    let coordinator_start = all.len();
    for metric in snapshot_metrics(&MetricsSnapshot::default()) {
        let label = metric.label;
        if let Some(known) = all
            .iter_mut()
            .skip(coordinator_start)
            .find(|known| known.name == metric.name)
        {
            if let Some((_, value)) = label {
                known.values.push(value);
            }
            continue;
        }
        let mut labels = vec!["coordinator"];
        labels.extend(label.map(|(label, _)| label));
        all.push(Exported {
            name: metric.name,
            kind: metric.kind,
            labels,
            values: label.map(|(_, value)| value).into_iter().collect(),
        });
    }
    all
}

/// Every field of `snapshot` as a metric, by the table in the [module docs](self).
pub fn snapshot_metrics(snapshot: &MetricsSnapshot) -> Vec<Metric> {
    let labelled = |name, label, value| (name, Some(label), MetricKind::Counter, value);
    let plain = |name, value| (name, None, MetricKind::Counter, value);
    let calls = |outcome, value| labelled("idem_calls_total", ("outcome", outcome), value);
    let store = snapshot.store_errors;
    let errors = |command, value| labelled("idem_store_errors_total", ("command", command), value);
    let cache = snapshot.replay_cache;
    let cache_event = |event, value| labelled("idem_replay_cache_total", ("event", event), value);
    let gauge = |name, value| (name, None, MetricKind::Gauge, value);
    [
        calls("executed", snapshot.executed),
        calls("replayed", snapshot.replayed),
        calls("in_progress", snapshot.in_progress),
        calls("key_reuse", snapshot.key_reuse),
        calls("store_unavailable", snapshot.store_unavailable),
        calls("action_failed", snapshot.action_failed),
        calls("action_unknown", snapshot.action_unknown),
        calls("panicked", snapshot.panicked),
        calls("result_not_stored", snapshot.result_not_stored),
        calls("outcome_unknown", snapshot.outcome_unknown),
        calls("corrupt_record", snapshot.corrupt_record),
        calls("decode_failed", snapshot.decode_failed),
        calls("invalid_input", snapshot.invalid_input),
        calls("rolled_back", snapshot.rolled_back),
        calls("commit_unknown", snapshot.commit_unknown),
        calls("overloaded", snapshot.overloaded),
        calls("shutting_down", snapshot.shutting_down),
        plain("idem_failed_open_total", snapshot.failed_open),
        plain("idem_lease_lost_total", snapshot.lease_lost),
        plain("idem_abandoned_total", snapshot.abandoned),
        plain("idem_left_to_lease_total", snapshot.left_to_lease),
        plain("idem_shutdown_cut_total", snapshot.shutdown_cut),
        gauge("idem_detached_running", snapshot.detached_running),
        gauge("idem_max_detached", snapshot.max_detached),
        errors("reserve", store.reserve),
        errors("complete", store.complete),
        errors("renew", store.renew),
        errors("release", store.release),
        errors("read", store.read),
        cache_event("hit", cache.hits),
        cache_event("miss", cache.misses),
        cache_event("eviction", cache.evictions),
        cache_event("expired", cache.expired),
        gauge("idem_replay_cache_entries", cache.entries),
        gauge("idem_replay_cache_bytes", cache.bytes),
    ]
    .into_iter()
    .map(|(name, label, kind, value)| Metric {
        name,
        label,
        kind,
        value,
    })
    .collect()
}

/// Publishes the coordinator's counters as they are now (absolute values), labelled
/// `coordinator = name`.
pub fn publish_coordinator_metrics<S>(coordinator: &Coordinator<S>, name: &'static str)
where
    S: idem::Store,
{
    publish_snapshot(&coordinator.metrics(), name);
}

/// Publishes `snapshot`; see [`publish_coordinator_metrics`].
pub fn publish_snapshot(snapshot: &MetricsSnapshot, name: &'static str) {
    for metric in snapshot_metrics(snapshot) {
        match (metric.kind, metric.label) {
            (MetricKind::Counter, Some((label, value))) => {
                metrics::counter!(metric.name, "coordinator" => name, label => value)
                    .absolute(metric.value);
            }
            (MetricKind::Counter, None) => {
                metrics::counter!(metric.name, "coordinator" => name).absolute(metric.value);
            }
            (MetricKind::Gauge, Some((label, value))) => {
                metrics::gauge!(metric.name, "coordinator" => name, label => value)
                    .set(metric.value as f64);
            }
            (MetricKind::Gauge, None) => {
                metrics::gauge!(metric.name, "coordinator" => name).set(metric.value as f64);
            }
        }
    }
}

/// Publishes the coordinator's counters every `period` on a task of the current tokio
/// runtime, until the task is aborted.
pub fn spawn_coordinator_metrics<S>(
    coordinator: Coordinator<S>,
    name: &'static str,
    period: Duration,
) -> tokio::task::JoinHandle<()>
where
    S: idem::Store,
{
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            publish_coordinator_metrics(&coordinator, name);
        }
    })
}
