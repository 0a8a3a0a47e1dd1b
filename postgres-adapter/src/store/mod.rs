//! [`PostgresStore`]: the record machine on PostgreSQL, one statement per transition.
//!
//! Here are the store, its settings' constants and its counters, and [`Store::apply`];
//! `builder` holds [`PostgresStoreBuilder`] (the pool and the timeouts), `command` how one
//! record command runs as its statement (within the command timeout, again while it
//! races), and `upkeep` what keeps the table (creating and checking it, sweeping expired
//! records, which already read as absent: I9).

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
use sqlx::PgPool;

use crate::error::PostgresError;
use crate::sql::Statements;
use crate::table::TableName;

pub use builder::PostgresStoreBuilder;

/// The per-command timeout used when none is configured (1 s, the same for every store): a
/// command that has not answered by then fails with [`StoreError::Unavailable`].
pub use idem::store::DEFAULT_COMMAND_TIMEOUT;

/// The longest lease or retention a command writes, 2^52 ms (some 142,000 years): a
/// longer one is cut to it, so that a deadline always fits the `bigint` column. Only
/// there does the store's reply differ from the record machine's, which would end such a
/// lease later still.
pub const MAX_DURATION_MS: u64 = 1 << 52;

/// How many times a statement that found its row changed under it (the reply `raced`,
/// after which nothing was written) is run again before the command is reported
/// unavailable.
pub const MAX_RACES: u32 = 16;

/// Counters of what the store has seen since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Record commands applied on the store's pool (a reserve may take more than one
    /// statement). A complete run inside a caller's transaction counts in `statements`
    /// only.
    pub commands: u64,
    /// Statements run for them, races included.
    pub statements: u64,
    /// Statements that found their row changed since their snapshot, wrote nothing and
    /// were run again.
    pub raced: u64,
    /// Commands that ended in [`StoreError::Unavailable`]: their outcome is unknown.
    pub unavailable: u64,
    /// Commands refused because the row is not one this adapter wrote.
    pub corrupt: u64,
    /// Expired records deleted by [`PostgresStore::sweep`].
    pub swept: u64,
}

#[derive(Debug, Default)]
struct Counters {
    commands: AtomicU64,
    statements: AtomicU64,
    raced: AtomicU64,
    unavailable: AtomicU64,
    corrupt: AtomicU64,
    swept: AtomicU64,
}

struct Inner {
    pool: PgPool,
    /// Where actions' transactions are begun: a pool of their own unless the service
    /// built the store on one pool (see `PostgresStoreBuilder::transaction_connections`).
    transactions: PgPool,
    table: TableName,
    sql: Statements,
    command_timeout: Duration,
    read_first: bool,
    counters: Counters,
}

/// The record machine on PostgreSQL: one row per record in one table, one statement per
/// command, judged by the server's clock (see the crate docs). Cloning is cheap; clones
/// share the pool and the counters.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.inner.table)
            .field("command_timeout", &self.inner.command_timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Settings for a store.
    pub fn builder() -> PostgresStoreBuilder {
        PostgresStoreBuilder::default()
    }

    /// A store on the database at `url`, with the default settings.
    pub async fn connect(url: &str) -> Result<Self, PostgresError> {
        Self::builder().connect(url).await
    }

    /// The pool the store's statements run on.
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The pool actions' transactions are begun on ([`PostgresStore::begin`]): by default
    /// one of their own, so that a transaction held for a whole action never takes a
    /// connection the store's statements (its renewals) need.
    pub fn transaction_pool(&self) -> &PgPool {
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
            raced: load(&c.raced),
            unavailable: load(&c.unavailable),
            corrupt: load(&c.corrupt),
            swept: load(&c.swept),
        }
    }
}

impl Store for PostgresStore {
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

    /// As [`apply`](Self::apply), with no timer of the store's (neither on the pool's
    /// connection nor on the statement): the caller drops the command at its own deadline,
    /// and a connection whose statement had not answered is closed, never handed out again.
    async fn apply_bounded(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        self.on_pool(operation, key, &command, None)
            .await
            .map(|(reply, _)| reply)
    }
}
