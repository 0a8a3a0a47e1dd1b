//! The attempt machine: one caller's protocol for one request (MODEL.md, "The attempt
//! machine").
//!
//! The machine makes every decision; its driver only moves commands, replies and time:
//!
//! ```text
//! loop {
//!     match attempt.poll(now) {
//!         Step::Send(command) => issue it; later feed handle_reply or handle_store_error,
//!         Step::Run           => start the action; later feed handle_action_result,
//!         Step::Wait { until } => wait for the instant `until` or for any awaited input,
//!         Step::Done(outcome) => return outcome,
//!     }
//! }
//! ```
//!
//! At most one store command is outstanding at a time, and [`Step::Run`] is handed out at
//! most once: while the action runs the machine keeps asking for renewals, and the driver
//! waits on the action, the outstanding command and the timer together. `now` is the
//! **caller's** clock; the store judges leases by its own (see [`time`](crate::time)).
//!
//! Randomness is an input: the owner token and the seed of the backoff jitter come from the
//! caller, so a seeded simulation replays an attempt exactly.

use std::time::Duration;

use thiserror::Error;

use crate::options::{InFlightPolicy, Options, StoreFailurePolicy};
use crate::record::{Body, Command, Completion, Refusal, Reply};
use crate::time::Timestamp;
use crate::{Fingerprint, Key, Operation, OwnerToken};

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Step {
    /// Issue this command to the store, for the attempt's operation and key. Feed the reply
    /// to [`Attempt::handle_reply`], or a failure (timeout, dropped connection, any error
    /// whose effect is unknown) to [`Attempt::handle_store_error`].
    Send(Command),
    /// Start the action. Feed its result to [`Attempt::handle_action_result`]; keep polling
    /// while it runs, for renewals.
    Run,
    /// Nothing to do until `until` (on the caller's clock), or until an awaited reply or
    /// action result arrives; `None` means only an input can move the machine.
    Wait {
        /// The next instant at which the machine has work of its own.
        until: Option<Timestamp>,
    },
    /// The attempt is over.
    Done(Outcome),
}

/// What the action produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionResult {
    /// The action succeeded; this is its encoded result.
    Succeeded(Body),
    /// The action failed; the failure is the driver's to return, and is never recorded
    /// (`I5`).
    Failed,
    /// The action succeeded, but its result cannot be encoded for the store (a value the
    /// driver's serializer refuses). The effect happened, so the key is not given back: the
    /// record is completed without a body, as for an oversized result (rule 9), and a retry
    /// gets "result not stored" instead of a second effect.
    Unrecordable,
}

/// How the attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The action ran in this attempt and succeeded.
    Executed(Execution),
    /// The action ran in this attempt and failed; the reservation was given up so that a
    /// retry may run it again (`I5`).
    ActionFailed {
        /// Whether the store confirmed the release. When it did not, the key frees itself
        /// when the lease runs out (`I6`).
        released: bool,
    },
    /// An identical request completed earlier: its result, not run again.
    Replayed {
        /// The stored result, or `None` if it was over the size limit when recorded.
        body: Option<Body>,
    },
    /// The key belongs to a request with another fingerprint (HTTP 422).
    KeyReuse {
        /// The fingerprint the key is held or completed under.
        stored: Fingerprint,
        /// This request's fingerprint.
        given: Fingerprint,
    },
    /// An identical request holds the key (HTTP 409): at once under `Raise`, or after the
    /// waiter deadline under `Wait`.
    InProgress,
    /// The store could not be reached and the policy is `FailClosed` (HTTP 503); nothing ran.
    StoreUnavailable,
}

/// What is known about an action that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// Whether the action ran under a reservation or unprotected.
    pub protection: Protection,
    /// Whether its result is recorded.
    pub record: Recording,
    /// Whether the reservation lapsed while the action ran (a renewal was refused, or the
    /// complete found the lease run out). Another caller may then have run the action too:
    /// that is the one exception to `I7` besides fail-open.
    pub lease_lost: bool,
}

/// Whether the action ran under a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// The key was reserved before the action ran.
    Reserved,
    /// The store could not be reached and the policy is `FailOpen`: the action ran without
    /// a reservation.
    FailedOpen,
}

/// Whether an executed result was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recording {
    /// The result is recorded and identical requests replay it.
    Stored,
    /// The result was over the size limit: the record is completed without a body, so
    /// identical requests get "result not stored" instead of a second effect.
    StoredWithoutBody,
    /// The store refused the complete: the key belongs to another owner now.
    Refused(Refusal),
    /// The complete failed every retry: the result may or may not be recorded.
    Unknown,
}

/// The state of the attempt's reservation while its action runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// No reservation is held (before the reserve, or after the action).
    None,
    /// The lease is confirmed to last past `now`.
    Held,
    /// The last confirmed lease has run out on the caller's clock and no renewal has been
    /// confirmed since: the key may have been taken over.
    Unconfirmed,
    /// The store refused a renewal: the key is lost.
    Lost,
}

/// An input arrived that the machine was not waiting for; it was ignored. A driver bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A reply or store error arrived with no command outstanding.
    #[error("a store reply arrived, but no command is outstanding")]
    NoCommandOutstanding,
    /// An action result arrived, but the action was not running.
    #[error("an action result arrived, but no action is running")]
    ActionNotRunning,
}

/// One caller's attempt at one request; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Attempt {
    operation: Operation,
    key: Key,
    fingerprint: Fingerprint,
    owner: OwnerToken,
    options: Options,
    jitter: SplitMix64,
    phase: Phase,
    /// The command awaiting its reply, and when it was sent.
    outstanding: Option<(CommandKind, Timestamp)>,
    /// When the first `InFlight` came back, plus the waiter deadline.
    wait_deadline: Option<Timestamp>,
    /// Waiting polls so far, for the backoff.
    waits: u32,
    /// When the first reserve since the last definite reserve reply was sent. A reserve
    /// whose reply was lost may have been applied then, and a retry by the same owner gets
    /// that reservation back unchanged (`I11`), so the lease is counted from here.
    reserve_first_sent: Option<Timestamp>,
    /// Whether the reserve now out (or last answered) was sent early because of a change
    /// notice.
    sent_on_notice: bool,
    /// Notices before this instant are not acted on: the last one proved spurious (the key
    /// was still held), so a store that notifies too eagerly cannot make a waiter spin.
    notices_from: Timestamp,
    lease_lost: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommandKind {
    Reserve,
    Renew,
    Complete,
    Release,
}

#[derive(Debug, Clone)]
enum Phase {
    /// Reserve (or, while waiting, reserve again) at `not_before`.
    Reserving {
        not_before: Timestamp,
        retries: u32,
    },
    /// The action is (about to be) running.
    Running(Running),
    /// Record the result.
    Completing {
        body: Option<Body>,
        stored_body: bool,
        protection: Protection,
        /// When the last confirmed lease ends (caller's clock); `None` when unprotected.
        confirmed_until: Option<Timestamp>,
        not_before: Timestamp,
        retries: u32,
    },
    /// Give the key up after a failed action.
    Releasing {
        not_before: Timestamp,
        retries: u32,
    },
    Finished(Outcome),
}

#[derive(Debug, Clone)]
struct Running {
    run_handed_out: bool,
    protection: Protection,
    result: Option<ActionResult>,
    /// When to send the next renewal (caller's clock).
    next_renew: Timestamp,
    /// When the last confirmed lease ends, counted from when its command was sent.
    confirmed_until: Timestamp,
    /// Failed renewals in a row, for the backoff.
    renew_failures: u32,
}

impl Attempt {
    /// A new attempt for `fingerprint` under `operation` and `key`, holding `owner`
    /// (fresh, random, unique to this attempt) and drawing backoff jitter from
    /// `jitter_seed`. Nothing is sent until the first [`poll`](Self::poll), at or after
    /// `now`.
    pub fn new(
        operation: Operation,
        key: Key,
        fingerprint: Fingerprint,
        owner: OwnerToken,
        jitter_seed: u64,
        options: Options,
        now: Timestamp,
    ) -> Self {
        Self {
            operation,
            key,
            fingerprint,
            owner,
            options,
            jitter: SplitMix64(jitter_seed),
            phase: Phase::Reserving {
                not_before: now,
                retries: 0,
            },
            outstanding: None,
            wait_deadline: None,
            waits: 0,
            reserve_first_sent: None,
            sent_on_notice: false,
            notices_from: now,
            lease_lost: false,
        }
    }

    /// The operation the attempt is scoped to.
    pub fn operation(&self) -> &Operation {
        &self.operation
    }
    /// The idempotency key.
    pub fn key(&self) -> &Key {
        &self.key
    }
    /// The request's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }
    /// The attempt's owner token.
    pub fn owner(&self) -> OwnerToken {
        self.owner
    }
    /// The options the attempt runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Whether the attempt is over.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Finished(_))
    }

    /// The state of the reservation at `now`, for a driver that tells a running action
    /// when its lease is lost.
    pub fn lease(&self, now: Timestamp) -> LeaseState {
        match &self.phase {
            Phase::Running(running) if running.protection == Protection::Reserved => {
                if self.lease_lost {
                    LeaseState::Lost
                } else if now >= running.confirmed_until {
                    LeaseState::Unconfirmed
                } else {
                    LeaseState::Held
                }
            }
            _ => LeaseState::None,
        }
    }

    /// The next thing to do at `now`; see [`Step`].
    pub fn poll(&mut self, now: Timestamp) -> Step {
        if self.outstanding.is_some() {
            // One command at a time; while it is out, only the action's own deadline
            // (the lease) is of interest.
            return Step::Wait {
                until: self.lease_watch(now),
            };
        }
        match &mut self.phase {
            Phase::Finished(outcome) => Step::Done(outcome.clone()),
            Phase::Reserving {
                not_before,
                retries: _,
            } => {
                if now < *not_before {
                    return Step::Wait {
                        until: Some(*not_before),
                    };
                }
                self.send(CommandKind::Reserve, now)
            }
            Phase::Running(running) => {
                if !running.run_handed_out {
                    running.run_handed_out = true;
                    return Step::Run;
                }
                if let Some(result) = running.result.take() {
                    let protection = running.protection;
                    let confirmed_until =
                        (protection == Protection::Reserved).then_some(running.confirmed_until);
                    self.finish_action(result, protection, confirmed_until, now);
                    return self.poll(now);
                }
                if running.protection == Protection::Reserved && !self.lease_lost {
                    if now >= running.next_renew {
                        return self.send(CommandKind::Renew, now);
                    }
                    // Wake for the renewal, or earlier when the confirmed lease runs
                    // out first (a driver then tells the action its lease is unconfirmed).
                    let mut until = running.next_renew;
                    if now < running.confirmed_until {
                        until = until.min(running.confirmed_until);
                    }
                    return Step::Wait { until: Some(until) };
                }
                Step::Wait { until: None }
            }
            Phase::Completing { not_before, .. } => {
                if now < *not_before {
                    return Step::Wait {
                        until: Some(*not_before),
                    };
                }
                self.send(CommandKind::Complete, now)
            }
            Phase::Releasing { not_before, .. } => {
                if now < *not_before {
                    return Step::Wait {
                        until: Some(*not_before),
                    };
                }
                self.send(CommandKind::Release, now)
            }
        }
    }

    /// The store answered the outstanding command.
    ///
    /// A reply that does not answer the outstanding command (a store bug) is handled as a
    /// store failure of that command.
    pub fn handle_reply(&mut self, reply: Reply, now: Timestamp) -> Result<(), ProtocolError> {
        let (kind, sent_at) = self
            .outstanding
            .take()
            .ok_or(ProtocolError::NoCommandOutstanding)?;
        if !matches!(reply, Reply::InFlight { .. }) {
            self.sent_on_notice = false;
        }
        match (kind, reply) {
            (CommandKind::Reserve, Reply::Reserved(reservation))
                if reservation.owner == self.owner =>
            {
                // The grant may be an earlier, lost reserve's: count from its send.
                let granted_from = self.reserve_first_sent.take().unwrap_or(sent_at);
                self.phase = Phase::Running(Running {
                    run_handed_out: false,
                    protection: Protection::Reserved,
                    result: None,
                    next_renew: granted_from.saturating_add(self.options.renew_every()),
                    confirmed_until: granted_from.saturating_add(self.options.lease()),
                    renew_failures: 0,
                });
            }
            (CommandKind::Reserve, Reply::InFlight { .. }) => {
                // Someone else holds the key: any earlier grant of ours is gone.
                self.reserve_first_sent = None;
                if std::mem::take(&mut self.sent_on_notice) {
                    self.notices_from = now.saturating_add(self.options.backoff_initial());
                }
                self.in_flight(now);
            }
            (CommandKind::Reserve, Reply::Replay { body }) => {
                self.phase = Phase::Finished(Outcome::Replayed { body });
            }
            (CommandKind::Reserve, Reply::KeyReuse { stored }) => {
                self.phase = Phase::Finished(Outcome::KeyReuse {
                    stored,
                    given: self.fingerprint,
                });
            }
            (CommandKind::Renew, Reply::Renewed(reservation))
                if reservation.owner == self.owner =>
            {
                if let Phase::Running(running) = &mut self.phase {
                    running.renew_failures = 0;
                    running.confirmed_until = sent_at.saturating_add(self.options.lease());
                    running.next_renew = sent_at.saturating_add(self.options.renew_every());
                }
            }
            (CommandKind::Renew, Reply::Refused(_)) => {
                // The lease is gone: stop renewing, and say so in the outcome.
                self.lease_lost = true;
            }
            (CommandKind::Complete, Reply::Completed(completion)) => {
                // A late complete means the reservation lapsed during the action; an action
                // that ran unprotected (fail-open) had no reservation to lose. A repeated
                // complete answers for an earlier one whose reply was lost, applied at some
                // moment before `now`: if the confirmed lease had ended by `now`, that one
                // may have been late, and the lapse cannot be ruled out (`I7`).
                let lapsed = match completion {
                    Completion::InTime => false,
                    Completion::AfterLeaseExpiry => true,
                    Completion::Repeated => self
                        .completing_confirmed_until()
                        .is_some_and(|until| now >= until),
                };
                if lapsed && self.completing_reserved() {
                    self.lease_lost = true;
                }
                self.finish_complete(|stored_body| {
                    if stored_body {
                        Recording::Stored
                    } else {
                        Recording::StoredWithoutBody
                    }
                });
            }
            (CommandKind::Complete, Reply::Refused(refusal)) => {
                self.lease_lost |= self.completing_reserved();
                self.finish_complete(|_| Recording::Refused(refusal));
            }
            (CommandKind::Release, Reply::Released) => {
                self.phase = Phase::Finished(Outcome::ActionFailed { released: true });
            }
            (CommandKind::Release, Reply::Refused(_)) => {
                // Nothing of ours is left under the key: as good as released.
                self.phase = Phase::Finished(Outcome::ActionFailed { released: true });
            }
            (kind, _) => {
                self.outstanding = Some((kind, sent_at));
                return self.handle_store_error(now);
            }
        }
        Ok(())
    }

    /// The outstanding command failed and its effect is unknown: it may or may not have
    /// been applied (timeout, dropped connection, any store error).
    ///
    /// Every command the machine sends is safe to repeat (`I11`, `Completion::Repeated`),
    /// so a failed reserve, complete or release is retried up to
    /// [`Options::store_retries`] times; a failed renewal is retried at the next interval.
    pub fn handle_store_error(&mut self, now: Timestamp) -> Result<(), ProtocolError> {
        let (kind, _) = self
            .outstanding
            .take()
            .ok_or(ProtocolError::NoCommandOutstanding)?;
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
                    self.phase = Phase::Finished(Outcome::StoreUnavailable);
                } else {
                    self.phase = Phase::Running(Running {
                        run_handed_out: false,
                        protection: Protection::FailedOpen,
                        result: None,
                        next_renew: now,
                        confirmed_until: now,
                        renew_failures: 0,
                    });
                }
            }
            (Phase::Running(running), CommandKind::Renew) => {
                running.renew_failures = running.renew_failures.saturating_add(1);
                let retry = self
                    .options
                    .backoff_initial()
                    .saturating_mul(1 << running.renew_failures.min(16))
                    .min(self.options.renew_every());
                running.next_renew = now.saturating_add(retry);
            }
            (
                Phase::Completing {
                    not_before,
                    retries,
                    ..
                },
                CommandKind::Complete,
            ) => {
                if *retries < max {
                    *retries += 1;
                    *not_before = now.saturating_add(delay);
                } else {
                    // As for a repeated complete: if the confirmed lease had ended by now,
                    // the complete may have landed late, and a lapse cannot be ruled out.
                    let lapsed = self
                        .completing_confirmed_until()
                        .is_some_and(|until| now >= until);
                    if lapsed && self.completing_reserved() {
                        self.lease_lost = true;
                    }
                    self.finish_complete(|_| Recording::Unknown);
                }
            }
            (
                Phase::Releasing {
                    not_before,
                    retries,
                },
                CommandKind::Release,
            ) => {
                if *retries < max {
                    *retries += 1;
                    *not_before = now.saturating_add(delay);
                } else {
                    self.phase = Phase::Finished(Outcome::ActionFailed { released: false });
                }
            }
            // The phase always matches the outstanding command: `send` sets both.
            _ => {}
        }
        Ok(())
    }

    /// The action finished. Its result is acted on at the next [`poll`](Self::poll), once
    /// no command is outstanding.
    pub fn handle_action_result(
        &mut self,
        result: ActionResult,
        _now: Timestamp,
    ) -> Result<(), ProtocolError> {
        match &mut self.phase {
            Phase::Running(running) if running.run_handed_out && running.result.is_none() => {
                running.result = Some(result);
                Ok(())
            }
            _ => Err(ProtocolError::ActionNotRunning),
        }
    }

    /// The store reported that the key's record changed (completed, released, or
    /// deleted), for a driver whose store can notify. A waiter then reserves again at the
    /// next [`poll`](Self::poll) instead of sleeping out its backoff; in any other phase
    /// the notice changes nothing. Returns whether it moved the machine.
    ///
    /// Notices are only a shortcut: the machine is correct without them, since a waiter
    /// polls with backoff until its deadline.
    ///
    /// A notice that proves spurious (the reserve it triggered finds the key still held)
    /// makes the machine ignore notices for the next initial backoff; see
    /// [`notices_from`](Self::notices_from).
    pub fn handle_record_changed(&mut self, now: Timestamp) -> bool {
        if self.notices_from(now).is_none_or(|from| now < from) {
            return false;
        }
        match &mut self.phase {
            Phase::Reserving { not_before, .. } if *not_before > now => {
                *not_before = now;
                self.sent_on_notice = true;
                true
            }
            _ => false,
        }
    }

    /// While the attempt waits for another holder of the key (its last reserve was answered
    /// "in flight"), the instant from which a change notice is acted on: a driver whose
    /// store notifies listens from then, together with the [`Step::Wait`] timer. `None`
    /// when the attempt is not waiting for a holder.
    pub fn notices_from(&self, now: Timestamp) -> Option<Timestamp> {
        let waiting = self.outstanding.is_none()
            && self.wait_deadline.is_some()
            && self.reserve_first_sent.is_none()
            && matches!(self.phase, Phase::Reserving { .. });
        waiting.then_some(self.notices_from.max(now))
    }

    /// The command that settles what this attempt may hold in the store, for a driver that
    /// abandons it now (its caller went away mid-call) or that saw it end
    /// [`Outcome::StoreUnavailable`]; `None` when nothing needs settling.
    ///
    /// - A reserve was sent and not answered otherwise (it may have landed), the action runs
    ///   or failed, or a release is due: a release, so a retry need not wait out the lease
    ///   (`I5`, `I6`). This includes a fail-closed refusal, one of whose failed reserves may
    ///   have been applied.
    /// - The action succeeded: the complete that records it, never a release, because the
    ///   effect happened (`I7`).
    ///
    /// Every command returned is one the machine itself could send, and safe to repeat.
    pub fn settlement(&self) -> Option<Command> {
        let release = Command::Release { owner: self.owner };
        match &self.phase {
            Phase::Reserving { .. } => self.reserve_first_sent.map(|_| release),
            Phase::Running(running) => match &running.result {
                Some(result @ (ActionResult::Succeeded(_) | ActionResult::Unrecordable)) => {
                    Some(self.complete_command(self.recordable(result).0))
                }
                Some(ActionResult::Failed) | None => Some(release),
            },
            Phase::Completing { body, .. } => Some(self.complete_command(body.clone())),
            Phase::Releasing { .. } | Phase::Finished(Outcome::StoreUnavailable) => Some(release),
            Phase::Finished(_) => None,
        }
    }

    fn complete_command(&self, body: Option<Body>) -> Command {
        Command::Complete {
            owner: self.owner,
            fingerprint: self.fingerprint,
            body,
            retention: self.options.retention(),
        }
    }

    /// What of a successful result is recorded, and whether that is its whole body. Rule 9:
    /// an oversized result is returned to the caller but not stored; the record is completed
    /// without it, so a retry gets a clear error and never a second effect. An unrecordable
    /// one likewise.
    fn recordable(&self, result: &ActionResult) -> (Option<Body>, bool) {
        match result {
            ActionResult::Succeeded(body) if body.len() <= self.options.max_body_bytes() => {
                (Some(body.clone()), true)
            }
            ActionResult::Succeeded(_) | ActionResult::Unrecordable | ActionResult::Failed => {
                (None, false)
            }
        }
    }

    fn send(&mut self, kind: CommandKind, now: Timestamp) -> Step {
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
                Phase::Completing { body, .. } => body.clone(),
                // `poll` sends a complete only from `Completing`.
                _ => None,
            }),
            CommandKind::Release => Command::Release { owner },
        };
        if kind == CommandKind::Reserve {
            self.reserve_first_sent.get_or_insert(now);
        }
        self.outstanding = Some((kind, now));
        Step::Send(command)
    }

    fn in_flight(&mut self, now: Timestamp) {
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

    fn finish_action(
        &mut self,
        result: ActionResult,
        protection: Protection,
        confirmed_until: Option<Timestamp>,
        now: Timestamp,
    ) {
        self.phase = match result {
            // The effect happened: record it, with its body where rule 9 allows.
            ActionResult::Succeeded(_) | ActionResult::Unrecordable => {
                let (body, stored_body) = self.recordable(&result);
                Phase::Completing {
                    body,
                    stored_body,
                    protection,
                    confirmed_until,
                    not_before: now,
                    retries: 0,
                }
            }
            // I5: a failure is never recorded; the key is given back.
            ActionResult::Failed => Phase::Releasing {
                not_before: now,
                retries: 0,
            },
        };
    }

    fn finish_complete(&mut self, recording: impl FnOnce(bool) -> Recording) {
        if let Phase::Completing {
            stored_body,
            protection,
            ..
        } = &self.phase
        {
            let execution = Execution {
                protection: *protection,
                record: recording(*stored_body),
                lease_lost: self.lease_lost,
            };
            self.phase = Phase::Finished(Outcome::Executed(execution));
        }
    }

    /// When the lease of the action whose result is being recorded was last confirmed to
    /// end.
    fn completing_confirmed_until(&self) -> Option<Timestamp> {
        match self.phase {
            Phase::Completing {
                confirmed_until, ..
            } => confirmed_until,
            _ => None,
        }
    }

    /// Whether the result being recorded came from an action run under a reservation.
    fn completing_reserved(&self) -> bool {
        matches!(
            self.phase,
            Phase::Completing {
                protection: Protection::Reserved,
                ..
            }
        )
    }

    fn retries_so_far(&self) -> u32 {
        match &self.phase {
            Phase::Reserving { retries, .. }
            | Phase::Completing { retries, .. }
            | Phase::Releasing { retries, .. } => *retries,
            Phase::Running(_) | Phase::Finished(_) => 0,
        }
    }

    /// The lease end worth waking up for, while the action runs and the lease is held.
    fn lease_watch(&self, now: Timestamp) -> Option<Timestamp> {
        match &self.phase {
            Phase::Running(running)
                if running.protection == Protection::Reserved
                    && !self.lease_lost
                    && running.result.is_none()
                    && now < running.confirmed_until =>
            {
                Some(running.confirmed_until)
            }
            _ => None,
        }
    }

    /// Capped exponential backoff with "equal jitter": half the delay fixed, half random.
    fn backoff(&mut self, n: u32) -> Duration {
        let initial = self.options.backoff_initial();
        let cap = self.options.backoff_max();
        let full = initial.saturating_mul(1u32 << n.min(20)).min(cap);
        let half = full / 2;
        let spread = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
        let extra = if spread == 0 {
            0
        } else {
            self.jitter.next() % (spread + 1)
        };
        half + Duration::from_micros(extra)
    }
}

/// A small, seeded, portable generator for backoff jitter (not for tokens).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn the_jitter_generator_is_splitmix64() {
        // The reference implementation's first outputs for seed 0: the jitter of a seeded
        // attempt is the same on every platform and in every version that keeps this test.
        let mut g = SplitMix64(0);
        assert_eq!(g.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next(), 0x6e78_9e6a_a1b9_65f4);
    }
}
