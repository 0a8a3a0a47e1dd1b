//! Stores with one bug each, kept to show that the kit catches it: a check that passes every
//! store, broken ones included, checks nothing.
//!
//! Each is the record machine in memory, as [`idem::MemoryStore`] is, with one [`Flaw`] a
//! store author could write by mistake. They are not for use: every one of them can run an
//! action twice.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use idem::{Store, StoreError};
use idem_core::record::{Command, Record, Reply, apply};
use idem_core::{Key, Operation, Timestamp};

use crate::subject::Subject;

/// The one bug of a [`BrokenStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Flaw {
    /// Complete, renew and release are carried out for whichever owner sends them: the owner
    /// check (rule 4) is skipped, so a holder whose lease ran out overwrites its successor.
    SkipsOwnerCheck,
    /// Leases and retentions are judged by the caller's clock, which runs `ahead` of the
    /// store's (rule 10): keys are freed early by that much.
    ClientClock {
        /// How far the caller's clock is ahead of the store's.
        ahead: Duration,
    },
    /// A command reads the record, lets other commands run, then decides and writes on what
    /// it read: check-then-set without a lock, so racing reserves are all granted.
    Unlocked,
    /// A change notice's watch starts when its future is first polled, not when
    /// [`Store::changed`] is called: a complete or release that lands in between is lost, and
    /// the waiter sleeps through it to its backoff.
    WatchFromFirstPoll,
}

/// The record machine in memory with one [`Flaw`].
#[derive(Debug)]
pub struct BrokenStore {
    flaw: Flaw,
    records: Mutex<HashMap<(Operation, Key), Record>>,
    /// Woken by every complete and release (change notices for the whole store: a waiter on
    /// another key wakes spuriously, which the contract allows).
    ended: Notify,
    epoch: Instant,
}

impl BrokenStore {
    /// A store with `flaw`.
    pub fn new(flaw: Flaw) -> Self {
        Self {
            flaw,
            records: Mutex::default(),
            ended: Notify::new(),
            epoch: Instant::now(),
        }
    }

    /// Its flaw.
    pub fn flaw(&self) -> Flaw {
        self.flaw
    }

    /// The store's clock: milliseconds since it was made.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_millis(u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    fn records(&self) -> MutexGuard<'_, HashMap<(Operation, Key), Record>> {
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The instant commands are judged at: the store's, or the caller's.
    fn judging_now(&self) -> Timestamp {
        match self.flaw {
            Flaw::ClientClock { ahead } => self.now().saturating_add(ahead),
            _ => self.now(),
        }
    }

    /// The command with its owner replaced by the live holder's, where the owner check is
    /// skipped.
    fn without_owner_check(
        &self,
        stored: Option<&Record>,
        command: Command,
        now: Timestamp,
    ) -> Command {
        let Some(holder) = stored
            .filter(|record| !record.is_expired(now))
            .map(Record::owner)
        else {
            return command;
        };
        match command {
            Command::Complete {
                fingerprint,
                result,
                retention,
                ..
            } => Command::Complete {
                owner: holder,
                fingerprint,
                result,
                retention,
            },
            Command::Renew { lease, .. } => Command::Renew {
                owner: holder,
                lease,
            },
            Command::Release { .. } => Command::Release { owner: holder },
            other => other,
        }
    }

    /// Wakes the waiters when a record stopped being pending.
    fn announce(&self, reply: &Reply) {
        if matches!(reply, Reply::Completed(_) | Reply::Released) {
            self.ended.notify_waiters();
        }
    }

    /// The machine's step on `stored`, with the flaw: the reply and what the key holds after.
    fn step(&self, stored: Option<Record>, command: Command) -> (Reply, Option<Record>) {
        let now = self.judging_now();
        let command = match self.flaw {
            Flaw::SkipsOwnerCheck => self.without_owner_check(stored.as_ref(), command, now),
            _ => command,
        };
        let mut state = stored;
        let reply = apply(state.as_ref(), command, now).apply_to(&mut state);
        (reply, state)
    }
}

fn put(
    records: &mut HashMap<(Operation, Key), Record>,
    name: (Operation, Key),
    state: Option<Record>,
) {
    match state {
        Some(record) => {
            records.insert(name, record);
        }
        None => {
            records.remove(&name);
        }
    }
}

impl Store for BrokenStore {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let name = (operation.clone(), key.clone());
        if self.flaw == Flaw::Unlocked {
            let stored = self.records().get(&name).cloned();
            // Other commands run here, on what is now a stale read.
            tokio::task::yield_now().await;
            let (reply, state) = self.step(stored, command);
            put(&mut self.records(), name, state);
            self.announce(&reply);
            return Ok(reply);
        }
        // Held from the read to the write: one command at a time, as the machine needs.
        let reply = {
            let mut records = self.records();
            let stored = records.get(&name).cloned();
            let (reply, state) = self.step(stored, command);
            put(&mut records, name, state);
            reply
        };
        self.announce(&reply);
        Ok(reply)
    }

    fn changed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        let _ = (operation, key);
        // Created here, the future hears every notice from the call on, polled or not.
        let ended = (self.flaw != Flaw::WatchFromFirstPoll).then(|| self.ended.notified());
        async move {
            match ended {
                Some(ended) => ended.await,
                None => self.ended.notified().await,
            }
        }
    }
}

/// The store's own clock is the one reported, whatever the flaw judges by.
impl Subject for BrokenStore {
    type Store = BrokenStore;

    fn store(&self) -> &BrokenStore {
        self
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(BrokenStore::now(self))
    }

    fn notifies(&self) -> bool {
        true
    }
}
