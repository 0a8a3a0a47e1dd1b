//! The attempt's own moves between phases: what it sends, what follows the action, how a
//! complete or a release ends, and how a waiter waits.

use super::{AfterRelease, Attempt, Completing, Outstanding, Phase};
use crate::attempt::{Abandonment, ActionResult, Execution, Outcome, Protection, Recording, Step};
use crate::options::InFlightPolicy;
use crate::record::{Command, CommandKind, StoredResult};
use crate::time::Timestamp;

impl Attempt {
    pub(super) fn complete_command(&self, result: StoredResult) -> Command {
        Command::Complete {
            owner: self.owner,
            fingerprint: self.fingerprint,
            result,
            retention: self.options.retention(),
        }
    }

    /// What of an action's result is recorded, and what the attempt reports once it is.
    /// Rule 9: an oversized result is returned to the caller but not stored; the record is
    /// completed without it, so a retry gets a clear error and never a second effect. An
    /// unrecordable one likewise. Rule 11: a panic is recorded as such.
    pub(super) fn recordable(&self, result: ActionResult) -> Option<(StoredResult, Recording)> {
        match result {
            ActionResult::Succeeded(body) if body.len() <= self.options.max_body_bytes() => {
                Some((StoredResult::Value(body), Recording::Stored))
            }
            ActionResult::Succeeded(_) | ActionResult::Unrecordable => {
                Some((StoredResult::NotStored, Recording::StoredWithoutBody))
            }
            ActionResult::Panicked => Some((StoredResult::Panicked, Recording::Stored)),
            ActionResult::Failed => None,
        }
    }

    pub(super) fn send(&mut self, kind: CommandKind, now: Timestamp) -> Step {
        let owner = self.owner;
        let command = match kind {
            CommandKind::Reserve => Command::Reserve {
                owner,
                fingerprint: self.fingerprint,
                lease: self.options.lease(),
            },
            CommandKind::Renew => Command::Renew {
                owner,
                lease: self.options.lease(),
            },
            CommandKind::Complete => self.complete_command(match &self.phase {
                Phase::Completing(completing) => completing.result.clone(),
                // `poll` sends a complete only from `Completing`.
                _ => StoredResult::NotStored,
            }),
            CommandKind::Release => Command::Release { owner },
            CommandKind::Read => Command::Read,
        };
        if kind == CommandKind::Reserve {
            self.reserve_first_sent.get_or_insert(now);
        }
        let reply_by = now.saturating_add(self.options.reply_timeout());
        self.outstanding = Some(Outstanding {
            kind,
            sent_at: now,
            reply_by,
        });
        Step::Send { command, reply_by }
    }

    pub(super) fn in_flight(&mut self, now: Timestamp) {
        if self.options.in_flight() == InFlightPolicy::Raise {
            self.phase = Phase::Finished(Outcome::InProgress);
            return;
        }
        let deadline = *self
            .wait_deadline
            .get_or_insert_with(|| now.saturating_add(self.options.wait_deadline()));
        if now >= deadline {
            self.phase = Phase::Finished(Outcome::InProgress);
            return;
        }
        let delay = self.backoff(self.waits);
        self.waits = self.waits.saturating_add(1);
        // The last poll happens at the deadline itself, so a holder that finishes just
        // in time is still seen.
        self.phase = Phase::Reserving {
            not_before: now.saturating_add(delay).min(deadline),
            retries: 0,
        };
    }

    /// The phase that follows the action's end.
    pub(super) fn after_action(
        &self,
        result: ActionResult,
        protection: Protection,
        confirmed_until: Option<Timestamp>,
        now: Timestamp,
    ) -> Phase {
        let panicked = result == ActionResult::Panicked;
        if panicked && self.transactional {
            // The transaction went with the panic, its writes rolled back: nothing happened,
            // so the key is given back as after a failure.
            return Phase::Releasing {
                not_before: now,
                retries: 0,
                after: AfterRelease::ActionFailed,
            };
        }
        match self.recordable(result) {
            // The effect happened, or may have: record it (`I7`, rule 11).
            Some((result, recorded)) => Phase::Completing(Completing {
                result,
                recorded,
                panicked,
                protection,
                confirmed_until,
                not_before: now,
                retries: 0,
            }),
            // I5: a failure is never recorded; the key is given back.
            None => Phase::Releasing {
                not_before: now,
                retries: 0,
                after: AfterRelease::ActionFailed,
            },
        }
    }

    /// Ends a complete: as recorded (`None`), or as `recording` says.
    pub(super) fn finish_complete(&mut self, recording: Option<Recording>) {
        if let Phase::Completing(completing) = &self.phase {
            let execution = Execution {
                protection: completing.protection,
                record: recording.unwrap_or(completing.recorded),
                lease_lost: self.lease_lost,
            };
            self.phase = Phase::Finished(if completing.panicked {
                Outcome::Panicked(execution)
            } else {
                Outcome::Executed(execution)
            });
        }
    }

    /// Ends a release: confirmed (or nothing of ours left), or given up on.
    pub(super) fn finish_release(&mut self, released: bool) {
        if let Phase::Releasing { after, .. } = self.phase {
            self.phase = Phase::Finished(match after {
                AfterRelease::ActionFailed => Outcome::ActionFailed { released },
                AfterRelease::Abandoned if released => Outcome::Abandoned(Abandonment::Settled),
                AfterRelease::Abandoned => Outcome::Abandoned(Abandonment::LeftToLease),
                AfterRelease::RolledBack => Outcome::RolledBack { released },
            });
        }
    }
}
