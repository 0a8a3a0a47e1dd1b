//! Effects that commit with the record (MODEL.md, "Effects that commit with the record"):
//! the action's writes and the record's complete in one PostgreSQL transaction.
//!
//! [`in_transaction`] reserves the key as any call does (the reserve commits on its own, so
//! an identical request that arrives meanwhile waits or is told 409), then begins a
//! transaction on the store's transaction pool and hands it to the action. The action makes its writes
//! in it and hands it back uncommitted with its value. The attempt's complete then runs
//! inside that transaction ([`RecordTransaction`]): it locks the record's row, checks on
//! the server's clock that the record is still this call's reservation, and the
//! transaction commits only if the record machine recorded the result
//! ([`idem_core::record::commits`]). A call whose lease ran out and whose key was taken over
//! commits nothing and gets [`Error::RolledBack`](idem::Error::RolledBack); a failed or
//! panicking action's transaction is rolled back and the key given back.

use std::future::Future;
use std::ops::{Deref, DerefMut};

use idem::{
    Answer, BoxError, Claim, Codec, Error, OperationHandle, StoreError, Transaction,
    TransactionalStore,
};
use idem_core::record::{Command, Reply, commits};
use idem_core::{Fingerprint, Key, Operation};
use sqlx::{PgConnection, Postgres};

use crate::error::{CommandTimeout, failed};
use crate::store::PostgresStore;

/// The transaction an action receives and hands back.
pub type PgTransaction = sqlx::Transaction<'static, Postgres>;

/// How [`in_transaction`] begins the action's transaction: READ COMMITTED, whatever the
/// server's default, because the complete's single-row statement must see the newest
/// committed version of the record (see MODEL.md, section "PostgreSQL").
pub const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED";

/// An action's open transaction, with the store whose record completes inside it: the
/// [`Transaction`] the driver routes the attempt's complete into.
///
/// [`PostgresStore::begin`] begins one (as [`in_transaction`] and idem-http's layer do);
/// wrap one begun elsewhere with [`PostgresStore::transaction`] for
/// [`OperationHandle::execute_in_transaction`]. It must be a transaction on the store's own
/// database, at READ COMMITTED.
///
/// It dereferences to the connection of its transaction, so it is a `sqlx` executor as it
/// is: `&mut *tx` where you hold it, `&mut **tx` through a guard that dereferences to it
/// (idem-http's `Tx` extractor). Its writes commit only with the record; it has no
/// `commit` of its own, and dropped it rolls back.
///
/// ```no_run
/// # async fn demo(store: idem_postgres::PostgresStore) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = store.begin().await?;
/// let id: i64 = sqlx::query_scalar("INSERT INTO orders (cart) VALUES ($1) RETURNING id")
///     .bind("c-1")
///     .fetch_one(&mut *tx)
///     .await?;
/// # let _ = id;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RecordTransaction {
    store: PostgresStore,
    transaction: PgTransaction,
}

impl PostgresStore {
    /// Wraps an open transaction of this store's database so that the record's complete
    /// joins it (see [`RecordTransaction`]).
    pub fn transaction(&self, transaction: PgTransaction) -> RecordTransaction {
        RecordTransaction {
            store: self.clone(),
            transaction,
        }
    }

    /// Begins a transaction for an action's writes ([`BEGIN`]: READ COMMITTED), which the
    /// record's complete will join. This is where every action's transaction is begun
    /// ([`in_transaction`], and [`TransactionalStore::begin`] for code generic over the
    /// store): on the [transaction pool](PostgresStore::transaction_pool), so an action's
    /// transaction, held until the action ends, never takes a connection the store's own
    /// statements need (the renewals of its lease among them).
    pub async fn begin(&self) -> Result<RecordTransaction, sqlx::Error> {
        let transaction = self.transaction_pool().begin_with(BEGIN).await?;
        Ok(self.transaction(transaction))
    }
}

impl TransactionalStore for PostgresStore {
    type Transaction = RecordTransaction;

    /// [`PostgresStore::begin`], its error boxed.
    async fn begin(&self) -> Result<RecordTransaction, BoxError> {
        Ok(PostgresStore::begin(self).await?)
    }
}

impl RecordTransaction {
    /// The transaction, to make more writes in it before it is handed back.
    pub fn get_mut(&mut self) -> &mut PgTransaction {
        &mut self.transaction
    }

    /// The transaction itself, taken out: it no longer carries the record.
    pub fn into_inner(self) -> PgTransaction {
        self.transaction
    }
}

impl Deref for RecordTransaction {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.transaction
    }
}

impl DerefMut for RecordTransaction {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.transaction
    }
}

impl Transaction for RecordTransaction {
    /// Runs the complete's statement inside the transaction (the row locked until the
    /// transaction ends), then commits if the reply recorded the result, and rolls back
    /// otherwise. A failed statement rolls back; a failed commit is reported as
    /// unavailable (the commit may or may not have landed; the attempt reads the record).
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
        let applied = store.apply_on(&mut transaction, &operation, &key, &command);
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
/// [`Claim`] and a transaction begun on the store's transaction pool ([`BEGIN`]), makes its writes in
/// it, and returns its value with the transaction, uncommitted. The record's complete runs
/// in that transaction, which commits only if the record is still this call's. A replay
/// returns the stored value without running `action`. An action that fails, or panics,
/// has its transaction rolled back and gives the key back; a call whose key was taken over
/// after its lease ran out commits nothing and ends [`Error::RolledBack`]. A transaction
/// that cannot be begun is the action's failure (`E::from`).
///
/// The transaction runs on the store's [transaction pool](PostgresStore::transaction_pool),
/// apart from the pool of the store's own statements, so that actions holding their
/// transactions never starve their leases' renewals; its connections keep the server's
/// `statement_timeout`. How many run at once is bounded by that pool
/// ([`PostgresStoreBuilder::transaction_connections`](crate::PostgresStoreBuilder::transaction_connections),
/// which says how to size both).
///
/// ```no_run
/// # async fn demo(url: &str) -> Result<(), Box<dyn std::error::Error>> {
/// use idem::{Coordinator, Fingerprint, Options};
/// use idem_postgres::{PostgresStore, in_transaction};
///
/// let store = PostgresStore::connect(url).await?;
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
    operation: &OperationHandle<PostgresStore, T, E, C>,
    key: impl AsRef<str>,
    fingerprint: Fingerprint,
    action: F,
) -> Result<T, Error<E>>
where
    T: Send + 'static,
    E: From<sqlx::Error> + Send + 'static,
    C: Codec<T> + Clone,
    F: FnOnce(Claim, PgTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(T, PgTransaction), E>> + Send + 'static,
{
    in_transaction_with_provenance(operation, key, fingerprint, action)
        .await
        .map(|answer| answer.value)
}

/// As [`in_transaction`], and says where the value came from (executed here, replayed).
pub async fn in_transaction_with_provenance<T, E, C, F, Fut>(
    operation: &OperationHandle<PostgresStore, T, E, C>,
    key: impl AsRef<str>,
    fingerprint: Fingerprint,
    action: F,
) -> Result<Answer<T>, Error<E>>
where
    T: Send + 'static,
    E: From<sqlx::Error> + Send + 'static,
    C: Codec<T> + Clone,
    F: FnOnce(Claim, PgTransaction) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(T, PgTransaction), E>> + Send + 'static,
{
    let store = PostgresStore::clone(operation.coordinator().store());
    operation
        .execute_in_transaction(key, fingerprint, move |claim| async move {
            let transaction = store.begin().await?.into_inner();
            let (value, transaction) = action(claim, transaction).await?;
            Ok((value, store.transaction(transaction)))
        })
        .await
}
