//! What the attempt knows of its lease: confirmed on the caller's clock from when the
//! command that set it was sent, short of a margin that makes the caller's view end before
//! the store's (MODEL.md, "Counting the lease on the caller's clock").

use std::time::Duration;

use super::{Attempt, Phase};
use crate::attempt::{LeaseState, Protection};
use crate::record::replay_life;
use crate::time::Timestamp;

/// How long after a reserve or renewal is **sent** the caller counts the lease it asked for
/// as confirmed: `lease` less 1% and 5 ms, the same allowance the replay cache takes off a
/// time the store gave ([`replay_life`]).
///
/// Why a margin at all: the store counts the lease from when it applied the command, on its
/// own clock, rounded down to its millisecond (Redis counts `PX` from the start of the
/// millisecond its script reads from `TIME`), while the caller counts from when it sent the
/// command, rounded down to a millisecond of its own clock; the two millisecond grids are not
/// aligned, so without a margin the caller's view can end up to a millisecond *after* the
/// store has freed the key. The 5 ms cover that rounding on both clocks (and a store key set
/// to expire a millisecond before its deadline); the 1% covers two clocks whose rates differ
/// by up to 1% over the lease. With that, the caller's view of a lease ends before the
/// store's by construction, by the time the command took to reach the store and then: at
/// least 4 ms and 1% of the lease when the two clocks run at one rate, at least 4 ms when
/// their rates differ by up to 1%.
pub fn confirmed_lease(lease: Duration) -> Duration {
    replay_life(lease, Duration::MAX)
}

impl Attempt {
    /// The state of the reservation at `now`, for a driver that tells a running action
    /// whether it still holds its key.
    pub fn lease(&self, now: Timestamp) -> LeaseState {
        match &self.phase {
            Phase::Acting(acting) if acting.protection == Protection::FailedOpen => {
                LeaseState::Unprotected
            }
            Phase::Acting(acting) => {
                if self.lease_lost {
                    LeaseState::Lost
                } else if now >= acting.confirmed_until {
                    LeaseState::Unconfirmed
                } else {
                    LeaseState::Held
                }
            }
            _ => LeaseState::NotRunning,
        }
    }

    /// How much of the lease is left at `now` on the caller's clock, while the action runs
    /// under a reservation: until the confirmed end, zero once the lease is unconfirmed or
    /// lost (the same instant turns [`lease`](Self::lease) from `Held`). `None` when no
    /// action runs, or it runs unprotected (fail-open: there is no lease to count).
    pub fn lease_left(&self, now: Timestamp) -> Option<Duration> {
        match &self.phase {
            Phase::Acting(acting) if acting.protection == Protection::Reserved => {
                Some(if self.lease_lost {
                    Duration::ZERO
                } else {
                    acting.confirmed_until.saturating_duration_since(now)
                })
            }
            _ => None,
        }
    }

    /// When a lease confirmed by a command sent at `sent` ends on the caller's clock (see
    /// [`confirmed_lease`]).
    pub(super) fn confirmed_from(&self, sent: Timestamp) -> Timestamp {
        sent.saturating_add(confirmed_lease(self.options.lease()))
    }

    /// While the action runs under a reservation that is not known lost: the instant
    /// (caller's clock) until which the lease is confirmed. A driver that answers the
    /// action's "do I still hold the key?" at the moment it is asked compares this with
    /// its clock then, rather than trusting a state it computed earlier.
    pub fn lease_confirmed_until(&self) -> Option<Timestamp> {
        match &self.phase {
            Phase::Acting(acting)
                if acting.protection == Protection::Reserved && !self.lease_lost =>
            {
                Some(acting.confirmed_until)
            }
            _ => None,
        }
    }

    /// The lease end worth waking up for, while the action runs and the lease is held.
    pub(super) fn lease_watch(&self, now: Timestamp) -> Option<Timestamp> {
        match &self.phase {
            Phase::Acting(acting)
                if acting.protection == Protection::Reserved
                    && !self.lease_lost
                    && acting.result.is_none()
                    && now < acting.confirmed_until =>
            {
                Some(acting.confirmed_until)
            }
            _ => None,
        }
    }

    /// Whether the result being recorded came from an action whose confirmed lease had
    /// ended by `now`.
    pub(super) fn completing_lapsed_by(&self, now: Timestamp) -> bool {
        match &self.phase {
            Phase::Completing(completing) => {
                completing.confirmed_until.is_some_and(|until| now >= until)
            }
            _ => false,
        }
    }

    /// Whether the result being recorded came from an action run under a reservation.
    pub(super) fn completing_reserved(&self) -> bool {
        matches!(
            &self.phase,
            Phase::Completing(completing) if completing.protection == Protection::Reserved
        )
    }
}
