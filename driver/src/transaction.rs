//! Transactional calls: an action whose effect is writes in the store's own database, made
//! in a transaction that the record's complete joins (MODEL.md, "Effects that commit with the
//! record"). The store applies the complete inside the transaction and commits only if the
//! record machine recorded the result ([`idem_core::record::commits`]); a holder that lost its key
//! cannot commit, so its writes roll back and the effect happens once, by the holder that
//! took over.
//!
//! A store crate provides the [`Transaction`] (idem-postgres: a `sqlx` transaction); the
//! driver routes the attempt's complete into it instead of sending it to the store. A store
//! that can begin such a transaction itself implements [`TransactionalStore`], so that code
//! generic over the store (idem-http's layer, which owns each request's transaction) can
//! begin one without knowing the database; [`AnyTransaction`] carries a transaction whose
//! type such code does not name.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation};

use crate::store::{BoxError, Store, StoreError};

/// An open transaction of the store's database, holding the action's uncommitted writes.
pub trait Transaction: Send + 'static {
    /// Applies `command` (the attempt's complete of `key` under `operation`) inside this
    /// transaction, then commits if [`idem_core::record::commits`] says the reply recorded the result,
    /// and rolls back otherwise; returns the reply.
    ///
    /// [`StoreError::Unavailable`] means the outcome is unknown: the transaction may or may
    /// not have committed (the attempt then reads the record to learn which). A transaction
    /// dropped without this call must roll back.
    fn complete(
        self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send + 'static;
}

/// A [`Store`] that can begin a [`Transaction`] of its own database, for a call whose action
/// writes in that database and commits with the record (rule `T1`).
///
/// The transaction must be one the store's complete can join: on the store's database, at an
/// isolation level its statements are written for (idem-postgres: READ COMMITTED). Its
/// writes commit only through [`Transaction::complete`]; dropped without it, it rolls back.
/// Where it is begun (the store's own connections, or a pool kept for actions) is the
/// store's choice, made here and nowhere else.
pub trait TransactionalStore: Store {
    /// The transaction [`begin`](Self::begin) opens.
    type Transaction: Transaction;

    /// Begins a transaction for one call's action. An error means nothing was begun, and
    /// nothing can have been written.
    fn begin(&self) -> impl Future<Output = Result<Self::Transaction, BoxError>> + Send + '_;
}

/// A [`Transaction`] of any type, for code that hands a transaction on without naming its
/// type (a layer generic over the store). Completing it completes the transaction inside;
/// dropping it drops that one, which rolls back.
pub struct AnyTransaction(Box<dyn DynTransaction>);

impl AnyTransaction {
    /// Wraps `transaction`.
    pub fn new(transaction: impl Transaction) -> Self {
        Self(Box::new(transaction))
    }
}

impl std::fmt::Debug for AnyTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnyTransaction")
    }
}

impl Transaction for AnyTransaction {
    fn complete(
        self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send + 'static {
        self.0.complete_boxed(operation, key, command)
    }
}

pub(crate) type Completing = Pin<Box<dyn Future<Output = Result<Reply, StoreError>> + Send>>;

/// A [`Transaction`] of any type.
trait DynTransaction: Send {
    fn complete_boxed(
        self: Box<Self>,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Completing;
}

impl<T: Transaction> DynTransaction for T {
    fn complete_boxed(
        self: Box<Self>,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Completing {
        Box::pin((*self).complete(operation, key, command))
    }
}

/// Where a transactional action leaves its open transaction for the call to complete.
#[derive(Clone, Default)]
pub(crate) struct TransactionSlot(Arc<Mutex<Option<Box<dyn DynTransaction>>>>);

impl std::fmt::Debug for TransactionSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransactionSlot")
    }
}

impl TransactionSlot {
    pub(crate) fn put(&self, transaction: impl Transaction) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(transaction));
    }

    /// The complete of the transaction left here, if there is one.
    pub(crate) fn complete(
        &self,
        operation: Operation,
        key: Key,
        command: Command,
    ) -> Option<Completing> {
        let transaction = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        Some(transaction.complete_boxed(operation, key, command))
    }
}
