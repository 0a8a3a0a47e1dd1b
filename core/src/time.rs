//! Points in time, as the machines receive them.
//!
//! The core never reads a clock (MODEL.md, "Time"). Every transition takes `now` as an
//! argument, so the same inputs always give the same outputs, and a test, a simulation or a
//! model checker can put time wherever it likes.
//!
//! Two clocks appear, and they are never mixed:
//!
//! - the **store's clock** judges leases and retention ([`Record`](crate::Record) times,
//!   the `now` of [`record::apply`](crate::record::apply)); for Redis it is the server's
//!   `TIME`;
//! - the **caller's clock** schedules the caller's own work (renewals, waiting, retries: the
//!   `now` of [`Attempt`](crate::Attempt)).
//!
//! Commands therefore carry durations (a lease of 30 s), never absolute times: the store adds
//! the duration to its own `now`.

use std::fmt;
use std::time::Duration;

/// A point on a millisecond clock, counted from an epoch the clock's owner chooses.
///
/// Arithmetic saturates: time never wraps, and a lease that would end past `u64::MAX`
/// milliseconds simply never ends.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock's epoch.
    pub const ZERO: Self = Self(0);

    /// The point `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + duration`, rounded down to the millisecond, saturating at the end of time.
    #[must_use]
    pub fn saturating_add(self, duration: Duration) -> Self {
        Self(self.0.saturating_add(millis(duration)))
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}ms", self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{}ms", self.0)
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
