//! Counters of the coordinator's decisions, readable as a snapshot.
//!
//! Every call ends in exactly one of executed, replayed, in progress, key reuse, store
//! unavailable, action failed, result not stored, decode failure or invalid input; failed
//! open and lease lost count executions that ran without the full protection (`I7`'s two
//! exceptions). Store errors are counted per command, including those a retry recovered.

use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(doc)]
use idem_core::record::Command;

/// Live counters shared by the clones of one coordinator.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    executed: AtomicU64,
    replayed: AtomicU64,
    in_progress: AtomicU64,
    key_reuse: AtomicU64,
    store_unavailable: AtomicU64,
    action_failed: AtomicU64,
    result_not_stored: AtomicU64,
    decode_failed: AtomicU64,
    invalid_input: AtomicU64,
    failed_open: AtomicU64,
    lease_lost: AtomicU64,
    store_errors: [AtomicU64; 5],
}

/// Which counter a decision adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    Executed,
    Replayed,
    InProgress,
    KeyReuse,
    StoreUnavailable,
    ActionFailed,
    ResultNotStored,
    DecodeFailed,
    InvalidInput,
    FailedOpen,
    LeaseLost,
}

impl Metrics {
    pub(crate) fn count(&self, counter: Counter) {
        let cell = match counter {
            Counter::Executed => &self.executed,
            Counter::Replayed => &self.replayed,
            Counter::InProgress => &self.in_progress,
            Counter::KeyReuse => &self.key_reuse,
            Counter::StoreUnavailable => &self.store_unavailable,
            Counter::ActionFailed => &self.action_failed,
            Counter::ResultNotStored => &self.result_not_stored,
            Counter::DecodeFailed => &self.decode_failed,
            Counter::InvalidInput => &self.invalid_input,
            Counter::FailedOpen => &self.failed_open,
            Counter::LeaseLost => &self.lease_lost,
        };
        cell.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failure of the command named `command` ([`Command::name`]).
    pub(crate) fn store_error(&self, command: &'static str) {
        let index = match command {
            "reserve" => 0,
            "complete" => 1,
            "renew" => 2,
            "release" => 3,
            _ => 4,
        };
        self.store_errors[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let read = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        let errors = |index: usize| read(&self.store_errors[index]);
        MetricsSnapshot {
            executed: read(&self.executed),
            replayed: read(&self.replayed),
            in_progress: read(&self.in_progress),
            key_reuse: read(&self.key_reuse),
            store_unavailable: read(&self.store_unavailable),
            action_failed: read(&self.action_failed),
            result_not_stored: read(&self.result_not_stored),
            decode_failed: read(&self.decode_failed),
            invalid_input: read(&self.invalid_input),
            failed_open: read(&self.failed_open),
            lease_lost: read(&self.lease_lost),
            store_errors: StoreErrors {
                reserve: errors(0),
                complete: errors(1),
                renew: errors(2),
                release: errors(3),
                read: errors(4),
            },
        }
    }
}

/// The counters at one moment; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Calls whose action ran in this call and succeeded (including failed-open ones).
    pub executed: u64,
    /// Calls answered with a stored result.
    pub replayed: u64,
    /// Calls answered `InProgress`.
    pub in_progress: u64,
    /// Calls answered `KeyReuse`.
    pub key_reuse: u64,
    /// Calls answered `StoreUnavailable` (policy `FailClosed`).
    pub store_unavailable: u64,
    /// Calls whose action failed or panicked (the reservation was released).
    pub action_failed: u64,
    /// Calls answered `ResultNotStored`.
    pub result_not_stored: u64,
    /// Calls whose stored result did not decode.
    pub decode_failed: u64,
    /// Calls refused for an invalid key or operation.
    pub invalid_input: u64,
    /// Executions that ran unprotected because the store failed open.
    pub failed_open: u64,
    /// Executions whose lease lapsed while the action ran.
    pub lease_lost: u64,
    /// Store errors by command, including those a retry recovered.
    pub store_errors: StoreErrors,
}

/// Store errors counted per command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StoreErrors {
    /// Failed reserves.
    pub reserve: u64,
    /// Failed completes.
    pub complete: u64,
    /// Failed renewals.
    pub renew: u64,
    /// Failed releases.
    pub release: u64,
    /// Failed reads.
    pub read: u64,
}

impl StoreErrors {
    /// All store errors.
    pub fn total(&self) -> u64 {
        self.reserve + self.complete + self.renew + self.release + self.read
    }
}
