//! Callers that go away. A detached try runs on to its end and is recorded; an attached
//! one is abandoned with its action (`Attempt::abandon`), and from then on its worker only
//! pumps the settlement the attempt asks for. Either way the client retries with the same
//! key, as after a timeout.

use std::fmt::Write as _;

use idem_check::EventKind;
use idem_core::{Command, Timestamp};

use super::World;
use crate::faults::Exercised;
use crate::plan::Stage;

impl World<'_> {
    /// The caller of `worker` goes away at the point its plan names, if the try is still
    /// its client's latest and nobody has answered or abandoned it yet.
    pub(super) fn planned_caller_gone(&mut self, worker: usize) {
        let w = &self.workers[worker];
        let client = w.client as usize;
        if w.answered || w.abandoned_in.is_some() || self.clients[client].current != Some(worker) {
            return;
        }
        self.caller_goes_away(worker, "goes away");
        let plan = &self.plan.clients[client];
        let state = &self.clients[client];
        if !state.done && state.tries < plan.max_tries {
            trace!(self, "c{client} retries with the same key");
            self.start_try(client);
        }
    }

    /// The caller of `worker` is gone (`why`): an attached try is abandoned, a detached
    /// one runs on. Nothing happens to a try that crashed, ended, or was abandoned.
    pub(super) fn caller_goes_away(&mut self, worker: usize, why: &str) {
        let w = &self.workers[worker];
        if !w.live() || w.answered || w.abandoned_in.is_some() {
            return;
        }
        let client = w.client as usize;
        if self.plan.clients[client].attached {
            self.abandon(worker, why);
        } else {
            self.exercised(Exercised::DetachedCallerGone);
            trace!(
                self,
                "the caller of w{worker} {why}; detached, w{worker} runs on to its end"
            );
        }
    }

    /// The service abandons the attempt of `worker`: its caller went away and took the
    /// action (if it runs) with it.
    fn abandon(&mut self, worker: usize, why: &str) {
        let clock = Timestamp::from_millis(self.caller_now(worker));
        let w = &mut self.workers[worker];
        let stage = w.stage.unwrap_or(Stage::Reserve);
        w.abandoned_in = Some(stage);
        let running = w.running;
        let class = if running {
            w.running = false;
            if w.transactional {
                // The transaction goes with the call: its writes, made or to come, roll back.
                w.charge_dropped = true;
                Exercised::TransactionDropped
            } else if w.charge.is_some() {
                Exercised::AbandonAfterEffect
            } else if w.effect_pending && self.rng.chance(500) {
                // The provider request was already sent: its charge lands anyway.
                Exercised::AbandonChargeInFlight
            } else {
                self.workers[worker].charge_dropped = true;
                Exercised::AbandonBeforeEffect
            }
        } else {
            match stage {
                Stage::Reserve => Exercised::AbandonMidReserve,
                Stage::Waiting => Exercised::AbandonWhileWaiting,
                // An action that is not running has ended, and its end moved the try on to
                // recording or releasing; `Action` here would be a world bug, and the
                // liveness check reports an abandoned attempt's end that does not fit.
                Stage::Action | Stage::Complete => Exercised::AbandonMidComplete,
                Stage::Release => Exercised::AbandonMidRelease,
            }
        };
        self.exercised(class);
        trace!(
            self,
            "the caller of w{worker} {why}; attached, w{worker} is abandoned ({})",
            class.name()
        );
        // The reply of a command out now will not be fed: the attempt counts it as failed.
        self.workers[worker].outstanding = None;
        self.workers[worker].attempt.abandon(clock);
        self.note(worker, EventKind::Abandoned);
        if running && self.variant.releases_on_abandon() {
            // The attempt keeps the key; this driver gives it back behind its back.
            let owner = self.workers[worker].attempt.owner();
            trace!(
                self,
                "w{worker} releases the key of its dropped action itself"
            );
            self.send_untracked(worker, Command::Release { owner });
        }
        self.drive(worker);
    }
}
