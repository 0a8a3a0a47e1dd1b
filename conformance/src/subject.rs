//! What the kit needs of a store: the [`Subject`] trait.

use std::future::Future;

use idem::{BoxError, MemoryStore, Store, StoreError};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation, Timestamp};

use crate::timing::Timing;

/// A store under test, with what the kit needs beside [`Store`]: the store's clock, and
/// optionally a way to plant a value the store did not write.
///
/// Implementing it for a new store takes a few lines: [`store`](Self::store) and
/// [`now`](Self::now) (the store's clock: Redis `TIME`, SQL `SELECT` of the server's time).
/// A store that can say at which instant it decided a command overrides
/// [`apply_timed`](Self::apply_timed), which makes the kit's judgement exact; otherwise every
/// command is placed in the window between two reads of the clock.
///
/// The kit gives every check its own keys, under operations that begin with
/// `conformance.`, and a unique prefix per run: a store that already holds records (a shared
/// table, a Redis in use) can be checked, and runs never see each other's keys.
pub trait Subject: Send + Sync {
    /// The store.
    type Store: Store;

    /// The store under test.
    fn store(&self) -> &Self::Store;

    /// The store's clock now: the clock its leases and retentions are judged by (rule 10).
    fn now(&self) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    /// Applies `command` through [`Store::apply`] and says when, on the store's clock, it was
    /// decided. The provided implementation reads [`now`](Self::now) before and after the
    /// command and answers the window between.
    fn apply_timed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> impl Future<Output = Result<(Reply, Timing), StoreError>> + Send + 'a {
        async move {
            let from = self.now().await?;
            let reply = self.store().apply(operation, key, command).await?;
            let to = self.now().await?;
            Ok((reply, Timing::Within(from, to)))
        }
    }

    /// Writes, under `key` of `operation`, a value this store did not write (garbage bytes, an
    /// unknown state), for the kit to check that every command answers
    /// [`StoreError::Corrupt`] and leaves it alone. Answers `false` if the store cannot hold
    /// such a value (one that keeps typed records in memory); the check is then skipped and
    /// the report says so.
    fn plant_corrupt<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = Result<bool, BoxError>> + Send + 'a {
        let _ = (operation, key);
        async { Ok(false) }
    }

    /// Whether the store sends change notices ([`Store::changed`] and [`Store::watch`] resolve
    /// when a record stops being pending), for the `notices` check; `false` (the trait's
    /// provided methods, which never resolve) skips it.
    fn notifies(&self) -> bool {
        false
    }

    /// The largest stored result, in bytes, the store promises to keep byte for byte; the
    /// kit stores one of exactly this size. 1 MiB unless the store says otherwise.
    fn max_body(&self) -> usize {
        1 << 20
    }
}

/// `MemoryStore` decides every command at its own clock, read under the key's lock, so the
/// window between two reads of [`MemoryStore::now`] holds the instant it decided at.
impl Subject for MemoryStore {
    type Store = MemoryStore;

    fn store(&self) -> &MemoryStore {
        self
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(MemoryStore::now(self))
    }

    fn notifies(&self) -> bool {
        true
    }
}
