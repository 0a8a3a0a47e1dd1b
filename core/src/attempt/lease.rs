//! What the attempt knows of its lease: confirmed on the caller's clock from when the
//! command that set it was sent (MODEL.md, "Counting the lease on the caller's clock").

use super::{Attempt, Phase};
use crate::attempt::{LeaseState, Protection};
use crate::time::Timestamp;

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
