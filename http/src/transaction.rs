//! The request's transaction, when the layer owns it ([`IdempotencyLayerBuilder::in_transaction`]):
//! the layer begins it once the key is reserved, lends it to the handler through the
//! request's extensions ([`Tx`]), takes it back with the response, and commits it with the
//! record, or drops it (which rolls it back).
//!
//! The loan is a slot shared by the layer and the request: the handler's [`Tx`] takes the
//! transaction out and puts it back when it is dropped; the layer closes the slot once the
//! response is read. A transaction still out then (the handler moved its `Tx` into a task
//! that outlived the response) is never waited for and never committed: the layer treats
//! the request as failed, and the transaction rolls back whenever that task drops it.
//!
//! [`IdempotencyLayerBuilder::in_transaction`]: crate::IdempotencyLayerBuilder::in_transaction

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError};

use http::Extensions;
use idem::{AnyTransaction, Transaction};

/// Where the transaction is, for the layer and the handler.
enum Place<T> {
    /// In the slot: not taken yet, or given back.
    Here(T),
    /// Taken by the handler's [`Tx`].
    Out,
    /// The layer took it back (or gave up on it): a [`Tx`] dropped now drops its
    /// transaction, which rolls back.
    Closed,
}

/// The slot the layer puts in the request's extensions.
pub(crate) struct Slot<T>(Arc<Mutex<Place<T>>>);

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Slot<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Place<T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A transaction lent to one request, its type erased for the layer.
pub(crate) trait Loan: Send {
    /// Puts the transaction where the handler's [`Tx`] finds it.
    fn lend(&self, extensions: &mut Extensions);

    /// Takes the transaction back and closes the slot: `None` if the handler still holds
    /// it (it rolls back when the handler drops it).
    fn take_back(self: Box<Self>) -> Option<AnyTransaction>;
}

impl<T: Transaction> Slot<T> {
    pub(crate) fn new(transaction: T) -> Self {
        Self(Arc::new(Mutex::new(Place::Here(transaction))))
    }
}

impl<T: Transaction> Loan for Slot<T> {
    fn lend(&self, extensions: &mut Extensions) {
        extensions.insert(self.clone());
    }

    fn take_back(self: Box<Self>) -> Option<AnyTransaction> {
        match std::mem::replace(&mut *self.lock(), Place::Closed) {
            Place::Here(transaction) => Some(AnyTransaction::new(transaction)),
            Place::Out | Place::Closed => None,
        }
    }
}

/// The request's transaction, lent by an [`IdempotencyLayer`](crate::IdempotencyLayer) that
/// owns it ([`in_transaction`](crate::IdempotencyLayerBuilder::in_transaction)): the
/// handler's writes made on it commit together with the record of the request's response
/// (MODEL.md, rule `T1`), or not at all.
///
/// `T` is the store's transaction type (on PostgreSQL, `idem_postgres::RecordTransaction`,
/// which dereferences to its connection: `&mut **tx` is a `sqlx` executor). A `Tx`
/// dereferences to `T`; it has no commit of its own, because the layer commits it with the
/// record once the response is known:
///
/// - a response the layer records ([`Disposition::Record`](crate::Disposition::Record)):
///   the writes commit with the record, and every retry is answered that response;
/// - a response it would release or record as unknown
///   ([`Disposition::Release`](crate::Disposition::Release),
///   [`Disposition::Unknown`](crate::Disposition::Unknown)), a failure without a response
///   or a panic: the writes roll back and the key is released, since nothing happened.
///
/// Keep it inside the handler: a `Tx` moved into a task that outlives the response is not
/// waited for; the layer logs an error, answers 500 and releases the key, and the
/// transaction rolls back when the task drops it. Take it once per request.
///
/// With axum it is an extractor (`tx: Tx<RecordTransaction>`), rejected with a 500 problem
/// marked [`Disposition::Release`](crate::Disposition::Release) (nothing ran) when the
/// request has no transaction to lend: the route is not under a layer that owns one, the
/// request is one the layer does not cover (another method), or the transaction was taken
/// already. Without axum, take it with [`Tx::take`].
pub struct Tx<T> {
    transaction: Option<T>,
    slot: Slot<T>,
}

impl<T: Send + 'static> Tx<T> {
    /// Takes the request's transaction from its extensions (what the axum extractor does),
    /// or says why there is none.
    pub fn take(extensions: &Extensions) -> Result<Self, TxUnavailable> {
        let slot = extensions.get::<Slot<T>>().ok_or(TxUnavailable::NotLent)?;
        let mut place = slot.lock();
        match std::mem::replace(&mut *place, Place::Out) {
            Place::Here(transaction) => Ok(Self {
                transaction: Some(transaction),
                slot: slot.clone(),
            }),
            taken @ (Place::Out | Place::Closed) => {
                *place = taken;
                Err(TxUnavailable::Taken)
            }
        }
    }
}

impl<T> Deref for Tx<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // Present from `take` until `drop`.
        self.transaction
            .as_ref()
            .unwrap_or_else(|| unreachable!("a Tx holds its transaction until it is dropped"))
    }
}

impl<T> DerefMut for Tx<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.transaction
            .as_mut()
            .unwrap_or_else(|| unreachable!("a Tx holds its transaction until it is dropped"))
    }
}

impl<T> Drop for Tx<T> {
    fn drop(&mut self) {
        let Some(transaction) = self.transaction.take() else {
            return;
        };
        let mut place = self.slot.lock();
        if matches!(*place, Place::Out) {
            *place = Place::Here(transaction);
        } else {
            drop(place);
            tracing::error!(
                "the request's transaction was kept past the response; it is rolled back, \
                 and the request was answered as failed"
            );
            drop(transaction);
        }
    }
}

impl<T> fmt::Debug for Tx<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("transaction", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}

/// Why a request has no transaction for its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxUnavailable {
    /// No layer lent one of this type: the route is not under a layer that owns its
    /// transaction, or the request is not one the layer covers.
    #[error(
        "no transaction was lent to this request: the route is not under an idempotency layer \
         that owns its transaction, or the layer does not cover this request"
    )]
    NotLent,
    /// The handler took it already (a second extractor), or the layer took it back.
    #[error("the request's transaction was taken already")]
    Taken,
}

#[cfg(feature = "axum")]
mod extract {
    use axum::extract::FromRequestParts;
    use axum::response::{IntoResponse, Response};
    use http::request::Parts;

    use super::{Tx, TxUnavailable};
    use crate::problem::Problem;

    impl<S: Send + Sync, T: Send + 'static> FromRequestParts<S> for Tx<T> {
        type Rejection = TxUnavailable;

        async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, TxUnavailable> {
            Tx::take(&parts.extensions)
        }
    }

    impl IntoResponse for TxUnavailable {
        /// 500 [`Internal`](crate::ProblemType::Internal), marked
        /// [`Disposition::Release`](crate::Disposition::Release): the handler never ran, so
        /// nothing happened.
        fn into_response(self) -> Response {
            Problem::handler_not_run(&self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem::record::{Command, Reply};
    use idem::{Key, Operation, StoreError};

    /// A transaction that says when it is dropped.
    struct Probe(Arc<Mutex<Vec<&'static str>>>, &'static str);

    impl Drop for Probe {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(self.1);
        }
    }

    impl Transaction for Probe {
        async fn complete(self, _: Operation, _: Key, _: Command) -> Result<Reply, StoreError> {
            Ok(Reply::Read(None))
        }
    }

    fn lent(log: &Arc<Mutex<Vec<&'static str>>>) -> (Box<dyn Loan>, Extensions) {
        let slot: Box<dyn Loan> = Box::new(Slot::new(Probe(Arc::clone(log), "dropped")));
        let mut extensions = Extensions::new();
        slot.lend(&mut extensions);
        (slot, extensions)
    }

    #[test]
    fn a_transaction_given_back_is_taken_back_once() {
        let log = Arc::default();
        let (slot, extensions) = lent(&log);
        let tx = Tx::<Probe>::take(&extensions).unwrap();
        assert_eq!(
            Tx::<Probe>::take(&extensions).unwrap_err(),
            TxUnavailable::Taken
        );
        drop(tx);
        assert!(log.lock().unwrap().is_empty(), "given back, not dropped");
        let back = slot.take_back();
        assert!(back.is_some());
        assert_eq!(
            Tx::<Probe>::take(&extensions).unwrap_err(),
            TxUnavailable::Taken,
            "closed once taken back"
        );
        drop(back);
        assert_eq!(*log.lock().unwrap(), ["dropped"]);
    }

    #[test]
    fn a_transaction_kept_past_the_response_is_not_taken_back_and_drops_with_its_holder() {
        let log = Arc::default();
        let (slot, extensions) = lent(&log);
        let kept = Tx::<Probe>::take(&extensions).unwrap();
        assert!(slot.take_back().is_none());
        assert!(log.lock().unwrap().is_empty());
        drop(kept);
        assert_eq!(
            *log.lock().unwrap(),
            ["dropped"],
            "rolled back by its holder"
        );
    }

    #[test]
    fn a_transaction_never_taken_is_taken_back_and_another_type_is_not_lent() {
        let log = Arc::default();
        let (slot, extensions) = lent(&log);
        assert_eq!(
            Tx::<String>::take(&extensions).unwrap_err(),
            TxUnavailable::NotLent
        );
        assert!(slot.take_back().is_some());
        assert_eq!(*log.lock().unwrap(), ["dropped"]);
    }
}
