//! Store failures: a command that failed, or whose reply did not come by its deadline, is
//! retried with the attempt's own backoff until the retries are spent, then ends as the
//! store-failure policy says (MODEL.md, "Store failures").

use super::{Acting, Attempt, Outstanding, Phase, backoff};
use crate::attempt::{Outcome, Protection, Recording};
use crate::options::StoreFailurePolicy;
use crate::record::CommandKind;
use crate::time::Timestamp;

impl Attempt {
    /// The outstanding command failed, its effect unknown: retry it with backoff, or, once
    /// the retries are spent, end as the policy says.
    pub(super) fn fail_outstanding(&mut self, now: Timestamp) {
        let Some(Outstanding { kind, .. }) = self.outstanding.take() else {
            return;
        };
        self.sent_on_notice = false;
        let max = self.options.store_retries();
        let delay = self.backoff(self.retries_so_far());
        let failure = self.options.on_store_failure();
        match (&mut self.phase, kind) {
            (
                Phase::Reserving {
                    not_before,
                    retries,
                },
                CommandKind::Reserve,
            ) => {
                if *retries < max {
                    *retries += 1;
                    *not_before = now.saturating_add(delay);
                } else if failure == StoreFailurePolicy::FailClosed {
                    // One of the failed reserves may have landed: a driver that settles the
                    // attempt ([`Attempt::abandon`]) releases it.
                    self.phase = Phase::Finished(Outcome::StoreUnavailable);
                } else {
                    self.reserve_first_sent = None;
                    self.phase = Phase::Acting(Acting {
                        run_handed_out: false,
                        protection: Protection::FailedOpen,
                        result: None,
                        next_renew: now,
                        confirmed_until: now,
                        renew_failures: 0,
                        fence: None,
                    });
                }
            }
            (Phase::Acting(acting), CommandKind::Renew) => {
                acting.renew_failures = acting.renew_failures.saturating_add(1);
                let retry = self
                    .options
                    .backoff_initial()
                    .saturating_mul(1 << acting.renew_failures.min(16))
                    .min(self.options.renew_every());
                acting.next_renew = now.saturating_add(retry);
            }
            (Phase::Completing(_), CommandKind::Complete) if self.transactional => {
                self.transactional_complete_failed(now, delay);
            }
            (Phase::Probing(probing), CommandKind::Read) => {
                if probing.retries < max {
                    probing.retries += 1;
                    probing.not_before = now.saturating_add(delay);
                } else {
                    self.phase = Phase::Finished(Outcome::CommitUnknown);
                }
            }
            (Phase::Completing(completing), CommandKind::Complete) => {
                if completing.retries < max {
                    completing.retries += 1;
                    completing.not_before = now.saturating_add(delay);
                } else {
                    // As for a repeated complete: if the confirmed lease had ended by now,
                    // the complete may have landed late, and a lapse cannot be ruled out.
                    if self.completing_lapsed_by(now) && self.completing_reserved() {
                        self.lease_lost = true;
                    }
                    self.finish_complete(Some(Recording::Unknown));
                }
            }
            (
                Phase::Releasing {
                    not_before,
                    retries,
                    ..
                },
                CommandKind::Release,
            ) => {
                if *retries < max {
                    *retries += 1;
                    *not_before = now.saturating_add(delay);
                } else {
                    self.finish_release(false);
                }
            }
            // The phase always matches the outstanding command: `send` sets both, and
            // `abandon` moves the phase only with no command outstanding.
            _ => {}
        }
    }

    pub(super) fn retries_so_far(&self) -> u32 {
        match &self.phase {
            Phase::Reserving { retries, .. } | Phase::Releasing { retries, .. } => *retries,
            Phase::Completing(completing) | Phase::Probing(completing) => completing.retries,
            Phase::Acting(_) | Phase::Finished(_) => 0,
        }
    }

    pub(super) fn backoff(&mut self, n: u32) -> std::time::Duration {
        backoff::delay(
            self.options.backoff_initial(),
            self.options.backoff_max(),
            n,
            &mut self.jitter,
        )
    }
}
