//! One try's process: the worker that drives its attempt, what it handles (wake-ups,
//! replies, its action's end, pauses), its action's effect, and its client's progress.

use std::fmt::Write as _;

use idem_check::{ActionEnd, EventKind, Received};
use idem_core::{ActionResult, Attempt, Body, Fence, Outcome, Reply, Timestamp};

use super::World;
use super::events::{Answer, Event};
use crate::faults::Exercised;
use crate::plan::{ActionPlan, Stage};

/// One try of one client: the service process that drives its attempt.
#[derive(Debug)]
pub(super) struct Worker {
    /// The client whose try this is, and which try (for a delivery, no client's:
    /// `u32::MAX`, and the delivery's number).
    pub(super) client: u32,
    pub(super) try_no: u32,
    /// The message whose delivery this is, for a consumer's call (MODEL.md `C1`).
    pub(super) message: Option<u32>,
    /// The consumer told the broker its disposition of this delivery.
    pub(super) disposed: bool,
    /// Its process's clock, in ms ahead of simulated time.
    pub(super) clock_offset: u64,
    /// The key, as an index into the plan's slots.
    pub(super) slot: usize,
    /// The real attempt machine.
    pub(super) attempt: Attempt,
    /// What the provider does when the action runs, and where the caller goes away.
    pub(super) action: ActionPlan,
    /// The command awaiting a reply (replies to older ones, or to one the attempt gave up
    /// at its reply deadline, are late).
    pub(super) outstanding: Option<u32>,
    pub(super) next_cmd: u32,
    /// The one wake-up that counts; other queued wake-ups are stale.
    pub(super) wake_at: Option<u64>,
    /// While simulated time is before this, the process is paused and handles nothing.
    pub(super) paused_until: u64,
    /// When the process crashed; it handles nothing after.
    pub(super) crashed_at: Option<u64>,
    /// The stage of the try, as the service sees it (`None` before its first poll).
    pub(super) stage: Option<Stage>,
    /// The action runs: handed out, not ended, not dropped.
    pub(super) running: bool,
    /// The fence of the grant the action was handed out under (MODEL.md `F1`), as its claim
    /// holds it: what its provider request carries, whatever the attempt does meanwhile.
    pub(super) fence: Option<Fence>,
    /// The provider's charge is still to come.
    pub(super) effect_pending: bool,
    /// The provider's charge will not land: the action was dropped before sending it.
    pub(super) charge_dropped: bool,
    /// The caller of this attached try went away in this stage, and the attempt was
    /// abandoned.
    pub(super) abandoned_in: Option<Stage>,
    /// The caller was answered (a fail-closed try answers, then settles).
    pub(super) answered: bool,
    /// The charge its action made, as an index into the statement (for a transactional
    /// action, its writes once committed).
    pub(super) charge: Option<usize>,
    /// Its action is transactional: its effect is writes that commit with its complete.
    pub(super) transactional: bool,
    /// The id of the writes its transactional action made, uncommitted.
    pub(super) written: Option<String>,
    /// It read the record while its own late commit was still to land (and found none).
    pub(super) read_before_landing: bool,
    /// How the attempt ended.
    pub(super) outcome: Option<Outcome>,
    /// The last lease view written down: its end on the store's clock, and the version of
    /// the record it was judged against (a view that says the same of an unchanged record
    /// says nothing new).
    pub(super) last_view: Option<(u64, u64)>,
}

impl Worker {
    /// Whether the process still handles events: not crashed, attempt not over.
    pub(super) fn live(&self) -> bool {
        self.crashed_at.is_none() && self.outcome.is_none()
    }
}

/// A client's progress through its tries.
#[derive(Debug, Default)]
pub(super) struct Client {
    /// Tries started.
    pub(super) tries: u32,
    /// The worker of its latest try.
    pub(super) current: Option<usize>,
    /// It has its answer (a result or a refusal) and retries no more.
    pub(super) done: bool,
    /// Its one late retry is scheduled.
    pub(super) late_used: bool,
}

impl World<'_> {
    /// The provider's charge lands, unless the process crashed or the action was dropped
    /// before its request was sent.
    pub(super) fn effect(&mut self, worker: usize) {
        let w = &mut self.workers[worker];
        w.effect_pending = false;
        if w.crashed_at.is_some() {
            return;
        }
        if w.charge_dropped {
            trace!(
                self,
                "the dropped action of w{worker} never reaches the provider"
            );
            return;
        }
        if w.transactional {
            // Writes in the transaction: an effect only if the store commits them.
            self.writes += 1;
            let id = idem_check::numbered("tx_", self.writes);
            trace!(self, "w{worker} writes {id} in its transaction");
            self.workers[worker].written = Some(id.clone());
            self.note(worker, EventKind::Wrote { id });
            return;
        }
        w.charge = Some(self.history.statement.len());
        self.report.effects += 1;
        // The request carries the call's downstream key (MODEL.md `D1`), as the driver's
        // claim hands it to the action.
        let downstream = self.variant.downstream_key(
            self.downstream[w.slot],
            w.attempt.operation(),
            w.attempt.owner(),
        );
        // And its grant's fence (MODEL.md `F1`), as the claim handed it out.
        let fence = w.fence;
        let at = self.store_now();
        let id = self
            .history
            .charge_sending(at, worker, Some(downstream), fence);
        if let Some(out) = self.trace.as_mut() {
            let _ = writeln!(out, "{:>9} provider charges {id} for w{worker}", self.now);
        }
    }

    /// Events the holder's own process handles: ignored once it crashed, held back while
    /// it is paused.
    pub(super) fn worker_event(&mut self, event: Event) {
        let worker = match &event {
            Event::Wake { worker }
            | Event::Resume { worker }
            | Event::Reply { worker, .. }
            | Event::ActionDone { worker }
            | Event::Pause { worker, .. }
            | Event::Notice { worker }
            | Event::CallerGone { worker } => *worker as usize,
            _ => return,
        };
        // A crashed process handles nothing; a finished attempt has nothing left to do
        // (its stale wake-ups and late replies are dropped).
        if !self.workers[worker].live() {
            if let Event::Reply { answer, .. } = event {
                self.answers.take(answer);
            }
            return;
        }
        let paused_until = self.workers[worker].paused_until;
        if paused_until > self.now {
            if !matches!(event, Event::Wake { .. } | Event::Notice { .. }) {
                self.at(paused_until, event);
            }
            return;
        }
        match event {
            Event::Wake { .. } if self.workers[worker].wake_at == Some(self.now) => {
                self.workers[worker].wake_at = None;
                self.drive(worker);
            }
            Event::Notice { .. } => {
                let now = Timestamp::from_millis(self.caller_now(worker));
                if self.workers[worker].attempt.handle_record_changed(now) {
                    self.exercised(Exercised::ChangeNotice);
                    trace!(self, "w{worker} is told the record changed");
                    self.drive(worker);
                }
            }
            Event::Resume { .. } => {
                trace!(self, "w{worker} resumes");
                self.workers[worker].wake_at = None;
                self.drive(worker);
            }
            Event::Reply { cmd, answer, .. } => {
                let Some(answer) = self.answers.take(answer) else {
                    return;
                };
                if self.workers[worker].outstanding != Some(cmd) {
                    trace!(self, "w{worker} ignores the late reply to #{cmd}");
                    return;
                }
                self.workers[worker].outstanding = None;
                self.feed_answer(worker, answer);
                self.drive(worker);
            }
            Event::ActionDone { .. } => self.action_done(worker),
            Event::Pause { length, .. } => {
                self.exercised(Exercised::PausePastLease);
                trace!(self, "w{worker} pauses for {length}ms");
                let until = self.store_now() + length;
                self.note(worker, EventKind::Paused { until });
                self.workers[worker].paused_until = self.now + length;
                self.at(
                    self.now + length,
                    Event::Resume {
                        worker: worker as u32,
                    },
                );
            }
            Event::CallerGone { .. } => self.planned_caller_gone(worker),
            _ => {}
        }
    }

    /// Feeds the attempt what came back for its outstanding command.
    pub(super) fn feed_answer(&mut self, worker: usize, answer: Answer) {
        let now = Timestamp::from_millis(self.caller_now(worker));
        let received = match &answer {
            Answer::Reply(reply) => Received::Reply(reply.clone()),
            Answer::Refused => Received::Failed,
            Answer::Corrupt => Received::Corrupt,
        };
        self.note(worker, EventKind::Received(received));
        let fed = match answer {
            Answer::Reply(Reply::Read(read)) => {
                // Only a transactional attempt reads, to learn whether its commit landed.
                let attempt = &self.workers[worker].attempt;
                let fed = self.variant.fed_commit_read(
                    read.clone(),
                    attempt.owner(),
                    attempt.fingerprint(),
                    now,
                );
                if fed != read {
                    trace!(
                        self,
                        "w{worker} takes a read without its record for its own reservation"
                    );
                }
                self.workers[worker]
                    .attempt
                    .handle_reply(Reply::Read(fed), now)
            }
            Answer::Reply(reply) => self.workers[worker].attempt.handle_reply(reply, now),
            Answer::Refused => self.workers[worker].attempt.handle_store_error(now),
            Answer::Corrupt => {
                if self.variant.feeds_corrupt_as_store_error() {
                    trace!(
                        self,
                        "w{worker} takes the corrupt record for a store failure"
                    );
                    self.workers[worker].attempt.handle_store_error(now)
                } else {
                    self.workers[worker].attempt.handle_corrupt_record(now)
                }
            }
        };
        self.fed(worker, fed);
    }

    /// The action ends: succeeded, failed, unrecordable, or panicked. A dropped action's
    /// end is nobody's to feed.
    pub(super) fn action_done(&mut self, worker: usize) {
        let w = &mut self.workers[worker];
        if !w.running {
            return;
        }
        w.running = false;
        let made = if w.transactional {
            w.written.clone()
        } else {
            w.charge
                .map(|charge| self.history.statement.lines()[charge].id.clone())
        };
        let result = if w.action.panic_at.is_some() {
            let class = if w.transactional {
                Exercised::TransactionPanicked
            } else if w.charge.is_some() {
                Exercised::PanicAfterEffect
            } else {
                Exercised::PanicBeforeEffect
            };
            self.exercised(class);
            trace!(self, "w{worker}'s action panics ({})", class.name());
            if self.variant.feeds_panic_as_failure() {
                ActionResult::Failed
            } else {
                ActionResult::Panicked
            }
        } else {
            match (w.action.fails, w.action.unrecordable, made) {
                (false, false, Some(id)) => ActionResult::Succeeded(Body::new(id.as_bytes())),
                (false, true, Some(_)) => {
                    self.exercised(Exercised::Unrecordable);
                    ActionResult::Unrecordable
                }
                _ => ActionResult::Failed,
            }
        };
        trace!(self, "w{worker} action ends: {result:?}");
        let end = if self.workers[worker].action.panic_at.is_some() {
            ActionEnd::Panicked
        } else {
            match result {
                ActionResult::Succeeded(_) => ActionEnd::Succeeded,
                ActionResult::Unrecordable => ActionEnd::Unrecordable,
                _ => ActionEnd::Failed,
            }
        };
        self.note(worker, EventKind::ActionEnded(end));
        if self.variant.acks_before_record()
            && matches!(end, ActionEnd::Succeeded | ActionEnd::Unrecordable)
            && self.workers[worker].message.is_some()
            && !self.workers[worker].disposed
        {
            // The broken consumer: the handler returned a value, so it acknowledges now,
            // before the complete that records it.
            trace!(
                self,
                "w{worker} acknowledges its delivery as its handler returns"
            );
            self.workers[worker].disposed = true;
            self.tell_broker(worker, idem_core::Disposition::Ack, false);
        }
        let stage = if result == ActionResult::Failed {
            Stage::Release
        } else {
            Stage::Complete
        };
        self.enter(worker, stage);
        let now = Timestamp::from_millis(self.caller_now(worker));
        let fed = self.workers[worker]
            .attempt
            .handle_action_result(result, now);
        self.fed(worker, fed);
        self.drive(worker);
    }

    pub(super) fn fed(&mut self, worker: usize, fed: Result<(), idem_core::ProtocolError>) {
        if let Err(err) = fed {
            self.protocol(worker, err.to_string());
        }
    }
}
