//! The attempt's phases and the state each carries; private to the machine.

use crate::Fence;
use crate::attempt::{ActionResult, Outcome, Protection, Recording};
use crate::record::{CommandKind, StoredResult};
use crate::time::Timestamp;

/// The command awaiting its reply.
#[derive(Debug, Clone, Copy)]
pub(super) struct Outstanding {
    pub(super) kind: CommandKind,
    pub(super) sent_at: Timestamp,
    pub(super) reply_by: Timestamp,
}

#[derive(Debug, Clone)]
pub(super) enum Phase {
    /// Reserve (or, while waiting, reserve again) at `not_before`.
    Reserving {
        not_before: Timestamp,
        retries: u32,
    },
    /// The action is (about to be) running.
    Acting(Acting),
    /// Record the result.
    Completing(Completing),
    /// Read the record to learn whether a transactional complete whose reply was lost
    /// committed (see the `transaction` module).
    Probing(Completing),
    /// Give the key up: after a failed action, or to settle an abandoned attempt.
    Releasing {
        not_before: Timestamp,
        retries: u32,
        after: AfterRelease,
    },
    Finished(Outcome),
}

/// What a release concludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterRelease {
    /// The action failed (`I5`).
    ActionFailed,
    /// The attempt was abandoned before its action started.
    Abandoned,
    /// A transactional action's writes were rolled back.
    RolledBack,
}

#[derive(Debug, Clone)]
pub(super) struct Acting {
    pub(super) run_handed_out: bool,
    pub(super) protection: Protection,
    pub(super) result: Option<ActionResult>,
    /// When to send the next renewal (caller's clock).
    pub(super) next_renew: Timestamp,
    /// When the last confirmed lease ends, counted from when its command was sent.
    pub(super) confirmed_until: Timestamp,
    /// Failed renewals in a row, for the backoff.
    pub(super) renew_failures: u32,
    /// The grant's fence (`F1`), if the store handed one out.
    pub(super) fence: Option<Fence>,
}

#[derive(Debug, Clone)]
pub(super) struct Completing {
    pub(super) result: StoredResult,
    /// What the attempt reports once the record holds `result`.
    pub(super) recorded: Recording,
    /// Whether the action panicked (the outcome is then [`Outcome::Panicked`]).
    pub(super) panicked: bool,
    pub(super) protection: Protection,
    /// When the last confirmed lease ends (caller's clock); `None` when unprotected.
    pub(super) confirmed_until: Option<Timestamp>,
    pub(super) not_before: Timestamp,
    pub(super) retries: u32,
}
