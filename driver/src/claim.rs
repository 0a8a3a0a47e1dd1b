//! The claim an action receives: which key it runs under, and whether it still holds it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_core::{DownstreamKey, Fence, Key, LeaseState, Operation, OwnerToken};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What the driver last learned of the action's reservation: the attempt machine's state,
/// and the instant (tokio's clock) until which the lease is confirmed, as the machine
/// counts it (MODEL.md, "Counting the lease on the caller's clock": from the confirming
/// command's send, less a margin, so that it ends before the store's lease). The claim
/// judges "held" against the clock at the moment it is asked, so an action that was paused
/// past its lease sees the lease unconfirmed at once, not the state published before the
/// pause; the machine decides the instant, the claim only compares it with the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseView {
    pub(crate) state: LeaseState,
    /// `None` while held: confirmed past any instant a tokio timer can hold.
    pub(crate) confirmed_until: Option<Instant>,
}

impl LeaseView {
    fn at(&self, now: Instant) -> LeaseState {
        match self.state {
            LeaseState::Held | LeaseState::Unconfirmed => match self.turns_at() {
                Some(until) if now >= until => LeaseState::Unconfirmed,
                _ => LeaseState::Held,
            },
            other => other,
        }
    }

    /// The instant this view stops saying `Held`, while it may say so.
    fn turns_at(&self) -> Option<Instant> {
        match self.state {
            LeaseState::Held | LeaseState::Unconfirmed => self.confirmed_until,
            _ => None,
        }
    }

    /// Whether the lease is no longer confirmed at `now`: unconfirmed, or lost.
    fn lapsed_at(&self, now: Instant) -> bool {
        matches!(self.at(now), LeaseState::Unconfirmed | LeaseState::Lost)
    }
}

/// The lease view shared between a running call, which publishes what its attempt knows, and
/// the claims of its action, which read it when asked and wait on its changes.
///
/// A mutex around a small copyable value and one [`Notify`]: the call publishes a handful of
/// times per action and the claim reads when its action asks, so neither side contends, and
/// a change wakes only a `lease_lost` future that waits. Closed when the call stops
/// publishing (the action returned): the lease then no longer matters to the action.
#[derive(Debug)]
struct LeaseCell {
    view: Mutex<LeaseView>,
    changed: Notify,
    closed: AtomicBool,
}

impl LeaseCell {
    fn get(&self) -> LeaseView {
        // A poisoned lock still holds a whole `LeaseView` (a copy is written in one step).
        *self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The call's end of a claim's lease view: what it publishes, every claim made from it sees.
/// Dropping it closes the view.
#[derive(Debug)]
pub(crate) struct LeasePublisher(Arc<LeaseCell>);

impl LeasePublisher {
    /// A view starting at `view`, and the publisher that moves it.
    pub(crate) fn new(view: LeaseView) -> Self {
        Self(Arc::new(LeaseCell {
            view: Mutex::new(view),
            changed: Notify::new(),
            closed: AtomicBool::new(false),
        }))
    }

    /// Replaces the view with `view` and wakes the waiters if it moved; returns the view it
    /// replaced.
    pub(crate) fn publish(&self, view: LeaseView) -> LeaseView {
        let before = {
            let mut current = self.0.view.lock().unwrap_or_else(PoisonError::into_inner);
            std::mem::replace(&mut *current, view)
        };
        if before != view {
            self.0.changed.notify_waiters();
        }
        before
    }

    fn cell(&self) -> Arc<LeaseCell> {
        Arc::clone(&self.0)
    }
}

impl Drop for LeasePublisher {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Release);
        self.0.changed.notify_waiters();
    }
}

/// What an action knows about the reservation it runs under.
///
/// The action gets its [`downstream_key`](Self::downstream_key) to pass on to a provider with
/// its own idempotency (a payment provider's `Idempotency-Key`), which protects the effect
/// even in the cases idem reports but cannot prevent (MODEL.md, `D1` and "Non-guarantees"),
/// and its [`fence`](Self::fence) to pass on to a provider that orders writes, which then
/// refuses a stale holder's write once a newer holder's has landed (MODEL.md `F1`).
#[derive(Debug, Clone)]
pub struct Claim {
    operation: Operation,
    key: Key,
    owner: OwnerToken,
    fence: Option<Fence>,
    lease: Arc<LeaseCell>,
}

impl Claim {
    pub(crate) fn new(
        operation: Operation,
        key: Key,
        owner: OwnerToken,
        fence: Option<Fence>,
        lease: &LeasePublisher,
    ) -> Self {
        Self {
            operation,
            key,
            owner,
            fence,
            lease: lease.cell(),
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

    /// The key to send to the provider this action calls, as that provider's idempotency key
    /// (MODEL.md `D1`): the same on every attempt of this (operation, key), whichever process
    /// makes it and whether or not the store answered (a takeover after a lost lease, a run
    /// under `FailOpen`, a run after the record expired), and different for every other
    /// operation or tenant. Derived here, with no store round trip; see [`DownstreamKey`] for
    /// its two renderings.
    ///
    /// A provider that deduplicates by it turns the extra effects idem can only report
    /// (`I7`) into replays at the provider.
    pub fn downstream_key(&self) -> DownstreamKey {
        DownstreamKey::derive(&self.operation, &self.key)
    }

    /// The fence of this attempt's grant (MODEL.md `F1`): greater than the fence of every
    /// earlier grant of this key, so a provider that keeps, per key, the highest fence it has
    /// applied and refuses a write whose fence is not above it refuses this holder's writes
    /// once a holder that took the key over has written, and never the newer holder's.
    ///
    /// `None` when the action runs unprotected (fail-open: there is no grant), and on a store
    /// that hands out no fences (MODEL.md, "Which stores hand out fences"). A fence orders
    /// holders; it does not deduplicate: a stale holder's write that lands *before* the newer
    /// holder's is accepted. Pair it with the [`downstream_key`](Self::downstream_key).
    pub fn fence(&self) -> Option<Fence> {
        self.fence
    }

    /// This attempt's owner token (`I2`).
    pub fn owner(&self) -> OwnerToken {
        self.owner
    }

    /// The reservation's state now: [`Held`](LeaseState::Held) only while the last
    /// confirmed lease lasts past this very instant, [`Unconfirmed`](LeaseState::Unconfirmed)
    /// once it has run out without a confirmed renewal (the key may be taken over soon, or
    /// already), [`Lost`](LeaseState::Lost) once the store refused a renewal, and
    /// [`Unprotected`](LeaseState::Unprotected) when the store failed open. Ask it right
    /// before an effect that must not happen twice.
    ///
    /// The confirmed lease is counted on this process's clock from when the renewal that
    /// confirmed it was sent, less 1% and 5 ms ([`idem_core::confirmed_lease`]): `Held`
    /// turns to `Unconfirmed` before the store can free the key, by construction (MODEL.md
    /// says by how much), whether or not the store still answers.
    pub fn lease(&self) -> LeaseState {
        self.lease.get().at(Instant::now())
    }

    /// How long the lease is confirmed to last from now: zero once it is unconfirmed or
    /// lost, `None` when the action runs unprotected (fail-open: there is no lease). An
    /// action about to start a step that must not be cut by a takeover can check that the
    /// step fits; the lease is renewed meanwhile while the store answers, so this grows
    /// back after each confirmed renewal. It reaches zero at the instant [`lease`](Self::lease)
    /// turns from `Held`.
    pub fn lease_left(&self) -> Option<Duration> {
        let view = self.lease.get();
        let now = Instant::now();
        match view.at(now) {
            LeaseState::Held => Some(
                view.turns_at()
                    .map_or(Duration::MAX, |until| until.saturating_duration_since(now)),
            ),
            LeaseState::Unconfirmed | LeaseState::Lost => Some(Duration::ZERO),
            LeaseState::Unprotected | LeaseState::NotRunning => None,
        }
    }

    /// Whether the lease is no longer confirmed: [`lease`](Self::lease) says
    /// [`Unconfirmed`](LeaseState::Unconfirmed) or [`Lost`](LeaseState::Lost). The key may
    /// be another caller's now. This is what [`lease_lost`](Self::lease_lost) waits for.
    pub fn is_lease_lost(&self) -> bool {
        self.lease.get().lapsed_at(Instant::now())
    }

    /// Whether the action runs under a reservation (false when the store failed open).
    pub fn is_protected(&self) -> bool {
        self.lease() != LeaseState::Unprotected
    }

    /// A future that resolves when the lease can no longer be confirmed, for an action that
    /// selects over its work and this: at the instant the last confirmed lease runs out on
    /// this process's clock (the same instant that turns [`lease`](Self::lease) from `Held`;
    /// the future wakes at the first tick of tokio's millisecond timer at or after it), or
    /// when the store refuses a renewal, whichever comes first. It does not wait for the
    /// store to answer: a store that stops answering (a partition, a paused server) no
    /// longer confirms the lease, and the future resolves before the store can free the key.
    ///
    /// It never resolves while renewals keep the lease confirmed, when the action runs
    /// unprotected, or once the action has returned. A renewal confirmed after it resolved
    /// (a slow store) makes [`lease`](Self::lease) say `Held` again: the store still held
    /// the key then.
    ///
    /// ```
    /// use idem::{Claim, Coordinator, Fingerprint, MemoryStore, Options};
    ///
    /// async fn export(claim: Claim) -> Result<u32, &'static str> {
    ///     tokio::select! {
    ///         // The lease is no longer confirmed, and another caller may take the key
    ///         // over: stop before a second effect.
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
        let lease = Arc::clone(&self.lease);
        async move {
            loop {
                // Made before the look, so that a change published after it wakes the wait.
                let changed = lease.changed.notified();
                if lease.closed.load(Ordering::Acquire) {
                    // The action returned: its lease no longer matters.
                    std::future::pending::<()>().await;
                }
                let view = lease.get();
                if view.lapsed_at(Instant::now()) {
                    return;
                }
                let turn = view.turns_at();
                tokio::select! {
                    biased;
                    () = changed => {}
                    () = async {
                        match turn {
                            Some(until) => tokio::time::sleep_until(until).await,
                            None => std::future::pending().await,
                        }
                    } => {}
                }
            }
        }
    }
}
