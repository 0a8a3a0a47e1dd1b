//! Counters through the [`metrics`] facade (feature `metrics`), so that whatever exporter
//! the service installs (Prometheus, StatsD, ...) picks them up.
//!
//! The layer counts, per route (label `route`, the method and route template such as
//! `POST /charges`; without axum's `MatchedPath`, the request path: name the operation or
//! keep such a layer off routes with identifiers in their paths, to bound the labels):
//!
//! | counter | what |
//! |---|---|
//! | `idem_http_executed_total` | the handler ran under a reservation and its response was recorded |
//! | `idem_http_replays_total` | a stored response was replayed |
//! | `idem_http_waits_total` | the request found an identical one in flight and waited for it (policy `Wait`) |
//! | `idem_http_conflicts_total` | answered 409: an identical request is in progress |
//! | `idem_http_key_reuse_total` | answered 422: the key belongs to another request |
//! | `idem_http_released_total` | the handler's answer was released, not recorded (5xx by default), or the service failed |
//! | `idem_http_failed_open_total` | the handler ran unprotected: the store was unavailable and the policy is fail-open |
//! | `idem_http_lease_lost_total` | the handler ran, but its lease lapsed while it did |
//! | `idem_http_problems_total` | answered with a problem; label `type` is its [`ProblemType`](crate::ProblemType) name |
//!
//! The coordinator's own counters ([`idem::MetricsSnapshot`]) are published by
//! [`publish_coordinator_metrics`] (or every period by [`spawn_coordinator_metrics`]) as
//! `idem_calls_total{outcome}`, `idem_failed_open_total`, `idem_lease_lost_total`,
//! `idem_abandoned_total`, `idem_left_to_lease_total` and `idem_store_errors_total{command}`,
//! each with the label `coordinator`.

use std::time::Duration;

use idem::{Coordinator, MetricsSnapshot};

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
    let outcomes = [
        ("executed", snapshot.executed),
        ("replayed", snapshot.replayed),
        ("in_progress", snapshot.in_progress),
        ("key_reuse", snapshot.key_reuse),
        ("store_unavailable", snapshot.store_unavailable),
        ("action_failed", snapshot.action_failed),
        ("panicked", snapshot.panicked),
        ("result_not_stored", snapshot.result_not_stored),
        ("outcome_unknown", snapshot.outcome_unknown),
        ("corrupt_record", snapshot.corrupt_record),
        ("decode_failed", snapshot.decode_failed),
        ("invalid_input", snapshot.invalid_input),
    ];
    for (outcome, value) in outcomes {
        metrics::counter!("idem_calls_total", "coordinator" => name, "outcome" => outcome)
            .absolute(value);
    }
    metrics::counter!("idem_failed_open_total", "coordinator" => name)
        .absolute(snapshot.failed_open);
    metrics::counter!("idem_lease_lost_total", "coordinator" => name).absolute(snapshot.lease_lost);
    metrics::counter!("idem_abandoned_total", "coordinator" => name).absolute(snapshot.abandoned);
    metrics::counter!("idem_left_to_lease_total", "coordinator" => name)
        .absolute(snapshot.left_to_lease);
    let errors = snapshot.store_errors;
    for (command, value) in [
        ("reserve", errors.reserve),
        ("complete", errors.complete),
        ("renew", errors.renew),
        ("release", errors.release),
        ("read", errors.read),
    ] {
        metrics::counter!("idem_store_errors_total", "coordinator" => name, "command" => command)
            .absolute(value);
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
