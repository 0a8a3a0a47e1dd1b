//! The claim an action receives: which key it runs under, and whether it still holds it.

use std::future::Future;

use idem_core::{Key, Operation, OwnerToken};
use tokio::sync::watch;

/// The state of the reservation an action runs under, as the driver last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseStatus {
    /// The lease is confirmed to last past now; renewals keep it so.
    Held,
    /// The last confirmed lease has run out on the caller's clock and no renewal has been
    /// confirmed since (the store is slow or unreachable): the key may have been taken over.
    Unconfirmed,
    /// The store refused a renewal: another caller may run the action too (`I7`'s
    /// exception). An action that can still stop its effect should.
    Lost,
    /// The store could not be reached and the policy is `FailOpen`: the action runs without
    /// a reservation.
    Unprotected,
}

/// What an action knows about the reservation it runs under.
///
/// The action gets the key so that it can pass it on to a downstream provider with its own
/// idempotency (a payment provider's idempotency key), which protects the effect even in the
/// cases idem reports but cannot prevent (MODEL.md, "Non-guarantees").
#[derive(Debug, Clone)]
pub struct Claim {
    operation: Operation,
    key: Key,
    owner: OwnerToken,
    lease: watch::Receiver<LeaseStatus>,
}

impl Claim {
    pub(crate) fn new(
        operation: Operation,
        key: Key,
        owner: OwnerToken,
        lease: watch::Receiver<LeaseStatus>,
    ) -> Self {
        Self {
            operation,
            key,
            owner,
            lease,
        }
    }

    /// The idempotency key the action runs under.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The operation the key is scoped to.
    pub fn operation(&self) -> &Operation {
        &self.operation
    }

    /// This attempt's owner token (`I2`).
    pub fn owner(&self) -> OwnerToken {
        self.owner
    }

    /// The reservation's state now.
    pub fn lease(&self) -> LeaseStatus {
        *self.lease.borrow()
    }

    /// Whether the store refused a renewal: the key may be another caller's now.
    pub fn is_lease_lost(&self) -> bool {
        self.lease() == LeaseStatus::Lost
    }

    /// Whether the action runs under a reservation (false when the store failed open).
    pub fn is_protected(&self) -> bool {
        self.lease() != LeaseStatus::Unprotected
    }

    /// A future that resolves when the lease is lost, for an action that selects over its
    /// work and this. It never resolves if the lease is kept (or the action runs
    /// unprotected), including after the call is over.
    ///
    /// ```
    /// use idem::{Claim, Coordinator, Fingerprint, MemoryStore, Options};
    ///
    /// async fn export(claim: Claim) -> Result<u32, &'static str> {
    ///     tokio::select! {
    ///         // Another caller may take the key over: stop before a second effect.
    ///         () = claim.lease_lost() => Err("lease lost; export abandoned"),
    ///         rows = async { 1_000 } => Ok(rows),
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
    /// let fp = Fingerprint::of_bytes(b"export 2026-12");
    /// let rows = coordinator.execute("report.export", "2026-12", fp, export).await;
    /// assert_eq!(rows.unwrap(), 1_000);
    /// # }
    /// ```
    pub fn lease_lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut lease = self.lease.clone();
        async move {
            if lease
                .wait_for(|status| *status == LeaseStatus::Lost)
                .await
                .is_err()
            {
                // The call is over and the lease was not lost: nothing will change now.
                std::future::pending::<()>().await;
            }
        }
    }
}
