//! [`PostgresStore`]: the record machine on PostgreSQL, one statement per transition.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem::{BoxError, Store, StoreError};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation, Timestamp};
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, PgConnection, PgPool, Postgres, Row};
use tokio::time::Instant;

use crate::error::{CommandTimeout, PostgresError, failed};
use crate::row::{Answer, Refused, result_columns};
use crate::sql::Statements;
use crate::table::TableName;

/// The per-command timeout used when none is configured: a command that has not answered
/// by then fails with [`StoreError::Unavailable`].
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest lease or retention a command writes, 2^52 ms (some 142,000 years): a
/// longer one is cut to it, so that a deadline always fits the `bigint` column. Only
/// there does the store's reply differ from the record machine's, which would end such a
/// lease later still.
pub const MAX_DURATION_MS: u64 = 1 << 52;

/// How many times a statement that found its row changed under it (the reply `raced`,
/// after which nothing was written) is run again before the command is reported
/// unavailable.
pub const MAX_RACES: u32 = 16;

/// The advisory lock that serialises migrations (the bytes of `idempgs1`).
const MIGRATE_LOCK: i64 = 0x6964_656d_7067_7331;

/// The columns a records table has, in order: name, type, NOT NULL.
const LAYOUT: [(&str, &str, bool); 7] = [
    ("operation", "text", true),
    ("key", "text", true),
    ("state", "smallint", true),
    ("owner", "bytea", true),
    ("fingerprint", "bytea", true),
    ("body", "bytea", false),
    ("expires_at", "bigint", true),
];

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

/// Settings for [`PostgresStore`]; see [`PostgresStore::builder`].
#[derive(Debug, Clone)]
pub struct PostgresStoreBuilder {
    table: TableName,
    command_timeout: Duration,
    statement_timeout: Option<Duration>,
    max_connections: u32,
    connect_timeout: Duration,
    read_first: bool,
}

impl Default for PostgresStoreBuilder {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            statement_timeout: None,
            max_connections: 16,
            connect_timeout: Duration::from_secs(1),
            read_first: true,
        }
    }
}

impl PostgresStoreBuilder {
    /// The records table (default `idem_records`); see [`TableName`].
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// How long one command may take, waiting for a connection included (default 1 s). A
    /// command that takes longer fails with [`StoreError::Unavailable`], its connection is
    /// closed, and the statement may still have run on the server. Zero is raised to one
    /// millisecond.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The server-side `statement_timeout` of the connections this builder opens
    /// ([`connect`](Self::connect), [`connect_lazy`](Self::connect_lazy); default: the
    /// command timeout). The server cancels a statement that runs longer (a takeover
    /// waiting for a row lock, a stalled disk), so that it does not go on after the caller
    /// gave it up. A pool given to [`build`](Self::build) keeps its own settings.
    #[must_use]
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// The most connections a pool this builder opens holds (default 16).
    #[must_use]
    pub fn max_connections(mut self, connections: u32) -> Self {
        self.max_connections = connections.max(1);
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
    /// answered by that one read, as cheap as a bare `SELECT`; only a free or expired key
    /// goes on to the reserve statement, one more statement on a fresh call. Off, every
    /// reserve is the one reserve statement, which answers a live record as well but costs
    /// the server more (it carries the `INSERT` it did not need). Either way the replies are
    /// the record machine's.
    #[must_use]
    pub fn read_first(mut self, on: bool) -> Self {
        self.read_first = on;
        self
    }

    /// A store on `pool`, whose connections keep their own settings. The table must exist
    /// ([`PostgresStore::migrate`]).
    pub fn build(self, pool: PgPool) -> PostgresStore {
        PostgresStore {
            inner: Arc::new(Inner {
                sql: Statements::new(&self.table),
                table: self.table,
                pool,
                command_timeout: self.command_timeout,
                read_first: self.read_first,
                counters: Counters::default(),
            }),
        }
    }

    /// Connects to the database at `url` (`postgres://user@host:port/db`), opening one
    /// connection now, so that a wrong URL or an unreachable server shows at start-up.
    pub async fn connect(self, url: &str) -> Result<PostgresStore, PostgresError> {
        let (options, pool) = self.pool_options(url)?;
        let pool = pool
            .connect_with(options)
            .await
            .map_err(PostgresError::Database)?;
        Ok(self.build(pool))
    }

    /// As [`connect`](Self::connect), but connects on the first command, so that a service
    /// can start while the database is down: its calls then fail open or closed as
    /// configured, and succeed once the server is up. Only a malformed URL is refused.
    /// Must be called inside a tokio runtime.
    pub fn connect_lazy(self, url: &str) -> Result<PostgresStore, PostgresError> {
        let (options, pool) = self.pool_options(url)?;
        let pool = pool.connect_lazy_with(options);
        Ok(self.build(pool))
    }

    fn pool_options(&self, url: &str) -> Result<(PgConnectOptions, PgPoolOptions), PostgresError> {
        let timeout = self.statement_timeout.unwrap_or(self.command_timeout);
        let options = PgConnectOptions::from_str(url)
            .map_err(PostgresError::Config)?
            .options([("statement_timeout", timeout.as_millis().to_string())]);
        let pool = PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.connect_timeout);
        Ok((options, pool))
    }
}

struct Inner {
    pool: PgPool,
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

    /// The pool the store's statements run on; a transactional action's transaction is
    /// begun on it too ([`in_transaction`](crate::in_transaction)).
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
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

    /// Creates the records table and its expiry index if they do not exist, and checks
    /// that the table is laid out as this adapter's. Nothing else is created. Safe to run
    /// again and from several processes at once (an advisory lock serialises it). A table
    /// of the same name that is not this adapter's is left as it is and reported
    /// ([`PostgresError::Layout`]).
    pub async fn migrate(&self) -> Result<(), PostgresError> {
        let mut tx = self.inner.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATE_LOCK)
            .execute(&mut *tx)
            .await?;
        if self.relation_kind(&mut tx).await?.is_some() {
            self.check_layout(&mut tx).await?;
        }
        sqlx::raw_sql(AssertSqlSafe(Arc::clone(&self.inner.sql.migrate)))
            .execute(&mut *tx)
            .await?;
        self.check_layout(&mut tx).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn relation_kind(
        &self,
        conn: &mut PgConnection,
    ) -> Result<Option<String>, PostgresError> {
        let row = sqlx::query("SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)")
            .bind(self.inner.table.quoted())
            .fetch_optional(&mut *conn)
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    /// Whether the table is laid out as this adapter's: the columns, their types and
    /// nullability, in order, and the primary key on (operation, key).
    async fn check_layout(&self, conn: &mut PgConnection) -> Result<(), PostgresError> {
        let layout = |detail: String| PostgresError::Layout {
            table: self.inner.table.to_string(),
            detail,
        };
        let kind = self.relation_kind(conn).await?;
        if kind.as_deref() != Some("r") {
            return Err(layout(format!(
                "it is not a plain table (relkind {kind:?})"
            )));
        }
        let columns: Vec<(String, String, bool)> = sqlx::query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_attribute AS a \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
        )
        .bind(self.inner.table.quoted())
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
        .collect::<Result<_, sqlx::Error>>()?;
        let expected: Vec<(String, String, bool)> = LAYOUT
            .iter()
            .map(|(name, kind, not_null)| ((*name).to_owned(), (*kind).to_owned(), *not_null))
            .collect();
        if columns != expected {
            return Err(layout(format!(
                "its columns are {columns:?}, not {expected:?}"
            )));
        }
        let key: Option<Vec<String>> = sqlx::query(
            "SELECT array_agg(a.attname::text ORDER BY k.i) \
             FROM pg_index AS x \
             CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, i) \
             JOIN pg_attribute AS a ON a.attrelid = x.indrelid AND a.attnum = k.attnum \
             WHERE x.indrelid = to_regclass($1) AND x.indisprimary",
        )
        .bind(self.inner.table.quoted())
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
        if key.as_deref() != Some(&["operation".to_owned(), "key".to_owned()][..]) {
            return Err(layout(format!(
                "its primary key is {key:?}, not (operation, key)"
            )));
        }
        Ok(())
    }

    /// Deletes at most `batch` records that have expired on the server's clock, and returns
    /// how many it deleted.
    ///
    /// An expired record already reads as absent for every command (I9); the sweeper only
    /// keeps the table from growing. It skips rows that anyone has locked (a complete
    /// inside a caller's transaction, a takeover under way) and every row this adapter did
    /// not write. Run it from one task of the service, often enough that a batch keeps up
    /// with the keys that expire, for instance:
    ///
    /// ```no_run
    /// # async fn sweeper(store: idem_postgres::PostgresStore) {
    /// use std::time::Duration;
    ///
    /// let mut every = tokio::time::interval(Duration::from_secs(10));
    /// loop {
    ///     every.tick().await;
    ///     // Drain what has expired, one short statement at a time.
    ///     while let Ok(removed) = store.sweep(1_000).await {
    ///         if removed < 1_000 {
    ///             break;
    ///         }
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn sweep(&self, batch: u32) -> Result<u64, PostgresError> {
        let timeout = self.inner.command_timeout;
        let sweep = sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.sweep)))
            .bind(i64::from(batch))
            .fetch_one(&self.inner.pool);
        let row = tokio::time::timeout(timeout, sweep)
            .await
            .map_err(|_| PostgresError::Timeout(timeout))??;
        let removed: i64 = row.try_get("removed")?;
        let removed = u64::try_from(removed).unwrap_or(0);
        self.inner
            .counters
            .swept
            .fetch_add(removed, Ordering::Relaxed);
        Ok(removed)
    }

    /// Applies `command` as [`Store::apply`] does, and also returns the server instant the
    /// statement judged by (for a test to step the record machine at the same instant).
    pub async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let counters = &self.inner.counters;
        counters.commands.fetch_add(1, Ordering::Relaxed);
        let result = self.on_pool(operation, key, &command).await;
        self.count(result)
    }

    pub(crate) fn count<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let counters = &self.inner.counters;
        match &result {
            Ok(_) => {}
            Err(StoreError::Corrupt { .. }) => {
                counters.corrupt.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                counters.unavailable.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Runs `command` on a connection of the pool, within the command timeout.
    async fn on_pool(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let timeout = self.inner.command_timeout;
        let deadline = Instant::now() + timeout;
        let late = || StoreError::unavailable(command, CommandTimeout(timeout));
        let mut conn = match tokio::time::timeout_at(deadline, self.inner.pool.acquire()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => return Err(StoreError::unavailable(command, failed(error))),
            Err(_) => return Err(late()),
        };
        let applied = self.apply_on(&mut conn, operation, key, command);
        match tokio::time::timeout_at(deadline, applied).await {
            Ok(result) => result,
            Err(_) => {
                // The statement may still be running: never hand this connection out again.
                conn.close_on_drop();
                Err(late())
            }
        }
    }

    /// Runs `command` on `conn` (a connection of the pool, or a caller's transaction): its
    /// one statement, again while it reports `raced`.
    pub(crate) async fn apply_on(
        &self,
        conn: &mut PgConnection,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let counters = &self.inner.counters;
        let unavailable = |source: BoxError| StoreError::unavailable(command, source);
        let mut peek = self.inner.read_first && matches!(command, Command::Reserve { .. });
        for _ in 0..MAX_RACES {
            counters.statements.fetch_add(1, Ordering::Relaxed);
            let row = self
                .statement(operation, key, command, peek)
                .fetch_one(&mut *conn)
                .await
                .map_err(|error| unavailable(failed(error)))?;
            let answer = Answer::from_row(&row).map_err(|error| unavailable(Box::new(error)))?;
            let reply = match command {
                Command::Reserve { owner, .. } => answer.reserve(*owner),
                Command::Complete { .. } => answer.complete(),
                Command::Renew { owner, .. } => answer.renew(*owner),
                Command::Release { .. } => answer.release(),
                Command::Read => answer.read(),
            };
            match reply {
                Ok(reply) => return Ok((reply, answer.now)),
                Err(Refused::Free) if peek => peek = false,
                Err(Refused::Raced) => {
                    counters.raced.fetch_add(1, Ordering::Relaxed);
                }
                Err(Refused::Corrupt(detail)) => {
                    return Err(StoreError::Corrupt {
                        key: self.describe(operation, key),
                        detail,
                    });
                }
                Err(Refused::Free) => {
                    return Err(unavailable("a write statement answered `free`".into()));
                }
                Err(Refused::Unexpected(detail)) => return Err(unavailable(detail.into())),
            }
        }
        Err(unavailable(
            format!("the row changed under {MAX_RACES} statements in a row").into(),
        ))
    }

    /// How a record is named in errors and logs: the table, the operation and the key.
    fn describe(&self, operation: &Operation, key: &Key) -> String {
        format!("{} ({operation}, {key})", self.inner.table)
    }

    fn statement<'q>(
        &self,
        operation: &'q Operation,
        key: &'q Key,
        command: &'q Command,
        peek: bool,
    ) -> Query<'q, Postgres, PgArguments> {
        let sql = &self.inner.sql;
        let query = |sql: &Arc<str>| {
            sqlx::query(AssertSqlSafe(Arc::clone(sql)))
                .bind(operation.as_str())
                .bind(key.as_str())
        };
        match command {
            Command::Reserve {
                owner, fingerprint, ..
            } if peek => query(&sql.peek)
                .bind(owner.to_bytes().to_vec())
                .bind(fingerprint.to_bytes().to_vec()),
            Command::Reserve {
                owner,
                fingerprint,
                lease,
            } => query(&sql.reserve)
                .bind(owner.to_bytes().to_vec())
                .bind(fingerprint.to_bytes().to_vec())
                .bind(millis(*lease)),
            Command::Complete {
                owner,
                fingerprint,
                result,
                retention,
            } => {
                let (state, body) = result_columns(result);
                query(&sql.complete)
                    .bind(owner.to_bytes().to_vec())
                    .bind(fingerprint.to_bytes().to_vec())
                    .bind(state)
                    .bind(body)
                    .bind(millis(*retention))
            }
            Command::Renew { owner, lease } => query(&sql.renew)
                .bind(owner.to_bytes().to_vec())
                .bind(millis(*lease)),
            Command::Release { owner } => query(&sql.release).bind(owner.to_bytes().to_vec()),
            Command::Read => query(&sql.read),
        }
    }
}

/// A duration in whole milliseconds, at most [`MAX_DURATION_MS`].
fn millis(duration: Duration) -> i64 {
    let ms = duration.as_millis().min(u128::from(MAX_DURATION_MS));
    i64::try_from(ms).unwrap_or(i64::MAX)
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
}
