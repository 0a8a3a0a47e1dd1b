//! Effects that commit with the record (MODEL.md, "Effects that commit with the record"):
//! the action's writes and the record's complete in one InnoDB transaction.
//!
//! [`in_transaction`] reserves the key as any call does (the reserve commits on its own, so
//! an identical request that arrives meanwhile waits or is told 409), then begins a
//! transaction on the store's transaction pool at READ COMMITTED and hands it to the
//! action. The action makes its writes in it and hands it back uncommitted with its value.
//! The attempt's complete then runs inside that transaction ([`RecordTransaction`]): it
//! locks the record's row (`SELECT … FOR UPDATE`), reads the server's clock after the lock,
//! decides with the record machine, writes, and the transaction commits only if the record
//! machine recorded the result ([`idem_core::record::commits`]).

use std::future::Future;
use std::ops::{Deref, DerefMut};

use idem::{
    Answer, BoxError, Claim, Codec, Error, OperationHandle, StoreError, Transaction,
    TransactionalStore,
};
use idem_core::record::{Command, Reply, commits};
use idem_core::{Fingerprint, Key, Operation};
use sqlx::{MySql, MySqlConnection};

use crate::error::{CommandTimeout, MySqlError, failed};
use crate::store::{MySqlStore, Scope};

/// The transaction an action receives and hands back.
pub type MySqlTransaction = sqlx::Transaction<'static, MySql>;

/// What [`MySqlStore::begin`] runs on the connection before `BEGIN`: the session's
/// isolation level READ COMMITTED, whatever the server's default.
///
/// **Why READ COMMITTED.** The record's complete reads the row with a locking read, which
/// sees the newest committed version at every InnoDB level; but at REPEATABLE READ with
/// MariaDB's `innodb_snapshot_isolation` (on by default from 11.8) a locking read of a row
/// committed after the transaction's snapshot fails (`ER_CHECKREAD`), and the lease's own
/// renewals commit that row while the action runs: the complete would fail and the writes
/// roll back. READ COMMITTED also takes no gap locks, so the action's writes and the
/// record's statements do not deadlock on ranges. A transaction at another level is
/// refused by the complete before it writes anything.
pub const SET_ISOLATION: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// An action's open transaction, with the store whose record completes inside it: the
/// [`Transaction`] the driver routes the attempt's complete into.
///
/// [`MySqlStore::begin`] begins one (as [`in_transaction`] does); wrap one begun elsewhere
/// with [`MySqlStore::transaction`]. It must be an InnoDB transaction on the store's own
/// database, on a session at READ COMMITTED (`@@tx_isolation`), else its complete is
/// refused before anything is written (reported as
/// [`StoreError::Unavailable`](idem::StoreError::Unavailable), the transaction rolled
/// back).
///
/// It dereferences to the connection of its transaction, so it is a `sqlx` executor as it
/// is: `&mut *tx`. Its writes commit only with the record; it has no `commit` of its own,
/// and dropped it rolls back.
#[derive(Debug)]
pub struct RecordTransaction {
    store: MySqlStore,
    transaction: MySqlTransaction,
}

impl MySqlStore {
    /// Wraps an open transaction of this store's database so that the record's complete
    /// joins it (see [`RecordTransaction`]).
    pub fn transaction(&self, transaction: MySqlTransaction) -> RecordTransaction {
        RecordTransaction {
            store: self.clone(),
            transaction,
        }
    }

    /// Begins a transaction for an action's writes at READ COMMITTED ([`SET_ISOLATION`],
    /// then `BEGIN`), which the record's complete will join; on the
    /// [transaction pool](MySqlStore::transaction_pool). The complete checks the level again
    /// (`@@tx_isolation`), for a transaction begun elsewhere.
    pub async fn begin(&self) -> Result<RecordTransaction, MySqlError> {
        let mut conn = self.transaction_pool().acquire().await?;
        sqlx::query(SET_ISOLATION).execute(&mut *conn).await?;
        let transaction = sqlx::Transaction::begin(conn, None).await?;
        Ok(self.transaction(transaction))
    }
}

impl TransactionalStore for MySqlStore {
    type Transaction = RecordTransaction;

    /// [`MySqlStore::begin`], its error boxed.
    async fn begin(&self) -> Result<RecordTransaction, BoxError> {
        Ok(MySqlStore::begin(self).await?)
    }
}

impl RecordTransaction {
    /// The transaction, to make more writes in it before it is handed back.
    pub fn get_mut(&mut self) -> &mut MySqlTransaction {
        &mut self.transaction
    }

    /// The transaction itself, taken out: it no longer carries the record.
    pub fn into_inner(self) -> MySqlTransaction {
        self.transaction
    }
}

impl Deref for RecordTransaction {
    type Target = MySqlConnection;

    fn deref(&self) -> &MySqlConnection {
        &self.transaction
    }
}

impl DerefMut for RecordTransaction {
    fn deref_mut(&mut self) -> &mut MySqlConnection {
        &mut self.transaction
    }
}

impl Transaction for RecordTransaction {
    /// Runs the complete inside the transaction (the row locked until the transaction
    /// ends), then commits if the reply recorded the result, and rolls back otherwise. A
    /// failed statement rolls back; a failed commit is reported as unavailable (the commit
    /// may or may not have landed; the attempt reads the record, and that read waits for
    /// the row's lock).
    async fn complete(
        self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        let RecordTransaction {
            store,
            mut transaction,
        } = self;
        let timeout = store.command_timeout();
        let applied = store.apply_on(&mut transaction, Scope::Caller, &operation, &key, &command);
        let applied = match tokio::time::timeout(timeout, applied).await {
            Ok(applied) => applied,
            Err(_) => Err(StoreError::unavailable(&command, CommandTimeout(timeout))),
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
                    return store.count(Err(StoreError::unavailable(&command, failed(error))));
                }
                Err(_) => {
                    return store.count(Err(StoreError::unavailable(
                        &command,
                        CommandTimeout(timeout),
                    )));
                }
            }
        } else {
            // A failed rollback leaves nothing committed either: the server rolls the
            // transaction back when its connection ends.
            let _ = transaction.rollback().await;
        }
        Ok(reply)
    }
}

/// Runs `action` once for the request `fingerprint` describes under `key`, its writes
/// committed together with the record of its result, or not at all.
///
/// The key is reserved first (committed on its own). The action then receives its
/// [`Claim`] and a transaction begun by [`MySqlStore::begin`] (READ COMMITTED), makes its
/// writes in it, and returns its value with the transaction, uncommitted. The record's
/// complete runs in that transaction, which commits only if the record is still this
/// call's. A replay returns the stored value without running `action`. An action that
/// fails, or panics, has its transaction rolled back and gives the key back; a call whose
/// key was taken over after its lease ran out commits nothing and ends
/// [`Error::RolledBack`]. A transaction that cannot be begun is the action's failure
/// (`E::from`).
///
/// ```no_run
/// # async fn demo(url: &str) -> Result<(), Box<dyn std::error::Error>> {
/// use idem::{Coordinator, Fingerprint, Options};
/// use idem_mysql::{MySqlStore, in_transaction};
///
/// let store = MySqlStore::connect(url).await?;
/// store.migrate().await?;
/// let orders = Coordinator::new(store, Options::default())
///     .operation::<u64, sqlx::Error>("order.create")?;
/// let fingerprint = Fingerprint::builder().field("cart", "c-1").finish()?;
/// let id = in_transaction(&orders, "key-1", fingerprint, |_claim, mut tx| async move {
///     let done = sqlx::query("INSERT INTO orders (cart) VALUES ('c-1')")
///         .execute(&mut *tx)
///         .await?;
///     Ok((done.last_insert_id(), tx))
/// })
/// .await?;
/// # let _ = id;
/// # Ok(())
/// # }
/// ```
pub async fn in_transaction<T, E, C, F, Fut>(
    operation: &OperationHandle<MySqlStore, T, E, C>,
    key: impl AsRef<str>,
    fingerprint: Fingerprint,
    action: F,
) -> Result<T, Error<E>>
where
    T: Send + 'static,
    E: From<sqlx::Error> + Send + 'static,
    C: Codec<T> + Clone,
    F: FnOnce(Claim, MySqlTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(T, MySqlTransaction), E>> + Send + 'static,
{
    in_transaction_with_provenance(operation, key, fingerprint, action)
        .await
        .map(|answer| answer.value)
}

/// As [`in_transaction`], and says where the value came from (executed here, replayed).
pub async fn in_transaction_with_provenance<T, E, C, F, Fut>(
    operation: &OperationHandle<MySqlStore, T, E, C>,
    key: impl AsRef<str>,
    fingerprint: Fingerprint,
    action: F,
) -> Result<Answer<T>, Error<E>>
where
    T: Send + 'static,
    E: From<sqlx::Error> + Send + 'static,
    C: Codec<T> + Clone,
    F: FnOnce(Claim, MySqlTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(T, MySqlTransaction), E>> + Send + 'static,
{
    let store = MySqlStore::clone(operation.coordinator().store());
    operation
        .execute_in_transaction(key, fingerprint, move |claim| async move {
            let transaction = match store.begin().await {
                Ok(tx) => tx.into_inner(),
                Err(MySqlError::Database(error)) => return Err(E::from(error)),
                Err(other) => return Err(E::from(sqlx::Error::Protocol(other.to_string()))),
            };
            let (value, transaction) = action(claim, transaction).await?;
            Ok((value, store.transaction(transaction)))
        })
        .await
}
