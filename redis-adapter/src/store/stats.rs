//! What a store counts: [`StoreStats`].

use std::sync::atomic::{AtomicU64, Ordering};

use idem::StoreError;

use super::RedisStore;

/// Counters of what the store has seen since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Commands sent.
    pub commands: u64,
    /// Commands that ended in [`StoreError::Unavailable`] (timeout, I/O error, server
    /// error): their outcome is unknown.
    pub unavailable: u64,
    /// Commands refused because the key holds a value this adapter did not write.
    pub corrupt: u64,
    /// Scripts the server did not hold (`NOSCRIPT`: a restart, `SCRIPT FLUSH`, a new Cluster
    /// node), sent again with `EVAL` and their source.
    pub script_fallbacks: u64,
    /// Change notices received ([`crate::notices`]).
    pub notices: u64,
    /// Reads of a waited-on record made once its key's subscription was live (a waiter
    /// registered after its "in flight" reply, or before a subscription was made).
    pub notice_rechecks: u64,
    /// Times the notices' connection was lost (dropped, a failed `PING` or subscription):
    /// every waiter was woken, and the connection was made again.
    pub notice_connections_lost: u64,
    /// Attempts to connect the notices' connection that failed; meanwhile waiters fall back
    /// to their backoff.
    pub notice_connect_failures: u64,
    /// Subscriptions the server dropped while the store still wanted them (on a Cluster, a
    /// slot moved to another master): the key's waiters were woken and its channel was
    /// subscribed again.
    pub notice_resubscribes: u64,
}

/// The counts behind [`StoreStats`], shared by a store's clones.
#[derive(Default)]
pub(super) struct Counters {
    commands: AtomicU64,
    unavailable: AtomicU64,
    corrupt: AtomicU64,
    pub(super) script_fallbacks: AtomicU64,
}

impl RedisStore {
    /// What the store has counted so far.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        let mut stats = StoreStats {
            commands: c.commands.load(Ordering::Relaxed),
            unavailable: c.unavailable.load(Ordering::Relaxed),
            corrupt: c.corrupt.load(Ordering::Relaxed),
            script_fallbacks: c.script_fallbacks.load(Ordering::Relaxed),
            ..StoreStats::default()
        };
        if let Some(notices) = &self.inner.notices {
            let n = notices.counters();
            stats.notices = n.received.load(Ordering::Relaxed);
            stats.notice_rechecks = n.rechecks.load(Ordering::Relaxed);
            stats.notice_connections_lost = n.connections_lost.load(Ordering::Relaxed);
            stats.notice_connect_failures = n.connect_failures.load(Ordering::Relaxed);
            stats.notice_resubscribes = n.resubscribes.load(Ordering::Relaxed);
        }
        stats
    }

    /// Counts one request and how it ended.
    pub(super) fn count<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let counters = &self.inner.counters;
        counters.commands.fetch_add(1, Ordering::Relaxed);
        match &result {
            Err(StoreError::Corrupt { .. }) => {
                counters.corrupt.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                counters.unavailable.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
        }
        result
    }
}
