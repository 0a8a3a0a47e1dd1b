//! The caller's clock: tokio's [`Instant`] counted from an epoch, so tests with paused time
//! control it. The attempt machine reads no clock (rule 12); this is where its `now` comes
//! from and where the instants it asks for are slept until.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use idem_core::Timestamp;
use tokio::time::{Instant, Sleep};

/// Milliseconds in `elapsed`, saturating.
pub(crate) fn millis(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// A caller's clock, shared by a coordinator's calls and their settlements.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    epoch: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    /// Now, on this clock.
    pub(crate) fn now(&self) -> Timestamp {
        Timestamp::from_millis(millis(self.epoch.elapsed()))
    }

    /// The tokio instant of `at`, or `None` past what a tokio timer can hold.
    pub(crate) fn instant(&self, at: Timestamp) -> Option<Instant> {
        self.epoch
            .checked_add(Duration::from_millis(at.as_millis()))
    }

    /// Sleeps until `until`; `None` never wakes.
    pub(crate) async fn sleep_until(&self, until: Option<Timestamp>) {
        let Some(until) = until else {
            return std::future::pending().await;
        };
        match self.instant(until) {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            // The end of time, as far as a tokio timer can tell.
            None => std::future::pending().await,
        }
    }
}

/// Resolves once `deadline` has passed, on `timer`, the one timer a call keeps for its
/// successive waits: the timer is made, or moved to `deadline`, only when this is polled,
/// that is when nothing the call waits for with more priority is ready. A call then
/// registers one tokio timer however many times it waits (moving a registered timer later
/// takes no lock in tokio's timer wheel; dropping one does). `None` never resolves.
pub(crate) fn fired(
    mut timer: Pin<&mut Option<Sleep>>,
    deadline: Option<Instant>,
) -> impl Future<Output = ()> + '_ {
    poll_fn(move |cx| {
        let Some(deadline) = deadline else {
            return Poll::Pending;
        };
        match timer.as_mut().as_pin_mut() {
            Some(armed) if armed.deadline() == deadline => {}
            Some(armed) => armed.reset(deadline),
            None => timer.set(Some(tokio::time::sleep_until(deadline))),
        }
        match timer.as_mut().as_pin_mut() {
            Some(armed) => armed.poll(cx),
            None => Poll::Pending,
        }
    })
}
