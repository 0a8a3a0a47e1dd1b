//! Counters of the coordinator's decisions, readable as a snapshot.
//!
//! Every call ends in exactly one of executed, replayed, in progress, key reuse, store
//! unavailable, action failed, panicked, action unknown, result not stored, outcome unknown, corrupt record,
//! decode failure or invalid input, or it is abandoned by its caller (attached calls only).
//! Failed open, lease lost and left to lease count executions that ran without the full
//! protection (`I7`'s named causes). Store errors are counted per command, including those
//! a retry recovered and those the attempt gave up at its reply deadline. The replay cache,
//! when on, counts its hits, misses, evictions and expiries beside them.

use std::sync::atomic::{AtomicU64, Ordering};

use idem_core::record::CommandKind;

/// Live counters shared by the clones of one coordinator.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    counters: [AtomicU64; Counter::COUNT],
    store_errors: [AtomicU64; CommandKind::ALL.len()],
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
    Panicked,
    ResultNotStored,
    OutcomeUnknown,
    CorruptRecord,
    DecodeFailed,
    InvalidInput,
    FailedOpen,
    LeaseLost,
    Abandoned,
    LeftToLease,
    RolledBack,
    CommitUnknown,
    ActionUnknown,
    Overloaded,
    ShuttingDown,
    ShutdownCut,
    CacheHit,
    CacheMiss,
    CacheEviction,
    CacheExpired,
}

impl Counter {
    const COUNT: usize = Counter::CacheExpired as usize + 1;
}

impl Metrics {
    pub(crate) fn count(&self, counter: Counter) {
        self.counters[counter as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failure of a `command`, whatever its cause.
    pub(crate) fn store_error(&self, command: CommandKind) {
        self.store_errors[command as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        let read = |counter: Counter| self.counters[counter as usize].load(Ordering::Relaxed);
        let errors = |kind: CommandKind| self.store_errors[kind as usize].load(Ordering::Relaxed);
        MetricsSnapshot {
            executed: read(Counter::Executed),
            replayed: read(Counter::Replayed),
            in_progress: read(Counter::InProgress),
            key_reuse: read(Counter::KeyReuse),
            store_unavailable: read(Counter::StoreUnavailable),
            action_failed: read(Counter::ActionFailed),
            panicked: read(Counter::Panicked),
            result_not_stored: read(Counter::ResultNotStored),
            outcome_unknown: read(Counter::OutcomeUnknown),
            corrupt_record: read(Counter::CorruptRecord),
            decode_failed: read(Counter::DecodeFailed),
            invalid_input: read(Counter::InvalidInput),
            failed_open: read(Counter::FailedOpen),
            lease_lost: read(Counter::LeaseLost),
            abandoned: read(Counter::Abandoned),
            left_to_lease: read(Counter::LeftToLease),
            rolled_back: read(Counter::RolledBack),
            commit_unknown: read(Counter::CommitUnknown),
            action_unknown: read(Counter::ActionUnknown),
            overloaded: read(Counter::Overloaded),
            shutting_down: read(Counter::ShuttingDown),
            shutdown_cut: read(Counter::ShutdownCut),
            detached_running: 0,
            max_detached: 0,
            replay_cache: ReplayCacheStats {
                hits: read(Counter::CacheHit),
                misses: read(Counter::CacheMiss),
                evictions: read(Counter::CacheEviction),
                expired: read(Counter::CacheExpired),
                entries: 0,
                bytes: 0,
            },
            store_errors: StoreErrors {
                reserve: errors(CommandKind::Reserve),
                complete: errors(CommandKind::Complete),
                renew: errors(CommandKind::Renew),
                release: errors(CommandKind::Release),
                read: errors(CommandKind::Read),
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
    /// Calls whose action failed (the reservation was released).
    pub action_failed: u64,
    /// Calls whose action panicked: the record says "outcome unknown" and the panic
    /// resumed in the caller.
    pub panicked: u64,
    /// Calls answered `ResultNotStored`.
    pub result_not_stored: u64,
    /// Calls answered `OutcomeUnknown` (an identical request's action had panicked).
    pub outcome_unknown: u64,
    /// Calls that met a value under their key that is not a record.
    pub corrupt_record: u64,
    /// Calls whose stored result did not decode.
    pub decode_failed: u64,
    /// Calls refused for an invalid key or operation.
    pub invalid_input: u64,
    /// Executions that ran unprotected because the store failed open.
    pub failed_open: u64,
    /// Executions whose lease lapsed while the action ran.
    pub lease_lost: u64,
    /// Attached calls dropped by their caller before they ended.
    pub abandoned: u64,
    /// Abandoned calls whose action was dropped while it ran: the key stays held until its
    /// lease ends, and a request after that may run the action again (`I7`'s "abandoned
    /// mid-action").
    pub left_to_lease: u64,
    /// Transactional calls whose writes were rolled back with their record.
    pub rolled_back: u64,
    /// Transactional calls whose commit's outcome could not be learned.
    pub commit_unknown: u64,
    /// Calls whose action ended [`Ending::Unknown`](crate::Ending::Unknown) outside a
    /// transaction: failed with its effect unknown, so the record says "outcome unknown"
    /// (as for a panic) and the caller got [`Error::ActionUnknown`](crate::Error::ActionUnknown).
    pub action_unknown: u64,
    /// Calls answered [`Error::Overloaded`](crate::Error::Overloaded): their action would
    /// have been one detached action over the coordinator's bound; nothing ran.
    pub overloaded: u64,
    /// Calls answered [`Error::ShuttingDown`](crate::Error::ShuttingDown) during a stop;
    /// nothing ran.
    pub shutting_down: u64,
    /// Detached actions cut at a stop's deadline: each key is left to its lease (as
    /// `left_to_lease` is), and a request after it may run the action again (`I7`).
    pub shutdown_cut: u64,
    /// A gauge, not a counter: the detached actions running now.
    pub detached_running: u64,
    /// The bound on [`detached_running`](Self::detached_running)
    /// ([`Coordinator::with_max_detached`](crate::Coordinator::with_max_detached)).
    pub max_detached: u64,
    /// The replay cache's counters (all zero while it is off).
    pub replay_cache: ReplayCacheStats,
    /// Store errors by command, including those a retry recovered.
    pub store_errors: StoreErrors,
}

/// What the replay cache did
/// ([`Coordinator::with_replay_cache`](crate::Coordinator::with_replay_cache)). A hit is
/// also counted as the call's end (`replayed`, `key_reuse`, ...), as a replay through the
/// store would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ReplayCacheStats {
    /// Reserves answered from the cache, with no round trip.
    pub hits: u64,
    /// Reserves the cache could not answer, sent to the store.
    pub misses: u64,
    /// Live records dropped to stay within the bounds.
    pub evictions: u64,
    /// Records dropped because their time in the cache had passed.
    pub expired: u64,
    /// Records kept now.
    pub entries: u64,
    /// Bytes kept now (operations, keys and stored values).
    pub bytes: u64,
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
