//! How a try ends: the outcome the attempt gives, what the client is answered, whether it
//! retries, and the checks on each ending.

use std::fmt::Write as _;

use idem_core::{Abandonment, Execution, Outcome, Protection, Record, Recording, StoredResult};

use super::World;
use crate::faults::Exercised;
use crate::plan::Stage;
use crate::report::{Check, Response};

impl World<'_> {
    /// The attempt of `worker` is done with `outcome`. Returns whether to keep driving it:
    /// a fail-closed try answers its caller, then settles what its failed reserves may
    /// have left (as the tokio driver does), so its attempt goes on.
    pub(super) fn done(&mut self, worker: usize, outcome: Outcome) -> bool {
        if self.workers[worker].outcome.is_some() {
            self.violation(Check::DriverProtocol, format!("w{worker} finished twice"));
            return false;
        }
        let w = &self.workers[worker];
        if outcome == Outcome::StoreUnavailable && !w.answered && w.abandoned_in.is_none() {
            trace!(
                self,
                "w{worker} answers {outcome:?}, then settles what its reserves may have left"
            );
            self.exercised(Exercised::FailClosed);
            self.check_answer_on_corrupt_key(worker, &outcome);
            self.answer(worker, Response::StoreUnavailable);
            let now = idem_core::Timestamp::from_millis(self.caller_now(worker));
            self.workers[worker].attempt.abandon(now);
            return true;
        }
        trace!(self, "w{worker} done: {outcome:?}");
        self.check_ending(worker, &outcome);
        self.check_answer_on_corrupt_key(worker, &outcome);
        let w = &self.workers[worker];
        let (slot, fingerprint) = (w.slot, w.attempt.fingerprint());
        let own = w.charge.map(|charge| self.report.charges[charge].id());
        let quiet = w.answered || w.abandoned_in.is_some();
        if let Outcome::Executed(execution) | Outcome::Panicked(execution) = &outcome {
            self.executed(worker, execution);
        }
        let response = match &outcome {
            Outcome::Executed(_) => {
                if self.variant.answers_from_store() {
                    match &self.records[self.storage[slot]] {
                        Some(Record::Completed {
                            result: StoredResult::Value(body),
                            ..
                        }) => {
                            Response::Result(String::from_utf8_lossy(body.as_bytes()).into_owned())
                        }
                        _ => own.map_or(Response::NoBody, Response::Result),
                    }
                } else {
                    own.map_or(Response::NoBody, Response::Result)
                }
            }
            Outcome::Panicked(_) => Response::Panicked,
            Outcome::Replayed { result } => {
                self.exercised(Exercised::Replay);
                match result {
                    StoredResult::Value(body) => {
                        let text = String::from_utf8_lossy(body.as_bytes()).into_owned();
                        self.check_replay(worker, slot, fingerprint, &text);
                        Response::Result(text)
                    }
                    StoredResult::NotStored => {
                        self.check_bodiless_replay(worker, slot, fingerprint);
                        Response::NoBody
                    }
                    StoredResult::Panicked => {
                        self.exercised(Exercised::PanicReplayed);
                        self.check_panic_replay(worker, slot, fingerprint);
                        Response::OutcomeUnknown
                    }
                }
            }
            Outcome::ActionFailed { .. } => {
                self.exercised(Exercised::ActionFailed);
                Response::ActionFailed
            }
            Outcome::KeyReuse { stored, given } => {
                // A refusal is genuine: another request under this very key holds it.
                let genuine = stored != given
                    && self
                        .plan
                        .clients
                        .iter()
                        .any(|c| c.slot == slot && c.fingerprint == *stored);
                if !genuine {
                    self.violation(
                        Check::KeyReuseRefused,
                        format!(
                            "w{worker} refused as key reuse, but no other request used its key"
                        ),
                    );
                }
                Response::KeyReuse
            }
            Outcome::InProgress => {
                self.exercised(Exercised::InProgress);
                Response::InProgress
            }
            Outcome::StoreUnavailable => {
                self.exercised(Exercised::FailClosed);
                Response::StoreUnavailable
            }
            Outcome::CorruptRecord => Response::CorruptRecord,
            Outcome::Abandoned(abandonment) => {
                if self.workers[worker].answered && *abandonment == Abandonment::Settled {
                    self.exercised(Exercised::FailClosedRelease);
                }
                Response::NoBody
            }
            Outcome::RolledBack { .. } | Outcome::CommitUnknown => {
                self.violation(
                    Check::DriverProtocol,
                    format!("w{worker} ends {outcome:?}, but its action is not transactional"),
                );
                Response::NoBody
            }
        };
        self.workers[worker].outcome = Some(outcome);
        // Nobody waits for the end of an abandoned try, or for the settlement of an
        // answered one.
        if !quiet {
            self.answer(worker, response);
        }
        false
    }

    /// The client of `worker` gets `response`; it retries after a failure worth retrying,
    /// and sends a late retry after its final answer if its plan has one.
    fn answer(&mut self, worker: usize, response: Response) {
        let w = &mut self.workers[worker];
        w.answered = true;
        let (client, try_no) = (w.client as usize, w.try_no as usize);
        let retry = matches!(
            response,
            Response::ActionFailed
                | Response::InProgress
                | Response::StoreUnavailable
                | Response::Panicked
        );
        self.report.responses[client][try_no] = Some(response);
        let plan = &self.plan.clients[client];
        let state = &mut self.clients[client];
        if !retry {
            state.done = true;
            if let (Some(after), false) = (plan.late_retry, state.late_used) {
                state.late_used = true;
                self.at(
                    self.now + after,
                    super::Event::Try {
                        client: client as u32,
                        late: true,
                    },
                );
            }
        } else if !state.done && try_no as u32 + 1 == state.tries && state.tries < plan.max_tries {
            self.at(
                self.now + plan.retry_delay,
                super::Event::Try {
                    client: client as u32,
                    late: false,
                },
            );
        }
    }

    fn executed(&mut self, worker: usize, execution: &Execution) {
        if execution.protection == Protection::FailedOpen {
            self.exercised(Exercised::FailOpen);
        }
        if execution.record == Recording::Unknown {
            self.exercised(Exercised::CompleteUnknown);
        }
        if self.workers[worker].lapsed
            && execution.protection == Protection::Reserved
            && !execution.lease_lost
        {
            self.violation(
                Check::LeaseLossReported,
                format!("w{worker}'s lease lapsed at the store, but {execution:?}"),
            );
        }
    }

    /// Liveness, the shape of the end: an abandoned attempt ends `Abandoned` (an action
    /// dropped mid-run as `ActionDropped`), or in its normal outcome when it was already
    /// recording its result or releasing its key; a fail-closed try's settlement ends
    /// `Abandoned` too; an attempt the service did not abandon never ends `Abandoned`.
    fn check_ending(&mut self, worker: usize, outcome: &Outcome) {
        let w = &self.workers[worker];
        let settled = matches!(
            outcome,
            Outcome::Abandoned(Abandonment::Settled | Abandonment::LeftToLease)
        );
        let expected = match (w.abandoned_in, w.dropped_at) {
            (Some(_), Some(_)) => *outcome == Outcome::Abandoned(Abandonment::ActionDropped),
            (Some(Stage::Reserve | Stage::Waiting), None) => settled,
            (Some(Stage::Complete), None) => {
                matches!(outcome, Outcome::Executed(_) | Outcome::Panicked(_))
            }
            (Some(Stage::Release), None) => matches!(outcome, Outcome::ActionFailed { .. }),
            (Some(Stage::Action), None) => false,
            (None, _) if w.answered => settled,
            (None, _) => !matches!(outcome, Outcome::Abandoned(_)),
        };
        if !expected {
            let detail = format!(
                "w{worker} ended {outcome:?}, abandoned in {:?}{}",
                w.abandoned_in,
                if w.dropped_at.is_some() {
                    " with its action running"
                } else {
                    ""
                }
            );
            self.violation(Check::EveryAttemptFinishes, detail);
        }
    }
}
