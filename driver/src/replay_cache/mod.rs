//! The replay cache: completed records this process has seen, kept in memory for less time
//! than the store says they have left, so that a replay or a key reuse of one is answered
//! with no round trip (MODEL.md, "The replay cache").
//!
//! Why it is safe: a completed record is never changed or removed before it expires (`I3`),
//! so the answer to a reserve of it is the same at every instant of its life: its result
//! for the same fingerprint, key reuse for another (`record::reserve_live`, which reads no
//! clock). The cache keeps the record only while it is surely still alive:
//!
//! - a replay from the store says how long the record has left on the store's clock
//!   ([`Reply::Replay::remaining`](idem_core::record::Reply::Replay)); the store read its
//!   clock after the reserve was sent, so the record lives at least that long from the send,
//!   and the cache counts from the send on the caller's clock;
//! - a record this process completed lives its retention from the instant the store applied
//!   the complete, which is after the first complete was sent: the cache counts from that
//!   send;
//! - either way it keeps the record for less: 1% and 5 ms less (rounding to milliseconds,
//!   Redis keys that expire one millisecond early, clocks whose rates differ a little), and
//!   never longer than [`ReplayCacheConfig::max_age`].
//!
//! Only completed records are kept, whatever they hold (a value, "result not stored",
//! "outcome unknown"): each is final until it expires (`I3`), and a replay of it is the
//! store's answer. Pending records, failures and answers the store gave without saying how
//! long the record has left are never kept. Records are keyed by operation (which carries
//! the tenant, if any) and key, exactly as the store files them (`I12`), and a hit compares
//! the fingerprint (`I4`).

mod shard;

use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use idem_core::record::{Reply, StoredResult, replay_life};
use idem_core::{Fingerprint, Key, Operation, Timestamp};
use thiserror::Error;

use crate::metrics::{Counter, Metrics};
use shard::{Entry, Shard};

/// At most this many shards, each behind its own lock.
const MAX_SHARDS: usize = 16;

/// The least share of [`ReplayCacheConfig::max_entries`] a shard is given: a small cache is
/// one shard, so its bounds are not split unevenly by the hashes of its keys.
const MIN_SHARD_ENTRIES: usize = 256;

/// The least share of [`ReplayCacheConfig::max_bytes`] a shard is given.
const MIN_SHARD_BYTES: usize = 64 << 10;

/// The bounds of a coordinator's replay cache
/// ([`Coordinator::with_replay_cache`](crate::Coordinator::with_replay_cache)), validated by
/// [`ReplayCacheBuilder::build`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayCacheConfig {
    max_entries: usize,
    max_bytes: usize,
    max_age: Duration,
    flaw: Option<CacheFlaw>,
}

impl Default for ReplayCacheConfig {
    /// 10,000 records, 16 MiB, one minute.
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_bytes: 16 << 20,
            max_age: Duration::from_secs(60),
            flaw: None,
        }
    }
}

impl ReplayCacheConfig {
    /// A builder starting from the defaults: 10,000 records, 16 MiB, one minute.
    pub fn builder() -> ReplayCacheBuilder {
        ReplayCacheBuilder {
            config: Self::default(),
        }
    }

    /// The most records kept at once.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// The most bytes kept at once, counted as the lengths of the records' operations, keys
    /// and stored values. A record larger than one shard's share is not kept: `max_bytes`
    /// is divided among up to 16 shards, each given at least 256 records and 64 KiB (a
    /// smaller cache is one shard).
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The longest a record is kept, however long the store says it has left: how long a
    /// record deleted from the store by hand, or lost with a store's data, may still be
    /// replayed by this process (see MODEL.md, "The replay cache").
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// DELIBERATELY BROKEN, for the tests that show their checks catch a broken cache: the
    /// cache then keeps records past what the store said, files them by key alone, or
    /// replays whatever fingerprint asks. Never use this.
    #[doc(hidden)]
    #[must_use]
    pub fn with_flaw(mut self, flaw: CacheFlaw) -> Self {
        self.flaw = Some(flaw);
        self
    }
}

/// A deliberately broken replay cache, for tests only ([`ReplayCacheConfig::with_flaw`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheFlaw {
    /// Keeps every record for `max_age`, whatever the store said it had left (`I9`).
    IgnoresRemaining,
    /// Files records by key alone, whatever the operation (`I12`).
    KeyAlone,
    /// Replays a record to any fingerprint (`I4`).
    IgnoresFingerprint,
}

/// Builds a [`ReplayCacheConfig`]; every refusal is a [`ReplayCacheError`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ReplayCacheBuilder {
    config: ReplayCacheConfig,
}

impl ReplayCacheBuilder {
    /// The most records kept at once (at least 1; default 10,000).
    pub fn max_entries(mut self, entries: usize) -> Self {
        self.config.max_entries = entries;
        self
    }

    /// The most bytes kept at once (at least 1; default 16 MiB); see
    /// [`ReplayCacheConfig::max_bytes`].
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.config.max_bytes = bytes;
        self
    }

    /// The longest a record is kept (above zero; default one minute); see
    /// [`ReplayCacheConfig::max_age`].
    pub fn max_age(mut self, age: Duration) -> Self {
        self.config.max_age = age;
        self
    }

    /// The bounds, or the first rule they break.
    pub fn build(self) -> Result<ReplayCacheConfig, ReplayCacheError> {
        let config = self.config;
        if config.max_entries == 0 {
            return Err(ReplayCacheError::NoEntries);
        }
        if config.max_bytes == 0 {
            return Err(ReplayCacheError::NoBytes);
        }
        if config.max_age.is_zero() {
            return Err(ReplayCacheError::NoAge);
        }
        Ok(config)
    }
}

/// Bounds that would make a cache that keeps nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReplayCacheError {
    /// `max_entries` is zero.
    #[error("a replay cache keeps at least one record")]
    NoEntries,
    /// `max_bytes` is zero.
    #[error("a replay cache keeps at least one byte")]
    NoBytes,
    /// `max_age` is zero.
    #[error("a replay cache keeps records for longer than zero")]
    NoAge,
}

/// The cache itself, shared by the clones of one coordinator.
#[derive(Debug)]
pub(crate) struct ReplayCache {
    config: ReplayCacheConfig,
    hasher: RandomState,
    shards: Box<[Mutex<Shard>]>,
}

impl ReplayCache {
    pub(crate) fn new(config: ReplayCacheConfig) -> Self {
        let count = config
            .max_entries
            .checked_div(MIN_SHARD_ENTRIES)
            .unwrap_or(0)
            .min(config.max_bytes / MIN_SHARD_BYTES)
            .clamp(1, MAX_SHARDS);
        let shards = (0..count)
            .map(|_| {
                Mutex::new(Shard::new(
                    config.max_entries / count,
                    config.max_bytes / count,
                ))
            })
            .collect();
        Self {
            config,
            hasher: RandomState::new(),
            shards,
        }
    }

    /// The answer to a reserve of `fingerprint` under `operation` and `key` at `now` (the
    /// caller's clock), if the cache holds the key's completed record: what
    /// `record::reserve_live` answers for it. A reply from the cache does not say how long
    /// the record has left: that is the store's to say.
    pub(crate) fn answer(
        &self,
        operation: &Operation,
        key: &Key,
        fingerprint: Fingerprint,
        now: Timestamp,
        metrics: &Metrics,
    ) -> Option<Reply> {
        let (hash, shard) = self.locate(operation, key);
        let mut shard = self.lock(shard);
        let found = shard.get(hash, self.scope(operation), key, now);
        let reply = match found {
            Ok(entry) => {
                if entry.fingerprint == fingerprint
                    || self.config.flaw == Some(CacheFlaw::IgnoresFingerprint)
                {
                    Some(Reply::Replay {
                        result: entry.result.clone(),
                        remaining: None,
                    })
                } else {
                    // I4: another request's record is refused, never replayed.
                    Some(Reply::KeyReuse {
                        stored: entry.fingerprint,
                    })
                }
            }
            Err(expired) => {
                if expired {
                    metrics.count(Counter::CacheExpired);
                }
                None
            }
        };
        drop(shard);
        metrics.count(if reply.is_some() {
            Counter::CacheHit
        } else {
            Counter::CacheMiss
        });
        reply
    }

    /// Keeps the completed record of `fingerprint` under `operation` and `key`, holding
    /// `result`, known to live at least `remaining` from `from` (the caller's clock), for
    /// less than that.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn keep(
        &self,
        operation: &Operation,
        key: &Key,
        fingerprint: Fingerprint,
        result: StoredResult,
        from: Timestamp,
        remaining: Duration,
        now: Timestamp,
        metrics: &Metrics,
    ) {
        let kept_for = match self.config.flaw {
            Some(CacheFlaw::IgnoresRemaining) => self.config.max_age,
            _ => replay_life(remaining, self.config.max_age),
        };
        let until = from.saturating_add(kept_for);
        if until <= now {
            return;
        }
        let (hash, shard) = self.locate(operation, key);
        let scope = self.scope(operation);
        let entry = Entry {
            hash,
            operation: scope.cloned(),
            key: key.clone(),
            fingerprint,
            bytes: scope.map_or(0, |scope| scope.as_str().len())
                + key.as_str().len()
                + result.value().map_or(0, |body| body.len()),
            result,
            until,
            referenced: false,
        };
        let dropped = self.lock(shard).insert(entry, now);
        for _ in 0..dropped.evicted {
            metrics.count(Counter::CacheEviction);
        }
        for _ in 0..dropped.expired {
            metrics.count(Counter::CacheExpired);
        }
    }

    /// The records kept and their bytes, now.
    pub(crate) fn usage(&self) -> (u64, u64) {
        self.shards.iter().fold((0, 0), |(entries, bytes), shard| {
            let shard = self.lock(shard);
            (entries + shard.len() as u64, bytes + shard.bytes() as u64)
        })
    }

    /// The operation records are filed under: the operation itself, or none in the broken
    /// variant that files by key alone.
    fn scope<'a>(&self, operation: &'a Operation) -> Option<&'a Operation> {
        match self.config.flaw {
            Some(CacheFlaw::KeyAlone) => None,
            _ => Some(operation),
        }
    }

    fn locate(&self, operation: &Operation, key: &Key) -> (u64, &Mutex<Shard>) {
        let hash = self
            .hasher
            .hash_one((self.scope(operation).map(Operation::as_str), key.as_str()));
        let index = usize::try_from(hash % self.shards.len() as u64).unwrap_or(0);
        (hash, &self.shards[index])
    }

    fn lock<'a>(&self, shard: &'a Mutex<Shard>) -> std::sync::MutexGuard<'a, Shard> {
        // A shard's state is whole after every method: a panic elsewhere leaves it usable.
        shard.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
