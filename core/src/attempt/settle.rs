//! Abandoning an attempt: what a driver does when nobody will run the action to its end or
//! wait for the outcome (MODEL.md, "Abandoned attempts").

use super::{AfterRelease, Attempt, Phase};
use crate::attempt::{Abandonment, Outcome, Protection};
use crate::time::Timestamp;

impl Attempt {
    /// The driver gives the attempt up at `now`: its caller went away and the action (if it
    /// runs) was dropped with it, or the call ended [`Outcome::StoreUnavailable`] and what
    /// its failed reserves may have left is to be settled. From then on the machine never
    /// hands out [`Step::Run`](super::Step::Run); polling it yields the commands that settle
    /// what the attempt may hold, with the attempt's own reply deadlines and retries, and
    /// ends in an outcome for the driver to log and count. Nobody waits for that outcome.
    ///
    /// The reply of a command outstanding at `now` will not be fed (the driver dropped it):
    /// it counts as failed, its effect unknown. Then, by phase:
    ///
    /// - Before the action started: a reservation that may have landed (a reserve was
    ///   sent, or granted) is **released**, since no effect can have happened (`I5`);
    ///   otherwise nothing is left, and the attempt ends
    ///   [`Abandonment::Settled`].
    /// - While the action runs: the action is gone and its effect may have happened, so the
    ///   key is **never released**: it stays held until its lease ends
    ///   ([`Abandonment::ActionDropped`], `I7`'s "abandoned mid-action"). The same for an
    ///   action that ran unprotected.
    /// - After the action ended: its result is **completed** (a success, an unrecordable
    ///   value or a panic, never released: `I7`, rule 11) or, for a failure, released, as if
    ///   the caller had stayed.
    /// - A transactional action ([`in_transaction`](Self::in_transaction)) is different: its
    ///   writes go with its transaction, so an action dropped mid-run or before its complete
    ///   was sent is released (nothing happened), and a complete that was out is followed by
    ///   reads of the record to learn whether it committed.
    /// - After a fail-closed refusal: the reserve that may have landed is released.
    ///
    /// Abandoning twice, or abandoning an attempt that ended otherwise, changes nothing.
    pub fn abandon(&mut self, now: Timestamp) {
        if self.abandoned {
            return;
        }
        self.abandoned = true;
        let outstanding = self.outstanding.take();
        let dropped = outstanding.is_some();
        let release = Phase::Releasing {
            not_before: now,
            retries: 0,
            after: AfterRelease::Abandoned,
        };
        let settled = Phase::Finished(Outcome::Abandoned(Abandonment::Settled));
        self.phase = match std::mem::replace(&mut self.phase, settled.clone()) {
            Phase::Reserving { .. } if self.reserve_first_sent.is_some() => release,
            Phase::Reserving { .. } => settled,
            // A transactional action's writes went with the call, whatever it returned.
            Phase::Acting(acting) if self.transactional && acting.run_handed_out => {
                Phase::Releasing {
                    not_before: now,
                    retries: 0,
                    after: AfterRelease::RolledBack,
                }
            }
            Phase::Acting(acting) => match acting.result {
                Some(result) => {
                    let confirmed_until = (acting.protection == Protection::Reserved)
                        .then_some(acting.confirmed_until);
                    self.after_action(result, acting.protection, confirmed_until, now)
                }
                None if acting.run_handed_out => {
                    Phase::Finished(Outcome::Abandoned(Abandonment::ActionDropped))
                }
                // Before the action: a grant, or (failed open) reserves whose replies were
                // lost and which may have landed. No effect can have happened: release.
                None => release,
            },
            // A transactional complete belongs to its transaction, which went with the call:
            // one that was out may have committed (read the record, once it can no longer
            // land: after its reply deadline, as for a lost reply; a read sent at once could
            // overtake it and see the reservation before the commit); one not yet sent never
            // will (its writes rolled back; give the key back).
            Phase::Completing(mut completing) if self.transactional => {
                if let Some(out) = outstanding {
                    completing.not_before = out.reply_by.max(now);
                    Phase::Probing(completing)
                } else {
                    Phase::Releasing {
                        not_before: now,
                        retries: 0,
                        after: AfterRelease::RolledBack,
                    }
                }
            }
            Phase::Completing(mut completing) => {
                if dropped {
                    // The dropped complete counts as one failed try; the next goes now.
                    completing.retries = completing.retries.saturating_add(1);
                    completing.not_before = now;
                }
                Phase::Completing(completing)
            }
            Phase::Releasing { retries, after, .. } if dropped => Phase::Releasing {
                not_before: now,
                retries: retries.saturating_add(1),
                after,
            },
            releasing @ Phase::Releasing { .. } => releasing,
            Phase::Probing(mut probing) => {
                if dropped {
                    probing.retries = probing.retries.saturating_add(1);
                    probing.not_before = now;
                }
                Phase::Probing(probing)
            }
            Phase::Finished(Outcome::StoreUnavailable) => release,
            finished @ Phase::Finished(_) => finished,
        };
        self.reserve_first_sent = None;
        self.wait_deadline = None;
    }
}
