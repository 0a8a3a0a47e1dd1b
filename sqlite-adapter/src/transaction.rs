//! Effects that commit with the record (MODEL.md, "Effects that commit with the record",
//! rule T1): the action's writes and the record's complete in one SQLite transaction.
//!
//! [`in_transaction`] reserves the key as any call does (the reserve commits on its own, so
//! an identical request that arrives meanwhile waits or is told 409), then begins a
//! transaction with **`BEGIN IMMEDIATE`** and hands it to the action. The action makes its
//! writes in it and hands it back uncommitted with its value. The attempt's complete then
//! runs inside that transaction ([`RecordTransaction`]): it reads the record's row, checks
//! at the host's clock that the record is still this call's reservation, and the
//! transaction commits only if the record machine recorded the result
//! ([`idem_core::record::commits`]).
//!
//! # Why `BEGIN IMMEDIATE`, and what it costs
//!
//! SQLite has one writer per file. A deferred transaction (`BEGIN`) that reads first and
//! writes later must upgrade its lock at the first write; if any other connection
//! committed in between (another call's reserve, or this very call's lease renewal) the
//! upgrade fails at once with `SQLITE_BUSY` (a stale snapshot cannot be written from), and
//! waiting does not help. `BEGIN IMMEDIATE` takes the write lock at the start, so the
//! action's writes and the complete can never fail that way, and the record cannot change
//! under the open transaction.
//!
//! The cost: while the action runs, **it holds the file's one write lock**. Every other
//! write to the file waits: other calls' reserves of free keys, completes, releases, and
//! this call's own lease renewals, which fail after the command timeout. That is harmless
//! to this call (nobody can take its key over without writing, and a complete after the
//! lease's end with the record still this call's is recorded, `AfterLeaseExpiry`), but it
//! stalls everyone else: a transactional action must be short, well under the command
//! timeout, or other calls' reserves fail as unavailable (and fail open or closed as their
//! options say). Replays are not held up: they are answered from plain reads, which WAL
//! lets run beside the writer.

use std::future::Future;
use std::ops::{Deref, DerefMut};

use idem::{
    Answer, BoxError, Claim, Codec, Error, OperationHandle, StoreError, Transaction,
    TransactionalStore,
};
use idem_core::record::{Command, Reply, commits};
use idem_core::{Fingerprint, Key, Operation};
use sqlx::{Sqlite, SqliteConnection};
use tokio::sync::OwnedMutexGuard;

use crate::error::{CommandTimeout, failed};
use crate::store::{SqliteStore, unavailable};

/// An action's open `BEGIN IMMEDIATE` transaction, with the store whose record completes
/// inside it: the [`Transaction`] the driver routes the attempt's complete into.
///
/// It holds the store's in-process writer lock and SQLite's write lock until it ends. It
/// dereferences to the connection of its transaction, so it is a `sqlx` executor as it is
/// (`&mut *tx`). Its writes commit only with the record; it has no `commit` of its own,
/// and dropped it rolls back.
pub struct RecordTransaction {
    store: SqliteStore,
    transaction: sqlx::Transaction<'static, Sqlite>,
    // Dropped after the transaction (fields drop in order): the next writer of this
    // process starts only once this transaction has ended.
    _writer: OwnedMutexGuard<()>,
}

impl std::fmt::Debug for RecordTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordTransaction")
            .field("store", &self.store.path())
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Begins a `BEGIN IMMEDIATE` transaction for an action's writes, which the record's
    /// complete will join: waits for this process's writer lock (up to the command
    /// timeout; past it, an I/O error of kind `TimedOut`) and then for SQLite's write
    /// lock (up to the busy timeout).
    pub async fn begin(&self) -> Result<RecordTransaction, sqlx::Error> {
        let timeout = self.inner.command_timeout;
        let writer = tokio::time::timeout(timeout, self.inner.writer.clone().lock_owned())
            .await
            .map_err(|_| {
                sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("this process's writer lock was not free within {timeout:?}"),
                ))
            })?;
        let transaction = self.inner.pool.begin_with("BEGIN IMMEDIATE").await?;
        Ok(RecordTransaction {
            store: self.clone(),
            transaction,
            _writer: writer,
        })
    }
}

impl TransactionalStore for SqliteStore {
    type Transaction = RecordTransaction;

    /// [`SqliteStore::begin`], its error boxed.
    async fn begin(&self) -> Result<RecordTransaction, BoxError> {
        Ok(SqliteStore::begin(self).await?)
    }
}

impl Deref for RecordTransaction {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.transaction
    }
}

impl DerefMut for RecordTransaction {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.transaction
    }
}

impl Transaction for RecordTransaction {
    /// Runs the complete inside the transaction, then commits if the reply recorded the
    /// result, and rolls back otherwise. A failed statement rolls back; a failed or late
    /// commit is reported as unavailable (the commit may or may not have landed; the
    /// attempt reads the record).
    async fn complete(
        self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let RecordTransaction {
            store,
            mut transaction,
            _writer,
        } = self;
        let kind = command.kind();
        let timeout = store.command_timeout();
        let applied = store.apply_in(&mut transaction, &operation, &key, command);
        let applied = match tokio::time::timeout(timeout, applied).await {
            Ok(applied) => applied,
            Err(_) => Err(unavailable(kind, CommandTimeout(timeout))),
        };
        let reply = match store.count(applied) {
            Ok((reply, _)) => reply,
            // Dropping the transaction rolls it back.
            Err(error) => return Err(error),
        };
        if commits(&reply) {
            match tokio::time::timeout(timeout, transaction.commit()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    return store.count(Err(unavailable(kind, failed(error))));
                }
                Err(_) => {
                    return store.count(Err(unavailable(kind, CommandTimeout(timeout))));
                }
            }
        } else {
            // A failed rollback leaves nothing committed either: SQLite rolls an open
            // transaction back when its connection closes.
            let _ = transaction.rollback().await;
        }
        drop(_writer);
        Ok(reply)
    }
}

/// Runs `action` once for the request `fingerprint` describes under `key`, its writes
/// committed together with the record of its result, or not at all.
///
/// The key is reserved first (committed on its own). The action then receives its
/// [`Claim`] and a [`RecordTransaction`] ([`SqliteStore::begin`], `BEGIN IMMEDIATE`),
/// makes its writes in it, and returns its value with the transaction, uncommitted. The
/// record's complete runs in that transaction, which commits only if the record is still
/// this call's. A replay returns the stored value without running `action`. An action
/// that fails, or panics, has its transaction rolled back and gives the key back. A
/// transaction that cannot be begun is the action's failure (`E::from`). While the action
/// runs it holds the file's one write lock: keep it short (see the module docs).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem::{Coordinator, Fingerprint, Options};
/// use idem_sqlite::{SqliteStore, in_transaction};
///
/// let store = SqliteStore::open("shop.db").await?;
/// store.migrate().await?;
/// let orders = Coordinator::new(store, Options::default())
///     .operation::<i64, sqlx::Error>("order.create")?;
/// let fingerprint = Fingerprint::builder().field("cart", "c-1").finish()?;
/// let id = in_transaction(&orders, "key-1", fingerprint, |_claim, mut tx| async move {
///     let id: i64 = sqlx::query_scalar("INSERT INTO orders (cart) VALUES ('c-1') RETURNING id")
///         .fetch_one(&mut *tx)
///         .await?;
///     Ok((id, tx))
/// })
/// .await?;
/// # let _ = id;
/// # Ok(())
/// # }
/// ```
pub async fn in_transaction<T, E, C, F, Fut>(
    operation: &OperationHandle<SqliteStore, T, E, C>,
    key: impl AsRef<str>,
    fingerprint: Fingerprint,
    action: F,
) -> Result<T, Error<E>>
where
    T: Send + 'static,
    E: From<sqlx::Error> + Send + 'static,
    C: Codec<T> + Clone,
    F: FnOnce(Claim, RecordTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(T, RecordTransaction), E>> + Send + 'static,
{
    in_transaction_with_provenance(operation, key, fingerprint, action)
        .await
        .map(|answer| answer.value)
}

/// As [`in_transaction`], and says where the value came from (executed here, replayed).
pub async fn in_transaction_with_provenance<T, E, C, F, Fut>(
    operation: &OperationHandle<SqliteStore, T, E, C>,
    key: impl AsRef<str>,
    fingerprint: Fingerprint,
    action: F,
) -> Result<Answer<T>, Error<E>>
where
    T: Send + 'static,
    E: From<sqlx::Error> + Send + 'static,
    C: Codec<T> + Clone,
    F: FnOnce(Claim, RecordTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(T, RecordTransaction), E>> + Send + 'static,
{
    let store = SqliteStore::clone(operation.coordinator().store());
    operation
        .execute_in_transaction(key, fingerprint, move |claim| async move {
            let transaction = store.begin().await?;
            action(claim, transaction).await
        })
        .await
}
