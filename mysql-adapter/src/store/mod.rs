//! [`MySqlStore`]: the record machine on MariaDB, decided in Rust by the core's
//! [`apply_fenced`](idem_core::record::apply_fenced) on a row locked in the database.
//!
//! Here are the store, its constants and counters, and [`Store::apply`]; `builder` holds
//! [`MySqlStoreBuilder`], `command` how one record command runs (its fast statement where
//! one suffices, else a locked read, the decision and the write in one transaction), and
//! `upkeep` what keeps the table (migrating, sweeping).

mod admin;
mod builder;
mod command;
mod upkeep;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem::{Store, StoreError};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation};
use sqlx::MySqlPool;

use crate::error::MySqlError;
use crate::sql::Statements;
use crate::table::TableName;

pub use builder::MySqlStoreBuilder;
pub(crate) use command::Scope;

/// The per-command timeout used when none is configured (1 s, the same for every store): a
/// command that has not answered by then fails with [`StoreError::Unavailable`].
pub use idem::store::DEFAULT_COMMAND_TIMEOUT;

/// The longest lease or retention a command writes, 2^52 ms (some 142,000 years): a
/// longer one is cut to it, so that a deadline always fits the `BIGINT` column. Only there
/// does the store's reply differ from the record machine's.
pub const MAX_DURATION_MS: u64 = 1 << 52;

/// How many times a command whose key changed under it (a free key inserted by another
/// caller first, a deadlock InnoDB broke) is tried again before it is reported
/// unavailable. Nothing was written by a try that raced.
pub const MAX_RACES: u32 = 16;

/// Counters of what the store has seen since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Record commands applied on the store's pool. A complete run inside a caller's
    /// transaction counts in `statements` only.
    pub commands: u64,
    /// Statements run for them (`BEGIN` and `COMMIT` included), races included.
    pub statements: u64,
    /// Commands answered by their one fast statement: a reserve answered by its read or
    /// its insert, a complete of the caller's own live reservation.
    pub fast: u64,
    /// Tries that found their key changed under them, wrote nothing and were run again.
    pub raced: u64,
    /// Commands that ended in [`StoreError::Unavailable`]: their outcome is unknown.
    pub unavailable: u64,
    /// Commands refused because the row is not one this adapter wrote.
    pub corrupt: u64,
    /// Expired records deleted by [`MySqlStore::sweep`].
    pub swept: u64,
}

#[derive(Debug, Default)]
struct Counters {
    commands: AtomicU64,
    statements: AtomicU64,
    fast: AtomicU64,
    raced: AtomicU64,
    unavailable: AtomicU64,
    corrupt: AtomicU64,
    swept: AtomicU64,
}

struct Inner {
    pool: MySqlPool,
    /// Where actions' transactions are begun: a pool of their own unless the service
    /// built the store on one pool.
    transactions: MySqlPool,
    table: TableName,
    sql: Statements,
    command_timeout: Duration,
    read_first: bool,
    counters: Counters,
}

/// The record machine on MariaDB: one row per record in one InnoDB table, every command
/// judged by the server's clock with the owner checked under the row's lock (see the crate
/// docs). Cloning is cheap; clones share the pools and the counters.
#[derive(Clone)]
pub struct MySqlStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlStore")
            .field("table", &self.inner.table)
            .field("command_timeout", &self.inner.command_timeout)
            .finish_non_exhaustive()
    }
}

impl MySqlStore {
    /// Settings for a store.
    pub fn builder() -> MySqlStoreBuilder {
        MySqlStoreBuilder::default()
    }

    /// A store on the database at `url` (`mysql://user:password@host:3306/db`), with the
    /// default settings.
    pub async fn connect(url: &str) -> Result<Self, MySqlError> {
        Self::builder().connect(url).await
    }

    /// The pool the store's statements run on.
    pub fn pool(&self) -> &MySqlPool {
        &self.inner.pool
    }

    /// The pool actions' transactions are begun on ([`MySqlStore::begin`]).
    pub fn transaction_pool(&self) -> &MySqlPool {
        &self.inner.transactions
    }

    /// The records table.
    pub fn table(&self) -> &TableName {
        &self.inner.table
    }

    /// The per-command timeout.
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// The counters so far.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StoreStats {
            commands: load(&c.commands),
            statements: load(&c.statements),
            fast: load(&c.fast),
            raced: load(&c.raced),
            unavailable: load(&c.unavailable),
            corrupt: load(&c.corrupt),
            swept: load(&c.swept),
        }
    }
}

impl Store for MySqlStore {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        self.apply_timed(operation, key, command)
            .await
            .map(|(reply, _)| reply)
    }
}
