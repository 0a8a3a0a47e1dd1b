//! The claim an action receives: which key it runs under, and whether it still holds it.

use std::future::Future;

use idem_core::{Key, LeaseState, Operation, OwnerToken};
use tokio::sync::watch;
use tokio::time::Instant;

/// What the driver last learned of the action's reservation: the attempt machine's state,
/// and the instant (tokio's clock) until which the lease is confirmed. The claim judges
/// "held" against the clock at the moment it is asked, so an action that was paused past
/// its lease sees the lease unconfirmed at once, not the state published before the pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseView {
    pub(crate) state: LeaseState,
    pub(crate) confirmed_until: Option<Instant>,
}

impl LeaseView {
    fn at(&self, now: Instant) -> LeaseState {
        match self.state {
            LeaseState::Held | LeaseState::Unconfirmed => match self.confirmed_until {
                Some(until) if now < until => LeaseState::Held,
                _ => LeaseState::Unconfirmed,
            },
            other => other,
        }
    }
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
    lease: watch::Receiver<LeaseView>,
}

impl Claim {
    pub(crate) fn new(
        operation: Operation,
        key: Key,
        owner: OwnerToken,
        lease: watch::Receiver<LeaseView>,
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

    /// The reservation's state now: [`Held`](LeaseState::Held) only while the last
    /// confirmed lease lasts past this very instant, [`Unconfirmed`](LeaseState::Unconfirmed)
    /// once it has run out without a confirmed renewal (the key may have been taken over),
    /// [`Lost`](LeaseState::Lost) once the store refused a renewal, and
    /// [`Unprotected`](LeaseState::Unprotected) when the store failed open. Ask it right
    /// before an effect that must not happen twice.
    pub fn lease(&self) -> LeaseState {
        self.lease.borrow().at(Instant::now())
    }

    /// Whether the store refused a renewal: the key may be another caller's now.
    pub fn is_lease_lost(&self) -> bool {
        self.lease() == LeaseState::Lost
    }

    /// Whether the action runs under a reservation (false when the store failed open).
    pub fn is_protected(&self) -> bool {
        self.lease() != LeaseState::Unprotected
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
                .wait_for(|view| view.state == LeaseState::Lost)
                .await
                .is_err()
            {
                // The call is over and the lease was not lost: nothing will change now.
                std::future::pending::<()>().await;
            }
        }
    }
}
