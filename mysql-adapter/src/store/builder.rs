//! [`MySqlStoreBuilder`]: the records table, the timeouts and the pools a [`MySqlStore`]
//! runs on.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, Executor, MySqlPool};

use super::{Counters, DEFAULT_COMMAND_TIMEOUT, Inner, MySqlStore};
use crate::error::MySqlError;
use crate::sql::Statements;
use crate::table::TableName;

/// Settings for [`MySqlStore`]; see [`MySqlStore::builder`].
#[derive(Debug, Clone)]
pub struct MySqlStoreBuilder {
    table: TableName,
    command_timeout: Duration,
    statement_timeout: Option<Duration>,
    max_connections: u32,
    transaction_connections: u32,
    transaction_pool: Option<MySqlPool>,
    connect_timeout: Duration,
    read_first: bool,
}

impl Default for MySqlStoreBuilder {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            statement_timeout: None,
            max_connections: 16,
            transaction_connections: 16,
            transaction_pool: None,
            connect_timeout: Duration::from_secs(1),
            read_first: true,
        }
    }
}

impl MySqlStoreBuilder {
    /// The records table (default `idem_records`); see [`TableName`].
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// How long one command may take, waiting for a connection included (default
    /// [`DEFAULT_COMMAND_TIMEOUT`](idem::store::DEFAULT_COMMAND_TIMEOUT), 1 s, the same for
    /// every store). A command that takes longer fails with
    /// [`StoreError::Unavailable`](idem::StoreError::Unavailable), and its statement may
    /// still have run on the server. Its connection is closed then (so an open transaction
    /// of the command's is rolled back by the server), and also when the caller drops the
    /// command first. Zero is raised to one millisecond.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The command timeout derived from the options of the coordinator this store serves
    /// ([`idem::store::command_timeout`]: twice its reply timeout).
    #[must_use]
    pub fn options(self, options: &idem::Options) -> Self {
        self.command_timeout(idem::store::command_timeout(options))
    }

    /// MariaDB's `max_statement_time` on the connections this builder opens for the
    /// store's statements (default: the command timeout): the server aborts a statement
    /// that runs longer, so that one the caller gave up does not go on. A pool given to
    /// [`build`](Self::build) keeps its own settings.
    #[must_use]
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// The most connections the pool of the store's own statements holds (default 16).
    #[must_use]
    pub fn max_connections(mut self, connections: u32) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// The most connections the pool of actions' transactions holds (default 16), when this
    /// builder opens it. A transactional action holds one for its whole run; on a pool of
    /// its own it never takes a connection its lease's renewals need. The two pools
    /// together must fit the server's `max_connections` across every process.
    #[must_use]
    pub fn transaction_connections(mut self, connections: u32) -> Self {
        self.transaction_connections = connections.max(1);
        self
    }

    /// The pool actions' transactions are begun on, given by the service (default: one
    /// this builder opens, or with [`build`](Self::build) the statements' pool itself).
    /// [`MySqlStore::begin`] sets its sessions to READ COMMITTED.
    #[must_use]
    pub fn transaction_pool(mut self, pool: MySqlPool) -> Self {
        self.transaction_pool = Some(pool);
        self
    }

    /// How long opening a connection may take (default 1 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Whether a reserve first reads the key with a plain primary-key `SELECT` (default
    /// on). A live record (a replay, key reuse, an identical request in flight) is then
    /// answered by that one read, and a free key costs one statement more, its `INSERT`.
    /// Off, a reserve tries the `INSERT` first: a fresh call saves the read, and a live
    /// record costs the failed insert (a duplicate) and then the read. Either way the
    /// replies are the record machine's.
    #[must_use]
    pub fn read_first(mut self, on: bool) -> Self {
        self.read_first = on;
        self
    }

    /// A store on `pool`, whose connections keep their own settings. The table must exist
    /// ([`MySqlStore::migrate`]). Actions' transactions are begun on the
    /// [`transaction_pool`](Self::transaction_pool) if one was given, else on `pool` too.
    pub fn build(self, pool: MySqlPool) -> MySqlStore {
        let transactions = self
            .transaction_pool
            .clone()
            .unwrap_or_else(|| pool.clone());
        self.build_on(pool, transactions)
    }

    fn build_on(self, pool: MySqlPool, transactions: MySqlPool) -> MySqlStore {
        MySqlStore {
            inner: Arc::new(Inner {
                sql: Statements::new(&self.table),
                table: self.table,
                pool,
                transactions,
                command_timeout: self.command_timeout,
                read_first: self.read_first,
                counters: Counters::default(),
            }),
        }
    }

    /// Connects to the database at `url` (`mysql://user:password@host:3306/db`), opening
    /// one connection now, so that a wrong URL or an unreachable server shows at start-up.
    pub async fn connect(self, url: &str) -> Result<MySqlStore, MySqlError> {
        let (options, pool, transactions) = self.pool_options(url)?;
        let pool = pool
            .connect_with(options.clone())
            .await
            .map_err(MySqlError::Database)?;
        let transactions = match self.transaction_pool.clone() {
            Some(given) => given,
            None => transactions.connect_lazy_with(options),
        };
        Ok(self.build_on(pool, transactions))
    }

    /// As [`connect`](Self::connect), but connects on the first command, so that a service
    /// can start while the database is down. Only a malformed URL is refused. Must be called
    /// inside a tokio runtime.
    pub fn connect_lazy(self, url: &str) -> Result<MySqlStore, MySqlError> {
        let (options, pool, transactions) = self.pool_options(url)?;
        let transactions = match self.transaction_pool.clone() {
            Some(given) => given,
            None => transactions.connect_lazy_with(options.clone()),
        };
        let pool = pool.connect_lazy_with(options);
        Ok(self.build_on(pool, transactions))
    }

    /// The connection options, and the two pools' settings: the statements' pool sets
    /// `max_statement_time` on each new connection.
    fn pool_options(
        &self,
        url: &str,
    ) -> Result<(MySqlConnectOptions, MySqlPoolOptions, MySqlPoolOptions), MySqlError> {
        let options = MySqlConnectOptions::from_str(url).map_err(MySqlError::Config)?;
        let timeout = self.statement_timeout.unwrap_or(self.command_timeout);
        let set = format!(
            "SET SESSION max_statement_time = {:.3}",
            timeout.as_secs_f64()
        );
        let pool = MySqlPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout)
            .after_connect(move |conn, _| {
                let set = set.clone();
                Box::pin(async move {
                    conn.execute(AssertSqlSafe(set)).await?;
                    Ok(())
                })
            });
        let transactions = MySqlPoolOptions::new()
            .max_connections(self.transaction_connections)
            .acquire_timeout(self.connect_timeout);
        Ok((options, pool, transactions))
    }
}
