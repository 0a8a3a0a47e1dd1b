//! One shard of the replay cache: a map from a key's hash to a slot, and CLOCK eviction
//! (second chance) over the slots, within a count and a byte bound.
//!
//! A hit sets the record's reference bit; when room is needed the hand sweeps the slots,
//! dropping an expired record at once, clearing a set bit and moving on, and evicting the
//! first record whose bit is clear. Two turns of the hand always find one, so an insert
//! costs O(1) amortised and the shard never holds more than its bounds.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use idem_core::record::StoredResult;
use idem_core::{Fingerprint, Key, Operation, Timestamp};

/// One completed record as the cache keeps it.
#[derive(Debug)]
pub(super) struct Entry {
    /// The hash of its operation and key (the map's key).
    pub(super) hash: u64,
    /// The operation it is filed under (`None` only in a deliberately broken cache).
    pub(super) operation: Option<Operation>,
    pub(super) key: Key,
    pub(super) fingerprint: Fingerprint,
    pub(super) result: StoredResult,
    /// The instant, on the caller's clock, from which it is no longer served.
    pub(super) until: Timestamp,
    /// What it counts against the byte bound.
    pub(super) bytes: usize,
    /// Hit since the hand last passed.
    pub(super) referenced: bool,
}

/// What an insert dropped to make room.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dropped {
    /// Live records evicted.
    pub(super) evicted: u64,
    /// Records whose time had passed.
    pub(super) expired: u64,
}

/// A hasher for keys that are already hashes.
#[derive(Debug, Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Debug)]
pub(super) struct Shard {
    index: HashMap<u64, usize, BuildHasherDefault<Prehashed>>,
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    hand: usize,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl Shard {
    pub(super) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The live record of `operation` and `key` at `now`, marked as used; or `Err(true)` if
    /// its time had passed (it is dropped), `Err(false)` if there is none.
    pub(super) fn get(
        &mut self,
        hash: u64,
        operation: Option<&Operation>,
        key: &Key,
        now: Timestamp,
    ) -> Result<&Entry, bool> {
        let slot = *self.index.get(&hash).ok_or(false)?;
        let entry = self.slots.get(slot).and_then(Option::as_ref).ok_or(false)?;
        // Two keys of one hash: only the very operation and key are answered (I4, I12).
        if entry.operation.as_ref() != operation || entry.key != *key {
            return Err(false);
        }
        if now >= entry.until {
            self.remove(slot);
            return Err(true);
        }
        match self.slots.get_mut(slot).and_then(Option::as_mut) {
            Some(entry) => {
                entry.referenced = true;
                Ok(entry)
            }
            None => Err(false),
        }
    }

    /// Keeps `entry` in place of any record of the same hash, dropping others as needed to
    /// stay within the bounds. A record larger than the byte bound is not kept.
    pub(super) fn insert(&mut self, entry: Entry, now: Timestamp) -> Dropped {
        let mut dropped = Dropped::default();
        if let Some(&slot) = self.index.get(&entry.hash) {
            self.remove(slot);
        }
        if entry.bytes > self.max_bytes || self.max_entries == 0 {
            return dropped;
        }
        while self.index.len() >= self.max_entries || self.bytes + entry.bytes > self.max_bytes {
            match self.evict_one(now) {
                Some(true) => dropped.expired += 1,
                Some(false) => dropped.evicted += 1,
                None => return dropped,
            }
        }
        self.bytes += entry.bytes;
        let hash = entry.hash;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(entry);
                slot
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        self.index.insert(hash, slot);
        dropped
    }

    /// Drops one record by the hand: `Some(true)` an expired one, `Some(false)` a live one,
    /// `None` if there is nothing to drop.
    fn evict_one(&mut self, now: Timestamp) -> Option<bool> {
        if self.index.is_empty() {
            return None;
        }
        // Each slot is passed at most twice: once to clear its bit, once to evict it.
        for _ in 0..=2 * self.slots.len() {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let slot = self.hand;
            self.hand += 1;
            let Some(entry) = self.slots[slot].as_mut() else {
                continue;
            };
            if now >= entry.until {
                self.remove(slot);
                return Some(true);
            }
            if entry.referenced {
                entry.referenced = false;
                continue;
            }
            self.remove(slot);
            return Some(false);
        }
        None
    }

    fn remove(&mut self, slot: usize) {
        if let Some(entry) = self.slots.get_mut(slot).and_then(Option::take) {
            self.index.remove(&entry.hash);
            self.bytes -= entry.bytes;
            self.free.push(slot);
        }
    }
}
