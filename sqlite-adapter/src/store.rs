//! [`SqliteStore`]: the record machine on an SQLite file, one write transaction per
//! command that changes a record.
//!
//! Every command that may write runs in one `BEGIN IMMEDIATE` transaction: it takes the
//! database's one write lock first, then reads the record's row, reads the host's clock
//! once, decides with the core's [`apply_fenced`], writes exactly what the machine writes
//! (and the fence counter, for a grant), and commits. Because the lock is taken before the
//! row is read, no other writer (in this process or another sharing the file) can change
//! the row between the read and the write: the command is atomic per key, and in fact per
//! file. A reserve is first answered from a plain read, outside any write
//! transaction, when the record machine would write nothing (a live record: replay, key
//! reuse, in flight, the holder's own repeat); only a free or expired key goes on to the
//! write transaction. A read command always takes the write lock, so that it waits for a
//! commit in progress, as the settlement of a lost commit reply needs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{BoxError, Store, StoreError};
use idem_core::record::{Command, CommandKind, Record, Reply, Write, apply, apply_fenced};
use idem_core::{Fence, Key, Operation, Timestamp};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Connection, Sqlite, SqliteConnection};
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::error::{ClockBeforeEpoch, CommandTimeout, DeadlineOutOfRange, SqliteError, failed};
use crate::row::{Columns, Found};
use crate::sql::Statements;
use crate::table::TableName;

mod admin;

/// The per-command timeout used when none is configured (1 s, the same for every store).
pub use idem::store::DEFAULT_COMMAND_TIMEOUT;

/// How each commit reaches the disk: SQLite's `synchronous` setting in WAL mode.
///
/// The choice is between surviving a **process crash** and surviving a **power loss or
/// operating-system crash**:
///
/// - [`Full`](Self::Full) (the default): every commit is `fsync`ed to the write-ahead log
///   before the command answers. A record the store answered for (a reservation granted, a
///   result recorded) survives a process crash *and* a power loss.
/// - [`Normal`](Self::Normal): the log is synced only at checkpoints. A committed record
///   survives a process crash (the write is in the operating system's cache), but a power
///   loss or kernel crash may roll back the last commits: a completed record can vanish
///   after its call returned, and a retry after the reboot runs the action a second time.
///   Faster (see BENCHMARKS.md, "SQLite"); for effects that a second run does not harm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// `PRAGMA synchronous = FULL`: durable across power loss.
    #[default]
    Full,
    /// `PRAGMA synchronous = NORMAL`: durable across a process crash only.
    Normal,
}

/// Counters of what the store has seen since it was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Record commands applied on the store's pool (not a complete inside a caller's
    /// transaction).
    pub commands: u64,
    /// Commands answered from a plain read, without a write transaction.
    pub read_only: u64,
    /// Commands decided inside a write transaction (on the pool, or a complete inside a
    /// caller's transaction). With group commit, several share one transaction.
    pub write_transactions: u64,
    /// Group commits: write transactions the writer task committed, each of one or more
    /// commands.
    pub batches: u64,
    /// Commands that ended in [`StoreError::Unavailable`]: their outcome is unknown.
    pub unavailable: u64,
    /// Commands refused because the row is not one this adapter wrote.
    pub corrupt: u64,
    /// Expired records deleted by [`SqliteStore::sweep`].
    pub swept: u64,
}

#[derive(Debug, Default)]
struct Counters {
    commands: AtomicU64,
    read_only: AtomicU64,
    write_transactions: AtomicU64,
    batches: AtomicU64,
    unavailable: AtomicU64,
    corrupt: AtomicU64,
    swept: AtomicU64,
}

/// The record machine on one SQLite database file, in WAL mode.
///
/// Cheap to clone: clones share the pool, the in-process writer lock and the counters. Open
/// it with [`SqliteStore::open`] or [`SqliteStore::builder`], then [`migrate`](Self::migrate)
/// once. Several processes on one host may open the same file: every write takes SQLite's
/// file lock, and every process reads the same host clock (MODEL.md, "SQLite
/// (idem-sqlite)"). A file on a network file system is not supported (SQLite's WAL needs
/// shared memory between the processes).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: SqlitePool,
    sql: Statements,
    table: TableName,
    path: PathBuf,
    pub(crate) command_timeout: Duration,
    read_first: bool,
    /// The one writer of this process: held from before `BEGIN IMMEDIATE` to the commit,
    /// so that the writers of one process queue here, in order, instead of polling SQLite's
    /// lock with its busy handler's sleeps. Writers of other processes meet the file lock
    /// and the busy timeout.
    pub(crate) writer: Arc<Mutex<()>>,
    /// The queue of the writer task that group-commits (`None`: each command commits on
    /// its own).
    jobs: Option<mpsc::UnboundedSender<Job>>,
    counters: Counters,
}

/// Settings for [`SqliteStore`]; see [`SqliteStore::builder`].
#[derive(Debug, Clone)]
pub struct SqliteStoreBuilder {
    table: TableName,
    command_timeout: Duration,
    busy_timeout: Option<Duration>,
    max_connections: u32,
    synchronous: Synchronous,
    read_first: bool,
    group_commit: bool,
}

impl Default for SqliteStoreBuilder {
    fn default() -> Self {
        Self {
            table: TableName::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            busy_timeout: None,
            max_connections: 4,
            synchronous: Synchronous::Full,
            read_first: true,
            group_commit: true,
        }
    }
}

impl SqliteStoreBuilder {
    /// The records table (default `idem_records`); see [`TableName`].
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// How long one command may take, waiting for the writer lock and a connection
    /// included (default [`DEFAULT_COMMAND_TIMEOUT`], 1 s, the same for every store). A
    /// command that takes longer fails with
    /// [`StoreError::Unavailable`]: its transaction may have committed. Its connection is
    /// closed then (which rolls back a transaction still open), and also when the caller
    /// drops the command first. Zero is raised to one millisecond.
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

    /// How long a statement waits for a lock held by another process (SQLite's
    /// `busy_timeout`; default: the command timeout). Past it, the statement fails with
    /// `SQLITE_BUSY`, reported as [`StoreError::Unavailable`].
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = Some(timeout);
        self
    }

    /// The most connections the pool holds (default 4). Only one writes at a time (SQLite
    /// has one writer per file); the others serve the reads that answer replays, and a
    /// transactional action's open transaction.
    #[must_use]
    pub fn max_connections(mut self, connections: u32) -> Self {
        self.max_connections = connections.max(2);
        self
    }

    /// How commits reach the disk (default [`Synchronous::Full`]).
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Whether a reserve first reads the key outside a write transaction (default on): a
    /// live record (a replay, key reuse, an identical request in flight) is then answered
    /// without taking the write lock, so replays run in parallel with writers. Off, every
    /// command takes the write lock. A read command always takes it, so that it waits for a
    /// commit in progress. Either way the replies are the record machine's.
    #[must_use]
    pub fn read_first(mut self, on: bool) -> Self {
        self.read_first = on;
        self
    }

    /// Whether the store's writes go through one writer task that commits the commands
    /// queued meanwhile together, in one write transaction (default on). Each command is
    /// still decided alone, in order, by the record machine on the state the ones before it
    /// left, and is answered only once the transaction has committed; what the batch
    /// shares is the commit, and with `Synchronous::Full` its `fsync`, so fresh calls from
    /// concurrent callers cost one commit between them instead of one each. The price: one
    /// command's I/O failure fails the others in its batch (answered unavailable, their
    /// outcome unknown, as for any I/O failure). Off, each command commits on its own.
    ///
    /// The writer task runs on the tokio runtime [`open`](Self::open) is called on: the
    /// store must be used while that runtime runs (a command after it shut down is
    /// answered unavailable). Opened outside a tokio runtime, the store commits each
    /// command on its own.
    #[must_use]
    pub fn group_commit(mut self, on: bool) -> Self {
        self.group_commit = on;
        self
    }

    /// Opens (creating it if missing) the database file at `path` in WAL mode, opening one
    /// connection now so that a path that cannot be opened shows at start-up. The table
    /// must exist ([`SqliteStore::migrate`]).
    pub async fn open(self, path: impl AsRef<Path>) -> Result<SqliteStore, SqliteError> {
        let path = path.as_ref().to_path_buf();
        let synchronous = match self.synchronous {
            Synchronous::Full => SqliteSynchronous::Full,
            Synchronous::Normal => SqliteSynchronous::Normal,
        };
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(self.busy_timeout.unwrap_or(self.command_timeout));
        let pool = SqlitePoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.command_timeout)
            .connect_with(options)
            .await?;
        // The writer task needs a tokio runtime to run on; without one (a caller polling
        // `open` on another executor) each command commits on its own instead.
        let runtime = tokio::runtime::Handle::try_current().ok();
        let (jobs, queue) = match (&runtime, self.group_commit) {
            (Some(_), true) => {
                let (jobs, queue) = mpsc::unbounded_channel();
                (Some(jobs), Some(queue))
            }
            _ => (None, None),
        };
        let inner = Arc::new(Inner {
            pool,
            sql: Statements::new(&self.table),
            table: self.table,
            path,
            command_timeout: self.command_timeout,
            read_first: self.read_first,
            writer: Arc::new(Mutex::new(())),
            jobs,
            counters: Counters::default(),
        });
        if let (Some(runtime), Some(queue)) = (runtime, queue) {
            runtime.spawn(writer(Arc::downgrade(&inner), queue));
        }
        Ok(SqliteStore { inner })
    }
}

/// The host's clock, in whole milliseconds since the Unix epoch.
fn clock() -> Result<Timestamp, ClockBeforeEpoch> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|_| ClockBeforeEpoch)?;
    let millis = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
    Ok(Timestamp::from_millis(millis))
}

pub(crate) fn unavailable(kind: CommandKind, source: impl Into<BoxError>) -> StoreError {
    StoreError::Unavailable {
        command: kind,
        source: source.into(),
    }
}

/// A pool connection in use by a command: closed rather than handed out again unless the
/// command finished with it (on a timeout, or when the caller drops the command, a
/// transaction may still be open on it; closing it rolls that back).
struct InFlight {
    conn: PoolConnection<Sqlite>,
    answered: bool,
}

impl InFlight {
    fn new(conn: PoolConnection<Sqlite>) -> Self {
        Self {
            conn,
            answered: false,
        }
    }

    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.conn.close_on_drop();
        }
    }
}

impl SqliteStore {
    /// Opens the database file at `path` with the default settings ([`SqliteStoreBuilder`]).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SqliteError> {
        Self::builder().open(path).await
    }

    /// Settings for a store: table, pool size, timeouts, `synchronous`.
    pub fn builder() -> SqliteStoreBuilder {
        SqliteStoreBuilder::default()
    }

    /// The store's clock: the host's wall clock, in milliseconds since the Unix epoch (0
    /// if it reads before 1970, when every command fails). Every process sharing the file
    /// reads the same clock; see MODEL.md, "SQLite (idem-sqlite)", for what a step of it
    /// does to leases.
    pub fn now(&self) -> Timestamp {
        clock().unwrap_or(Timestamp::from_millis(0))
    }

    /// The records table.
    pub fn table(&self) -> &TableName {
        &self.inner.table
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The pool the store runs on: for the service's own reads, and for tests.
    pub fn pool(&self) -> &SqlitePool {
        &self.inner.pool
    }

    /// The command timeout.
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// What the store has counted since it was opened.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        StoreStats {
            commands: c.commands.load(Ordering::Relaxed),
            read_only: c.read_only.load(Ordering::Relaxed),
            write_transactions: c.write_transactions.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            unavailable: c.unavailable.load(Ordering::Relaxed),
            corrupt: c.corrupt.load(Ordering::Relaxed),
            swept: c.swept.load(Ordering::Relaxed),
        }
    }

    /// Creates the records table, its expiry index and the fence counter if they are
    /// missing (all `IF NOT EXISTS`; an existing table is left as it is). Run once at
    /// start-up; safe to run from every process.
    pub async fn migrate(&self) -> Result<(), SqliteError> {
        let timeout = self.inner.command_timeout;
        let _writer = tokio::time::timeout(timeout, self.inner.writer.lock())
            .await
            .map_err(|_| SqliteError::Timeout(timeout))?;
        let migrate =
            sqlx::raw_sql(AssertSqlSafe(self.inner.sql.migrate.clone())).execute(&self.inner.pool);
        tokio::time::timeout(timeout, migrate)
            .await
            .map_err(|_| SqliteError::Timeout(timeout))??;
        Ok(())
    }

    /// Deletes up to `batch` records that expired by the store's clock (they read as
    /// absent already, I9, so no reply changes) and returns how many it deleted. Rows the
    /// adapter did not write are left alone. Call it periodically (or in a loop while it
    /// returns `batch`) to keep the file bounded; deleted pages are reused, the file does
    /// not shrink (`VACUUM` does that).
    pub async fn sweep(&self, batch: u32) -> Result<u64, SqliteError> {
        let timeout = self.inner.command_timeout;
        let sweep = async {
            let _writer = self.inner.writer.lock().await;
            let now = clock().map_err(|_| SqliteError::Clock)?;
            let now = i64::try_from(now.as_millis()).unwrap_or(i64::MAX);
            let done = sqlx::query(AssertSqlSafe(self.inner.sql.sweep.clone()))
                .bind(now)
                .bind(i64::from(batch))
                .execute(&self.inner.pool)
                .await?;
            Ok::<_, SqliteError>(done.rows_affected())
        };
        let removed = tokio::time::timeout(timeout, sweep)
            .await
            .map_err(|_| SqliteError::Timeout(timeout))??;
        self.inner
            .counters
            .swept
            .fetch_add(removed, Ordering::Relaxed);
        Ok(removed)
    }

    /// Applies `command` as [`Store::apply`] does, and also returns the instant of the
    /// store's clock the command was judged by (for a test to step the record machine at
    /// the same instant).
    pub async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let counters = &self.inner.counters;
        counters.commands.fetch_add(1, Ordering::Relaxed);
        let kind = command.kind();
        let timeout = self.inner.command_timeout;
        let result = match tokio::time::timeout(timeout, self.run(operation, key, command)).await {
            Ok(result) => result,
            Err(_) => Err(unavailable(kind, CommandTimeout(timeout))),
        };
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

    /// The command on the pool: a plain read first where it may answer, else one write
    /// transaction.
    async fn run(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let kind = command.kind();
        let pool = &self.inner.pool;
        // A read command is never answered this way: it takes the write lock, so that it
        // waits for a commit in progress (a transactional complete whose reply was lost is
        // settled by a read, which must see that commit's outcome, not the state before it).
        if self.inner.read_first && kind == CommandKind::Reserve {
            let conn = pool
                .acquire()
                .await
                .map_err(|error| unavailable(kind, failed(error)))?;
            let mut conn = InFlight::new(conn);
            let found = self.find(&mut conn.conn, operation, key, kind).await?;
            conn.answered();
            // The clock is read after the row: a record live at this reading was live when
            // the row was read, so the reply is the machine's for that row at an instant
            // after it (a replay's remaining time is at most what it was).
            let now = clock().map_err(|error| unavailable(kind, error))?;
            let record = self.record(found.record, operation, key)?;
            let transition = apply(record.as_ref(), command.clone(), now);
            if transition.write == Write::Unchanged {
                self.inner
                    .counters
                    .read_only
                    .fetch_add(1, Ordering::Relaxed);
                return Ok((transition.reply, now));
            }
        }
        match &self.inner.jobs {
            Some(jobs) => {
                let (reply, replied) = oneshot::channel();
                let job = Job {
                    operation: operation.clone(),
                    key: key.clone(),
                    command,
                    reply,
                };
                jobs.send(job)
                    .map_err(|_| unavailable(kind, WriterStopped))?;
                replied
                    .await
                    .unwrap_or_else(|_| Err(unavailable(kind, WriterStopped)))
            }
            None => self.write_one(operation, key, command).await,
        }
    }

    /// One command in a write transaction of its own (without group commit).
    async fn write_one(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let kind = command.kind();
        let pool = &self.inner.pool;
        let _writer = self.inner.writer.lock().await;
        let conn = pool
            .acquire()
            .await
            .map_err(|error| unavailable(kind, failed(error)))?;
        let mut conn = InFlight::new(conn);
        let mut tx = conn
            .conn
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(|error| unavailable(kind, failed(error)))?;
        match self.apply_in(&mut tx, operation, key, command).await {
            Ok(done) => {
                tx.commit()
                    .await
                    .map_err(|error| unavailable(kind, failed(error)))?;
                conn.answered();
                Ok(done)
            }
            Err(error) => {
                if tx.rollback().await.is_ok() {
                    conn.answered();
                }
                Err(error)
            }
        }
    }

    /// The command inside a write transaction already open on `conn` (the store's own, or
    /// a caller's begun with `BEGIN IMMEDIATE`): reads the row and the fence counter,
    /// reads the clock once, decides with the record machine, writes what it writes. The
    /// caller commits.
    pub(crate) async fn apply_in(
        &self,
        conn: &mut SqliteConnection,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let kind = command.kind();
        self.inner
            .counters
            .write_transactions
            .fetch_add(1, Ordering::Relaxed);
        let found = self.find(conn, operation, key, kind).await?;
        let now = clock().map_err(|error| unavailable(kind, error))?;
        let record = self.record(found.record, operation, key)?;
        let last_fence = found.last_fence;
        let mut granted = None;
        let transition = apply_fenced(record.as_ref(), command, now, || {
            let fence = Fence::next_after(last_fence.as_ref().ok().copied().flatten(), now);
            granted = Some(fence);
            fence
        });
        if granted.is_some()
            && let Err(detail) = last_fence
        {
            return Err(StoreError::Corrupt {
                key: format!("{}_fence", self.inner.table),
                detail,
            });
        }
        let (op, k) = (bytes(operation.as_str()), bytes(key.as_str()));
        let failed_write = |error| unavailable(kind, failed(error));
        match &transition.write {
            Write::Unchanged => {}
            Write::Put(record) => {
                let columns = Columns::of(record)
                    .map_err(|deadline| unavailable(kind, DeadlineOutOfRange(deadline)))?;
                sqlx::query(AssertSqlSafe(self.inner.sql.put.clone()))
                    .bind(op)
                    .bind(k)
                    .bind(columns.state)
                    .bind(columns.owner)
                    .bind(columns.fingerprint)
                    .bind(columns.body)
                    .bind(columns.expires_at)
                    .bind(columns.fence)
                    .execute(&mut *conn)
                    .await
                    .map_err(failed_write)?;
            }
            Write::Delete => {
                sqlx::query(AssertSqlSafe(self.inner.sql.delete.clone()))
                    .bind(op)
                    .bind(k)
                    .execute(&mut *conn)
                    .await
                    .map_err(failed_write)?;
            }
        }
        if let Some(fence) = granted {
            let last = i64::try_from(fence.get()).unwrap_or(i64::MAX);
            sqlx::query(AssertSqlSafe(self.inner.sql.fence.clone()))
                .bind(last)
                .execute(&mut *conn)
                .await
                .map_err(failed_write)?;
        }
        Ok((transition.reply, now))
    }

    async fn find(
        &self,
        conn: &mut SqliteConnection,
        operation: &Operation,
        key: &Key,
        kind: CommandKind,
    ) -> Result<Found, StoreError> {
        let row = sqlx::query(AssertSqlSafe(self.inner.sql.find.clone()))
            .bind(bytes(operation.as_str()))
            .bind(bytes(key.as_str()))
            .fetch_one(&mut *conn)
            .await
            .map_err(|error| unavailable(kind, failed(error)))?;
        Found::from_row(&row).map_err(|error| unavailable(kind, failed(error)))
    }

    /// The found record, or [`StoreError::Corrupt`] naming the row.
    fn record(
        &self,
        found: Result<Option<Record>, String>,
        operation: &Operation,
        key: &Key,
    ) -> Result<Option<Record>, StoreError> {
        found.map_err(|detail| StoreError::Corrupt {
            key: format!("{} ({operation}, {key})", self.inner.table),
            detail,
        })
    }

    /// Runs a batch of queued commands in one write transaction (group commit): each
    /// command reads the state the ones before it left, reads the clock and decides with
    /// the record machine, exactly as alone; the replies are sent only once the transaction
    /// has committed. A command refused as corrupt writes nothing and the others go on; any
    /// other failure rolls the whole batch back and every command in it is answered
    /// unavailable (its outcome unknown to its caller: a commit may have landed).
    async fn write_batch(&self, batch: Vec<Job>) {
        let timeout = self.inner.command_timeout;
        let mut replies = Vec::with_capacity(batch.len());
        let done = tokio::time::timeout(timeout, self.apply_batch(batch, &mut replies)).await;
        let failure: Option<BoxError> = match done {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error),
            Err(_) => Some(Box::new(CommandTimeout(timeout))),
        };
        let shared = failure.map(|error| Arc::new(error.to_string()));
        for (reply, kind, result) in replies {
            let result = match &shared {
                None => result,
                Some(error) => Err(unavailable(kind, BatchFailed(Arc::clone(error)))),
            };
            let _ = reply.send(result);
        }
    }

    async fn apply_batch(
        &self,
        batch: Vec<Job>,
        replies: &mut Vec<(oneshot::Sender<Answer>, CommandKind, Answer)>,
    ) -> Result<(), BoxError> {
        let not_run = |kind| Err(unavailable(kind, WriterStopped));
        let _writer = self.inner.writer.lock().await;
        let conn = self.inner.pool.acquire().await.map_err(failed);
        let mut pending = Vec::new();
        for job in batch {
            let kind = job.command.kind();
            pending.push((job, kind));
        }
        let conn = match conn {
            Ok(conn) => conn,
            Err(error) => {
                for (job, kind) in pending {
                    replies.push((job.reply, kind, not_run(kind)));
                }
                return Err(error);
            }
        };
        let mut conn = InFlight::new(conn);
        let mut tx = match conn.conn.begin_with("BEGIN IMMEDIATE").await {
            Ok(tx) => tx,
            Err(error) => {
                for (job, kind) in pending {
                    replies.push((job.reply, kind, not_run(kind)));
                }
                return Err(failed(error));
            }
        };
        let mut failure = None;
        for (job, kind) in pending {
            if failure.is_some() || job.reply.is_closed() {
                // The caller is gone (its deadline passed): it was told the outcome is
                // unknown, and the command is not applied.
                replies.push((job.reply, kind, not_run(kind)));
                continue;
            }
            let result = self
                .apply_in(&mut tx, &job.operation, &job.key, job.command)
                .await;
            if let Err(StoreError::Unavailable { source, .. }) = &result {
                failure = Some(source.to_string());
            }
            replies.push((job.reply, kind, result));
        }
        if let Some(failure) = failure {
            if tx.rollback().await.is_ok() {
                conn.answered();
            }
            return Err(failure.into());
        }
        tx.commit().await.map_err(failed)?;
        conn.answered();
        self.inner.counters.batches.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// What a command is answered.
type Answer = Result<(Reply, Timestamp), StoreError>;

/// The most commands one group commit takes.
pub const MAX_BATCH: usize = 64;

/// A command queued for the store's writer.
pub(crate) struct Job {
    operation: Operation,
    key: Key,
    command: Command,
    reply: oneshot::Sender<Answer>,
}

/// The store's writer: takes the commands queued since its last commit (up to
/// [`MAX_BATCH`]) and runs them in one write transaction. It holds the store only while
/// it runs a batch, so it ends once every handle to the store is gone.
async fn writer(store: Weak<Inner>, mut jobs: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let Some(inner) = store.upgrade() else {
            return;
        };
        SqliteStore { inner }.write_batch(batch).await;
    }
}

/// The store's writer task did not answer the command: its batch was cut off by the
/// command timeout, or the task is gone (the runtime it was started on shut down).
#[derive(Debug, thiserror::Error)]
#[error(
    "the store's writer did not answer (its batch timed out, or its runtime shut down); the command may have been applied"
)]
pub(crate) struct WriterStopped;

/// Another command's failure rolled back the group commit this command was in.
#[derive(Debug, thiserror::Error)]
#[error("the group commit this command was in failed: {0}")]
pub(crate) struct BatchFailed(Arc<String>);

impl SqliteStore {}

fn bytes(name: &str) -> Vec<u8> {
    name.as_bytes().to_vec()
}

impl Store for SqliteStore {
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
