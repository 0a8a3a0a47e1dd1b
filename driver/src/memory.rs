//! `MemoryStore`: the embedded store, the record machine in a sharded in-process map.
//!
//! Each command locks one shard, runs [`idem_core::record::apply`] on the key's record at the
//! store's own clock, applies the write and unlocks; no lock is ever held across an
//! `.await`. Keys spread over many shards, so unrelated keys do not contend on one lock.
//!
//! Memory stays bounded: a command that meets an expired record deletes it (`I9`), and each
//! shard sweeps out every expired record once the writes since its last sweep reach half
//! its size (at least [`SWEEP_MIN_WRITES`]), an amortised constant cost per write. A shard
//! then holds at most twice the records that were live at its last sweep, plus
//! [`SWEEP_MIN_WRITES`].
//!
//! Every grant carries a fence (MODEL.md `F1`): each shard counts its fences from the system
//! clock in microseconds ([`FenceCounter`]), so a key's fences rise with every grant,
//! across releases and expiries, and keep rising across a restart of the process as long as
//! the system clock did not step back past them.
//!
//! Waiters are woken, not polled: [`Store::changed`] registers a watch on a pending key
//! while holding the shard lock, and the command that completes or releases the key drops
//! the watch's sender under the same lock, which wakes every receiver.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use idem_core::record::{self, Command, Record, Reply, Write};
use idem_core::{FenceCounter, Key, Operation, Timestamp};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::clock::millis;
use crate::store::{Store, StoreError};

/// A shard sweeps its expired records once this many writes, or half its size if that is
/// more, have happened since its last sweep.
pub const SWEEP_MIN_WRITES: usize = 1024;

/// The embedded [`Store`]: records in memory, expiry by the store's own monotonic clock.
///
/// The clock is [`tokio::time::Instant`] counted from the store's creation, so tests with
/// paused time move it with `tokio::time::advance`. Records live as long as the store: a
/// process restart forgets every reservation and result (MODEL.md, "Non-guarantees").
#[derive(Debug)]
pub struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    epoch: Instant,
}

/// Records of one operation, then one key: looked up by reference, no allocation.
type Keyed<V> = HashMap<Operation, HashMap<Key, V>>;

#[derive(Debug, Default)]
struct Shard {
    records: Keyed<Record>,
    /// Watches of pending keys that a waiter is waiting on; dropping a sender wakes them.
    watchers: Keyed<watch::Sender<()>>,
    len: usize,
    writes_since_sweep: usize,
    /// The shard's fences (`F1`): every key of the shard is fenced above the last granted.
    fences: FenceCounter,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store with four shards per available core (at least 16), a power of two.
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, usize::from);
        Self::with_shards((cores * 4).max(16))
    }

    /// A store with `shards` shards (at least one; rounded up to a power of two).
    pub fn with_shards(shards: usize) -> Self {
        let count = shards.max(1).next_power_of_two();
        Self {
            shards: (0..count).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            epoch: Instant::now(),
        }
    }

    /// The number of records held, counting expired ones not yet purged.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len).sum()
    }

    /// Whether the store holds no record at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Purges every expired record now, in every shard; returns how many were removed.
    pub fn purge_expired(&self) -> usize {
        let now = self.now();
        self.shards.iter().map(|shard| lock(shard).sweep(now)).sum()
    }

    /// The store's clock: milliseconds since the store was created.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_millis(millis(self.epoch.elapsed()))
    }

    fn shard(&self, operation: &Operation, key: &Key) -> MutexGuard<'_, Shard> {
        let hash = self.hasher.hash_one((operation, key));
        // The shard count is a power of two, so the mask keeps the index in range.
        let index = (hash as usize) & (self.shards.len() - 1);
        lock(&self.shards[index])
    }
}

impl Store for MemoryStore {
    fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send {
        let now = self.now();
        let reply = self
            .shard(operation, key)
            .apply(operation, key, command, now);
        std::future::ready(Ok(reply))
    }

    fn changed(&self, operation: &Operation, key: &Key) -> impl Future<Output = ()> + Send {
        let watch = self.shard(operation, key).watch(operation, key, self.now());
        let epoch = self.epoch;
        async move {
            if let Some((mut receiver, lease_until)) = watch {
                let lease_end = epoch + Duration::from_millis(lease_until.as_millis());
                tokio::select! {
                    // Err means the sender was dropped: the key was completed or released.
                    _ = receiver.changed() => {}
                    () = tokio::time::sleep_until(lease_end) => {}
                }
            }
        }
    }
}

impl Shard {
    fn apply(
        &mut self,
        operation: &Operation,
        key: &Key,
        command: Command,
        now: Timestamp,
    ) -> Reply {
        let stored = self.records.get(operation).and_then(|keys| keys.get(key));
        let fences = &mut self.fences;
        let transition = record::apply_fenced(stored, command, now, || fences.next(wall_clock()));
        match transition.write {
            Write::Unchanged => {}
            Write::Put(record) => {
                let settled = matches!(record, Record::Completed { .. });
                self.put(operation, key, record);
                if settled {
                    self.wake(operation, key);
                }
                self.wrote(now);
            }
            Write::Delete => {
                self.delete(operation, key);
                self.wake(operation, key);
                self.wrote(now);
            }
        }
        transition.reply
    }

    /// Registers a watch on `key` if it holds a live pending record; `None` when it does
    /// not (the caller may reserve again at once).
    fn watch(
        &mut self,
        operation: &Operation,
        key: &Key,
        now: Timestamp,
    ) -> Option<(watch::Receiver<()>, Timestamp)> {
        let record = self.records.get(operation)?.get(key)?;
        let Record::Pending { lease_until, .. } = record else {
            return None;
        };
        if record.is_expired(now) {
            return None;
        }
        let lease_until = *lease_until;
        let sender = self
            .watchers
            .entry(operation.clone())
            .or_default()
            .entry(key.clone())
            .or_insert_with(|| watch::Sender::new(()));
        Some((sender.subscribe(), lease_until))
    }

    fn put(&mut self, operation: &Operation, key: &Key, record: Record) {
        if let Some(slot) = self
            .records
            .get_mut(operation)
            .and_then(|keys| keys.get_mut(key))
        {
            *slot = record;
            return;
        }
        self.records
            .entry(operation.clone())
            .or_default()
            .insert(key.clone(), record);
        self.len += 1;
    }

    fn delete(&mut self, operation: &Operation, key: &Key) {
        if remove(&mut self.records, operation, key).is_some() {
            self.len -= 1;
        }
    }

    /// Wakes the waiters of `key` by dropping its watch's sender.
    fn wake(&mut self, operation: &Operation, key: &Key) {
        if !self.watchers.is_empty() {
            remove(&mut self.watchers, operation, key);
        }
    }

    fn wrote(&mut self, now: Timestamp) {
        self.writes_since_sweep += 1;
        if self.writes_since_sweep >= SWEEP_MIN_WRITES.max(self.len / 2) {
            self.sweep(now);
        }
    }

    /// Drops every expired record, and every watch nobody waits on; returns how many
    /// records were dropped.
    fn sweep(&mut self, now: Timestamp) -> usize {
        self.writes_since_sweep = 0;
        let before = self.len;
        let mut left = 0;
        self.records.retain(|_, keys| {
            keys.retain(|_, record| !record.is_expired(now));
            left += keys.len();
            !keys.is_empty()
        });
        self.len = left;
        self.watchers.retain(|_, keys| {
            keys.retain(|_, sender| sender.receiver_count() > 0);
            !keys.is_empty()
        });
        before - left
    }
}

fn remove<V>(map: &mut Keyed<V>, operation: &Operation, key: &Key) -> Option<V> {
    let keys = map.get_mut(operation)?;
    let removed = keys.remove(key);
    if keys.is_empty() {
        map.remove(operation);
    }
    removed
}

/// Locks a shard. A panic while holding the lock cannot leave a shard half-written (every
/// write is one map operation after `apply` decided), so a poisoned lock is used as is.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The system clock in milliseconds since the Unix epoch, where fences start from (zero for
/// a clock set before 1970: the shard's counter alone then keeps them rising).
fn wall_clock() -> Timestamp {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp::from_millis(millis(since_epoch))
}
