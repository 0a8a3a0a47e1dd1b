//! [`OperationHandle`]: one operation of a coordinator, its name validated once and its value
//! and error types fixed.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

use idem_core::{Fingerprint, Operation, OperationError};

use crate::answer::Answer;
use crate::claim::Claim;
use crate::codec::{Codec, Json};
use crate::coordinator::Coordinator;
use crate::ending::Ending;
use crate::error::Error;
use crate::store::Store;

/// One operation of a [`Coordinator`]: every call through it is scoped to the same
/// operation, returns `T` and fails with `E`, and stores its value with the codec `C`.
///
/// Made by [`Coordinator::operation`]. Cloning is cheap. Fixing the types here is what lets
/// an action be written without annotations, and the name being checked once means a typo
/// fails at start-up rather than opening a second key space silently.
///
/// ```
/// use idem::{Coordinator, Fingerprint, MemoryStore, Options};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Serialize, Deserialize)]
/// struct Charge { id: String }
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("card declined")]
/// struct Declined;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let payments = Coordinator::new(MemoryStore::new(), Options::default());
/// let charges = payments.operation::<Charge, Declined>("payment.charge")?;
/// // Tenants never share records, and their keys are kept as sent.
/// let alice = charges.for_tenant("alice")?;
/// let fingerprint = Fingerprint::builder().field("amount", 100).finish()?;
/// let charge = alice
///     .execute("key-1", fingerprint, |claim| async move {
///         Ok(Charge { id: format!("ch_for_{}", claim.key()) })
///     })
///     .await?;
/// assert_eq!(charge.id, "ch_for_key-1");
/// # Ok(())
/// # }
/// ```
///
/// An outcome that is not a failure (a declined card is the answer to the request, and a
/// retry must get the same answer) belongs in `T`, so that it is recorded and replayed; `E`
/// is for failures a retry may cure, which are never recorded (`I5`).
pub struct OperationHandle<S, T, E, C = Json> {
    coordinator: Coordinator<S>,
    operation: Operation,
    codec: C,
    types: PhantomData<fn() -> (T, E)>,
}

impl<S, T, E, C: Clone> Clone for OperationHandle<S, T, E, C> {
    fn clone(&self) -> Self {
        Self {
            coordinator: self.coordinator.clone(),
            operation: self.operation.clone(),
            codec: self.codec.clone(),
            types: PhantomData,
        }
    }
}

impl<S, T, E, C> fmt::Debug for OperationHandle<S, T, E, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperationHandle")
            .field("operation", &self.operation)
            .field("value", &std::any::type_name::<T>())
            .field("error", &std::any::type_name::<E>())
            .field("codec", &std::any::type_name::<C>())
            .finish()
    }
}

impl<S: Store, T, E, C: Codec<T> + Clone> OperationHandle<S, T, E, C> {
    pub(crate) fn new(coordinator: Coordinator<S>, operation: Operation, codec: C) -> Self {
        Self {
            coordinator,
            operation,
            codec,
            types: PhantomData,
        }
    }

    /// The operation's name, as it scopes keys in the store.
    pub fn name(&self) -> &Operation {
        &self.operation
    }

    /// The coordinator the calls go through.
    pub fn coordinator(&self) -> &Coordinator<S> {
        &self.coordinator
    }

    /// The same operation, scoped to one tenant: two tenants' identical keys name two
    /// records ([`Operation::for_tenant`]).
    pub fn for_tenant(&self, tenant: impl AsRef<[u8]>) -> Result<Self, OperationError> {
        Ok(Self::new(
            self.coordinator.clone(),
            self.operation.for_tenant(tenant)?,
            self.codec.clone(),
        ))
    }

    /// The same operation, its values stored with `codec`.
    pub fn with_codec<D: Codec<T> + Clone>(self, codec: D) -> OperationHandle<S, T, E, D> {
        OperationHandle::new(self.coordinator, self.operation, codec)
    }

    /// As [`Coordinator::execute`], for this operation: detached, so dropping the returned
    /// future never stops an action that started.
    pub async fn execute<F, Fut>(
        &self,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<T, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.execute_with_provenance(key, fingerprint, action)
            .await
            .map(|answer| answer.value)
    }

    /// As [`Coordinator::execute_with_provenance`], for this operation.
    pub async fn execute_with_provenance<F, Fut>(
        &self,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        self.coordinator
            .detached(
                self.operation.clone(),
                key.as_ref(),
                fingerprint,
                self.codec.clone(),
                action,
            )
            .await
    }

    /// As [`Coordinator::execute_in_transaction`], for this operation: the action returns its
    /// value with its open [`Transaction`](crate::Transaction), and the record's complete
    /// commits with it.
    pub async fn execute_in_transaction<Tx, F, Fut>(
        &self,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        Tx: crate::Transaction,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(T, Tx), E>> + Send + 'static,
    {
        self.coordinator
            .transactional(
                self.operation.clone(),
                key.as_ref(),
                fingerprint,
                self.codec.clone(),
                action,
            )
            .await
    }

    /// As [`execute_with_provenance`](Self::execute_with_provenance), for an action that
    /// can say its effect is unknown: it returns an [`Ending`], and
    /// [`Ending::Unknown`] is recorded as "outcome unknown" (never released, rule 11) and
    /// answered [`Error::ActionUnknown`]. Detached, as every `execute`.
    ///
    /// ```
    /// use idem::{Coordinator, Ending, Error, Fingerprint, MemoryStore, Options};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let payments = Coordinator::new(MemoryStore::new(), Options::default());
    /// let charges = payments.operation::<String, &'static str>("payment.charge")?;
    /// let fp = Fingerprint::builder().field("amount", 100).finish()?;
    ///
    /// // The provider's reply never came: the card may have been charged.
    /// let first = charges
    ///     .execute_with_ending("key-1", fp, |_claim| async { Ending::Unknown("provider timed out") })
    ///     .await;
    /// assert!(matches!(first, Err(Error::ActionUnknown("provider timed out"))));
    ///
    /// // The retry is not run again: its outcome is the first one's, unknown.
    /// let retry = charges
    ///     .execute_with_ending("key-1", fp, |_claim| async { Ending::Succeeded("ch_2".to_owned()) })
    ///     .await;
    /// assert!(matches!(retry, Err(Error::OutcomeUnknown)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn execute_with_ending<F, Fut>(
        &self,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Ending<T, E>> + Send + 'static,
    {
        self.coordinator
            .detached(
                self.operation.clone(),
                key.as_ref(),
                fingerprint,
                self.codec.clone(),
                action,
            )
            .await
    }

    /// As [`execute_in_transaction`](Self::execute_in_transaction), for an action that
    /// returns an [`Ending`]: `Succeeded((value, transaction))` commits with the record;
    /// [`Failed`](Ending::Failed) and [`Unknown`](Ending::Unknown) both drop the
    /// transaction, which rolls the writes back, so nothing happened and the key is
    /// released ([`Error::Action`]).
    pub async fn execute_in_transaction_with_ending<Tx, F, Fut>(
        &self,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        Tx: crate::Transaction,
        F: FnOnce(Claim) -> Fut + Send + 'static,
        Fut: Future<Output = Ending<(T, Tx), E>> + Send + 'static,
    {
        self.coordinator
            .transactional(
                self.operation.clone(),
                key.as_ref(),
                fingerprint,
                self.codec.clone(),
                action,
            )
            .await
    }

    /// As [`Coordinator::execute_attached`], for this operation: the action may borrow, and
    /// a drop mid-action leaves the key to its lease.
    pub async fn execute_attached<F, Fut>(
        &self,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<T, Error<E>>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.execute_attached_with_provenance(key, fingerprint, action)
            .await
            .map(|answer| answer.value)
    }

    /// As [`Coordinator::execute_attached_with_provenance`], for this operation.
    pub async fn execute_attached_with_provenance<F, Fut>(
        &self,
        key: impl AsRef<str>,
        fingerprint: Fingerprint,
        action: F,
    ) -> Result<Answer<T>, Error<E>>
    where
        F: FnOnce(Claim) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.coordinator
            .attached(
                self.operation.clone(),
                key.as_ref(),
                fingerprint,
                self.codec.clone(),
                action,
            )
            .await
    }
}
