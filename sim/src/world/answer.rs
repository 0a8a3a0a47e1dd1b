//! How a try ends: the outcome the attempt gives, what the client is answered, and whether
//! it retries. Every ending is written down for the judge.

use std::fmt::Write as _;

use idem_check::EventKind;
use idem_core::{Abandonment, Execution, Outcome, Protection, Record, Recording, StoredResult};

use super::World;
use crate::faults::Exercised;
use crate::report::Response;

impl World<'_> {
    /// The attempt of `worker` is done with `outcome`. Returns whether to keep driving it:
    /// a fail-closed try answers its caller, then settles what its failed reserves may
    /// have left (as the tokio driver does), so its attempt goes on.
    pub(super) fn done(&mut self, worker: usize, outcome: Outcome) -> bool {
        if self.workers[worker].outcome.is_some() {
            self.protocol(
                worker,
                format!("finished twice, the second time {outcome:?}"),
            );
            return false;
        }
        let w = &self.workers[worker];
        if outcome == Outcome::StoreUnavailable && !w.answered && w.abandoned_in.is_none() {
            trace!(
                self,
                "w{worker} answers {outcome:?}, then settles what its reserves may have left"
            );
            self.exercised(Exercised::FailClosed);
            self.note(worker, EventKind::Finished(outcome.clone()));
            if self.workers[worker].message.is_some() {
                self.dispose(worker, &outcome);
            } else {
                self.answer(worker, Response::StoreUnavailable);
            }
            let now = idem_core::Timestamp::from_millis(self.caller_now(worker));
            self.workers[worker].attempt.abandon(now);
            self.note(worker, EventKind::Abandoned);
            return true;
        }
        trace!(self, "w{worker} done: {outcome:?}");
        let w = &self.workers[worker];
        let slot = w.slot;
        let own = w
            .charge
            .map(|charge| self.history.statement.lines()[charge].id.clone());
        let quiet = w.answered || w.abandoned_in.is_some();
        let ending = if quiet {
            EventKind::Settled(outcome.clone())
        } else {
            EventKind::Finished(outcome.clone())
        };
        self.note(worker, ending);
        if let Outcome::Executed(execution) | Outcome::Panicked(execution) = &outcome {
            self.executed(execution);
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
                        Response::Result(String::from_utf8_lossy(body.as_bytes()).into_owned())
                    }
                    StoredResult::NotStored => Response::NoBody,
                    StoredResult::Panicked => {
                        self.exercised(Exercised::PanicReplayed);
                        Response::OutcomeUnknown
                    }
                }
            }
            Outcome::ActionFailed { .. } => {
                self.exercised(Exercised::ActionFailed);
                Response::ActionFailed
            }
            Outcome::KeyReuse { .. } => Response::KeyReuse,
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
            Outcome::RolledBack { .. } | Outcome::CommitUnknown
                if !self.workers[worker].transactional =>
            {
                self.protocol(
                    worker,
                    format!("ends {outcome:?}, but its action is not transactional"),
                );
                Response::NoBody
            }
            Outcome::RolledBack { .. } => Response::RolledBack,
            Outcome::CommitUnknown => {
                self.exercised(Exercised::CommitUnknown);
                Response::CommitUnknown
            }
        };
        // Nobody waits for the end of an abandoned try, or for the settlement of an
        // answered one. A consumer tells the broker what the core decides of its delivery.
        if !quiet {
            if self.workers[worker].message.is_some() {
                self.dispose(worker, &outcome);
            } else {
                self.answer(worker, response);
            }
        }
        self.workers[worker].outcome = Some(outcome);
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
                | Response::RolledBack
                | Response::CommitUnknown
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

    fn executed(&mut self, execution: &Execution) {
        if execution.protection == Protection::FailedOpen {
            self.exercised(Exercised::FailOpen);
        }
        if execution.record == Recording::Unknown {
            self.exercised(Exercised::CompleteUnknown);
        }
    }
}
