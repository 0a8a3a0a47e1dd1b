//! The detached actions of one coordinator: how many run, a bound on them, and a graceful
//! stop that lets them finish and record up to a deadline and reports the ones it cuts.
//!
//! A detached action outlives its caller on purpose (a client that hangs up must not stop a
//! charge half-way). That makes two things a service must be able to see and bound: how many
//! run now (a client that mints keys and hangs up on a slow endpoint leaves each running),
//! and what happens to them when the service stops (a rolling deploy). The bound is checked
//! when an action is about to start, after its key was reserved: an action over the bound is
//! never started and its reservation is released, so the answer, [`Error::Overloaded`], means
//! that nothing ran. [`Coordinator::shutdown`](crate::Coordinator::shutdown) refuses new calls
//! ([`Error::ShuttingDown`]), waits for running actions to end and be recorded, and at its
//! deadline cuts the rest: their keys stay held until their leases end (never released, rule
//! 11), and each is counted and logged.
//!
//! [`Error::Overloaded`]: crate::Error::Overloaded
//! [`Error::ShuttingDown`]: crate::Error::ShuttingDown

use std::future::{Future, poll_fn};
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;

/// The detached actions a coordinator allows at once by default.
pub const DEFAULT_MAX_DETACHED: usize = 4096;

/// What a [`Coordinator::shutdown`](crate::Coordinator::shutdown) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Detached actions that were running when the stop began and ended by themselves
    /// (recorded, or released on failure) before the deadline.
    pub finished: usize,
    /// Detached actions still running at the deadline, cut: each key stays held until its
    /// lease ends, then an identical request takes it over (MODEL.md, `I7`'s
    /// `left_to_lease`). Counted in [`MetricsSnapshot::shutdown_cut`](crate::MetricsSnapshot::shutdown_cut).
    pub cut: usize,
}

/// The shared state of one coordinator's detached actions.
#[derive(Debug)]
pub(crate) struct Detached {
    limit: usize,
    running: AtomicUsize,
    closing: AtomicBool,
    /// Told each time the last running action ends while closing.
    drained: Notify,
    /// Set once the stop's deadline passed: every running action is cut.
    cut: AtomicBool,
    /// The wakers of the tasks running detached actions, woken by the cut.
    parked: Mutex<Parked>,
}

/// The wakers of the tasks running detached actions, one entry per [`Slot`] that has waited.
///
/// A slot puts its task's waker here the first time it waits and again only when its task
/// changes (a rest moved to a task of its own), and takes its entry out when dropped: two
/// short locks a call, where a wait on a shared notification would lock at every poll.
#[derive(Debug, Default)]
struct Parked {
    wakers: Vec<Option<Waker>>,
    /// Entries whose slot was dropped, to be used again.
    free: Vec<usize>,
}

impl Parked {
    /// Keeps `waker` in entry `at`, or in a new entry when there is none, and returns where,
    /// and the waker it replaced (for the caller to drop outside the lock).
    fn keep(&mut self, at: Option<usize>, waker: Waker) -> (usize, Option<Waker>) {
        if let Some(at) = at
            && let Some(entry) = self.wakers.get_mut(at)
        {
            return (at, entry.replace(waker));
        }
        match self.free.pop() {
            Some(at) => {
                self.wakers[at] = Some(waker);
                (at, None)
            }
            None => {
                self.wakers.push(Some(waker));
                (self.wakers.len() - 1, None)
            }
        }
    }

    /// Gives up entry `at`, and returns its waker for the caller to drop outside the lock.
    /// The entry stays in the list, free for the next slot: an index a slot holds is valid
    /// until the slot gives it up.
    fn remove(&mut self, at: usize) -> Option<Waker> {
        let waker = self.wakers.get_mut(at)?.take();
        self.free.push(at);
        waker
    }

    /// Every waker kept, taken out (their entries stay their slots').
    fn take_all(&mut self) -> Vec<Waker> {
        self.wakers.iter_mut().filter_map(Option::take).collect()
    }
}

/// Why an action could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// As many detached actions as allowed are running.
    Overloaded,
    /// The coordinator is stopping.
    ShuttingDown,
}

impl Detached {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            running: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            drained: Notify::new(),
            cut: AtomicBool::new(false),
            parked: Mutex::new(Parked::default()),
        }
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Parked> {
        // Nothing panics while holding the lock; a poisoned one holds whole entries.
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The detached actions running now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// A place for one more action, or why there is none.
    pub(crate) fn enter(self: &Arc<Self>) -> Result<Slot, Refused> {
        if self.is_closing() {
            return Err(Refused::ShuttingDown);
        }
        let mut running = self.running.load(Ordering::Relaxed);
        loop {
            if running >= self.limit {
                return Err(Refused::Overloaded);
            }
            match self.running.compare_exchange_weak(
                running,
                running + 1,
                Ordering::SeqCst,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => running = now,
            }
        }
        let slot = Slot {
            detached: Arc::clone(self),
            parked: None,
        };
        // A stop that began between the first look and the count: it may have seen no action
        // running, so this one must not start (the slot's drop gives the place back).
        if self.is_closing() {
            return Err(Refused::ShuttingDown);
        }
        Ok(slot)
    }

    /// Refuses new calls, waits up to `deadline` for running actions to end, then cuts the
    /// rest and waits for them to be dropped.
    pub(crate) async fn shutdown(&self, deadline: Duration) -> ShutdownReport {
        self.closing.store(true, Ordering::SeqCst);
        let at_start = self.running();
        let drained = async {
            loop {
                let notified = self.drained.notified();
                if self.running() == 0 {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(deadline, drained).await.is_ok() {
            return ShutdownReport {
                finished: at_start,
                cut: 0,
            };
        }
        let cut = self.running();
        // The flag is set under the wakers' lock: a slot registers either before, and is
        // woken here, or after, and reads the flag under the lock (`Slot::poll_cut`).
        let parked = {
            let mut parked = self.parked();
            self.cut.store(true, Ordering::SeqCst);
            parked.take_all()
        };
        for waker in parked {
            waker.wake();
        }
        // A cut action is dropped at its task's next poll; the runtime's end drops the rest.
        let dropped = async {
            loop {
                let notified = self.drained.notified();
                if self.running() == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), dropped).await;
        ShutdownReport {
            finished: at_start.saturating_sub(cut),
            cut,
        }
    }
}

/// One running detached action's place: given back when the action's task ends.
#[derive(Debug)]
pub(crate) struct Slot {
    detached: Arc<Detached>,
    /// This slot's entry among the parked wakers, and the waker kept there.
    parked: Option<(usize, Waker)>,
}

impl Slot {
    /// Resolves when the stop's deadline passes with this action still running.
    pub(crate) fn cut(&mut self) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| self.poll_cut(cx))
    }

    fn poll_cut(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let detached = &*self.detached;
        if detached.cut.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        if matches!(&self.parked, Some((_, kept)) if kept.will_wake(cx.waker())) {
            // Kept already: the cut wakes it.
            return Poll::Pending;
        }
        // Registered, or registered again for the task that polls it now.
        let waker = cx.waker().clone();
        let entry = self.parked.as_ref().map(|(at, _)| *at);
        let (at, replaced) = {
            let mut parked = detached.parked();
            // Read again under the lock the cut sets it under: cut already, or woken by it.
            if detached.cut.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            parked.keep(entry, waker.clone())
        };
        // The replaced waker and the one this slot kept are dropped outside the lock.
        drop(replaced);
        self.parked = Some((at, waker));
        Poll::Pending
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((at, _)) = self.parked.take() {
            let waker = self.detached.parked().remove(at);
            drop(waker);
        }
        let before = self.detached.running.fetch_sub(1, Ordering::SeqCst);
        if before == 1 && self.detached.is_closing() {
            self.detached.drained.notify_waiters();
        }
    }
}

/// The rest of a detached call from its action's start: polled in the caller's future while
/// the caller waits for it, and moved whole to a task of its own on the runtime the call began
/// on if that future is dropped first (a client that hung up, a request timeout).
///
/// The caller's wait and the call are one task while both are wanted, which spares each call a
/// spawn, a cross-thread wake and a join; the guarantee is the one a spawn at the start gives:
/// the action and its recording run to their end whatever becomes of the caller. The move is
/// a pointer's: `rest` is boxed, so nothing held across its awaits is moved. A future polled
/// again on a new task registers its wakers anew (the `Future` contract), so nothing it
/// waits for is lost in the move.
///
/// A panic out of `rest` (not the action's, which the call catches and records: a bug of this
/// crate or of a store) is resumed in the caller, and `rest` is dropped then, never moved: a
/// future that panicked must not be polled again.
pub(crate) struct Detaching<F: Future<Output: Send + 'static> + Send + 'static> {
    rest: Option<Pin<Box<F>>>,
    runtime: Handle,
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Detaching<F> {
    /// `rest`, to be run in the caller's future, or on a task of its own on `runtime` once
    /// the caller's future is dropped.
    pub(crate) fn new(rest: Pin<Box<F>>, runtime: Handle) -> Self {
        Self {
            rest: Some(rest),
            runtime,
        }
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Future for Detaching<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(rest) = self.rest.as_mut() else {
            // Polled after it returned its output: a caller's bug, answered by never resolving.
            return Poll::Pending;
        };
        match panic::catch_unwind(AssertUnwindSafe(|| rest.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                self.rest = None;
                Poll::Ready(output)
            }
            Err(payload) => {
                self.rest = None;
                panic::resume_unwind(payload)
            }
        }
    }
}

impl<F: Future<Output: Send + 'static> + Send + 'static> Drop for Detaching<F> {
    fn drop(&mut self) {
        let Some(rest) = self.rest.take() else {
            return;
        };
        // On a runtime that is shutting down the task is dropped at once, as a task spawned
        // earlier would have been: the call's guard counts it left to its lease.
        drop(self.runtime.spawn(rest));
    }
}

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    fn waited(slot: &mut Slot) -> Poll<()> {
        let mut cx = Context::from_waker(Waker::noop());
        slot.poll_cut(&mut cx)
    }

    /// The parked wakers take one entry per slot that waits, and a dropped slot's entry is
    /// used again: the list is as long as the most actions that ran at once, not as the
    /// calls made.
    #[test]
    fn a_dropped_slot_gives_its_entry_back() {
        let detached = Arc::new(Detached::new(8));
        let mut slots: Vec<Slot> = (0..3).map(|_| detached.enter().unwrap()).collect();
        for slot in &mut slots {
            assert!(waited(slot).is_pending());
            assert!(waited(slot).is_pending(), "waiting again keeps its entry");
        }
        assert_eq!(detached.parked().wakers.len(), 3);
        for _ in 0..10 {
            drop(slots.pop());
            let mut slot = detached.enter().unwrap();
            assert!(waited(&mut slot).is_pending());
            slots.push(slot);
        }
        assert_eq!(detached.parked().wakers.len(), 3);
        drop(slots);
        let parked = detached.parked();
        assert!(parked.wakers.iter().all(Option::is_none));
        assert_eq!(parked.free.len(), 3);
    }

    /// A slot first polled after the cut is cut at once. (The race between a slot's
    /// registration and the cut is closed by the lock both take, not by this test.)
    #[test]
    fn a_slot_that_waits_after_the_cut_is_cut() {
        let detached = Arc::new(Detached::new(8));
        let mut slot = detached.enter().unwrap();
        detached.cut.store(true, Ordering::SeqCst);
        assert!(waited(&mut slot).is_ready());
    }
}
