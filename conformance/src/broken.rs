//! Stores with one bug each, kept to show that the kit catches it: a check that passes every
//! store, broken ones included, checks nothing.
//!
//! [`BrokenStore`] is the record machine in memory, as [`idem::MemoryStore`] is, with one
//! [`Flaw`] a store author could write by mistake. [`InFront`] plays one [`Bug`] in front of a
//! real store, so that a store's own tests show the kit catching it on that store. They are not
//! for use: every one of them can run an action twice.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use idem::{Store, StoreError};
use idem_core::record::{Body, Command, Record, Reply, StoredResult, apply};
use idem_core::{Fence, Key, Operation, Timestamp};

use crate::subject::Subject;
use crate::timing::Timing;

/// Where [`Flaw::TruncatesBodies`] cuts a stored result.
const TRUNCATED_AT: usize = 64 * 1024;

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
    /// Keys are compared without regard to case, as under a case-insensitive collation:
    /// `Order-1` and `order-1` name one record, so one request replays another's result
    /// (`I12`).
    CaseInsensitiveKeys,
    /// A stored result is cut to its first 64 KiB, as by a column too small for it: a replay
    /// answers a body the action never returned (`I8`).
    TruncatesBodies,
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
        let name = match self.flaw {
            Flaw::CaseInsensitiveKeys => (
                operation.clone(),
                Key::new(key.as_str().to_ascii_lowercase()).unwrap_or_else(|_| key.clone()),
            ),
            _ => (operation.clone(), key.clone()),
        };
        let command = match (self.flaw, command) {
            (
                Flaw::TruncatesBodies,
                Command::Complete {
                    owner,
                    fingerprint,
                    result: StoredResult::Value(body),
                    retention,
                },
            ) if body.len() > TRUNCATED_AT => Command::Complete {
                owner,
                fingerprint,
                result: StoredResult::Value(Body::new(&body.as_bytes()[..TRUNCATED_AT])),
                retention,
            },
            (_, command) => command,
        };
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

/// A bug played in front of a real store by [`InFront`]: the store itself is right, and the
/// wrapper makes it answer as a store with the bug would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bug {
    /// Complete, renew and release are sent under the live holder's token, whoever sends
    /// them: as if the store did not check the owner (rule 4).
    NoOwnerCheck,
    /// A reserve is sent under the held record's fingerprint: as if the store did not compare
    /// fingerprints, and replayed one request's result to another (`I4`).
    NoFingerprintCheck,
    /// Every decision is reported `behind` the instant the store made it at: as if the store
    /// judged expiry by a clock other than the one it reports (rule 10).
    SkewedClock {
        /// How far behind.
        behind: Duration,
    },
    /// Every grant of a key carries the fence of its first grant: as if the store kept one
    /// fence per key and never raised it on a takeover (`F1`).
    FirstFenceForever,
}

/// A real store's subject with one [`Bug`] played in front of it: the kit's checks, run on it,
/// must each be caught where the bug shows. Each store's differential test runs these on the
/// real store, so the check is shown to catch them there, not only on [`BrokenStore`].
#[derive(Debug)]
pub struct InFront<S> {
    subject: S,
    bug: Bug,
    first_fences: Mutex<HashMap<(Operation, Key), Fence>>,
}

impl<S: Subject> InFront<S> {
    /// `subject` with `bug` in front.
    pub fn new(subject: S, bug: Bug) -> Self {
        Self {
            subject,
            bug,
            first_fences: Mutex::default(),
        }
    }

    /// The subject behind.
    pub fn inner(&self) -> &S {
        &self.subject
    }

    /// What the key holds now, live.
    async fn holder(&self, operation: &Operation, key: &Key) -> Result<Option<Record>, StoreError> {
        match self
            .subject
            .apply_timed(operation, key, Command::Read)
            .await?
        {
            (Reply::Read(record), _) => Ok(record),
            _ => Ok(None),
        }
    }
}

impl<S: Subject> Subject for InFront<S> {
    type Store = S::Store;

    fn store(&self) -> &S::Store {
        self.subject.store()
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.subject.now().await
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        mut command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        match self.bug {
            Bug::NoOwnerCheck => {
                if let Some(record) = self.holder(operation, key).await? {
                    match &mut command {
                        Command::Complete { owner, .. }
                        | Command::Renew { owner, .. }
                        | Command::Release { owner } => *owner = record.owner(),
                        _ => {}
                    }
                }
                self.subject.apply_timed(operation, key, command).await
            }
            Bug::NoFingerprintCheck => {
                if let Command::Reserve { fingerprint, .. } = &mut command
                    && let Some(record) = self.holder(operation, key).await?
                {
                    *fingerprint = record.fingerprint();
                }
                self.subject.apply_timed(operation, key, command).await
            }
            Bug::SkewedClock { behind } => {
                let (reply, timing) = self.subject.apply_timed(operation, key, command).await?;
                let back = |at: Timestamp| {
                    Timestamp::from_millis(
                        at.as_millis()
                            .saturating_sub(u64::try_from(behind.as_millis()).unwrap_or(u64::MAX)),
                    )
                };
                let timing = match timing {
                    Timing::At(at) => Timing::At(back(at)),
                    Timing::Within(from, to) => Timing::Within(back(from), back(to)),
                };
                Ok((reply, timing))
            }
            Bug::FirstFenceForever => {
                let (mut reply, timing) = self.subject.apply_timed(operation, key, command).await?;
                if let Reply::Reserved(grant) = &mut reply
                    && let Some(fence) = grant.fence
                {
                    let mut first = self
                        .first_fences
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    grant.fence = Some(
                        *first
                            .entry((operation.clone(), key.clone()))
                            .or_insert(fence),
                    );
                }
                Ok((reply, timing))
            }
        }
    }

    fn notifies(&self) -> bool {
        self.subject.notifies()
    }
}
