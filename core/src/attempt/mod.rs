//! The attempt machine: one caller's protocol for one request (MODEL.md, "The attempt
//! machine").
//!
//! The machine makes every decision; its driver only moves commands, replies and time:
//!
//! ```text
//! loop {
//!     match attempt.poll(now) {
//!         Step::Send { command, reply_by } => issue it; feed handle_reply, handle_store_error
//!                                             or handle_corrupt_record, or give up at reply_by,
//!         Step::Run            => start the action; later feed handle_action_result,
//!         Step::Wait { until } => wait for the instant `until` or for any awaited input,
//!         Step::Done(outcome)  => return outcome,
//!     }
//! }
//! ```
//!
//! At most one store command is outstanding at a time, and [`Step::Run`] is handed out at
//! most once: while the action runs the machine keeps asking for renewals, and the driver
//! waits on the action, the outstanding command and the timer together. `now` is the
//! **caller's** clock; the store judges leases by its own (see [`time`](crate::time)).
//!
//! Every timer is the machine's (rule 12): when to reserve again, when to renew, how long a
//! store reply is awaited ([`Step::Send::reply_by`]), how store commands are retried, and how
//! an abandoned attempt is settled ([`Attempt::abandon`]).
//!
//! Randomness is an input: the owner token and the seed of the backoff jitter come from the
//! caller, so a seeded simulation replays an attempt exactly.

pub(crate) mod backoff;
mod lease;
mod outcome;
mod phase;
mod retry;
mod settle;
mod steps;
mod transaction;

use crate::options::Options;
use crate::record::{CommandKind, Completion, Reply};
use crate::time::Timestamp;
use crate::{Fence, Fingerprint, Key, Operation, OwnerToken};

use backoff::SplitMix64;
pub use lease::confirmed_lease;
pub use outcome::{
    Abandonment, ActionResult, Execution, LeaseState, Outcome, Protection, ProtocolError,
    Recording, Step,
};
use phase::{Acting, AfterRelease, Completing, Outstanding, Phase};

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
    /// The command awaiting its reply.
    outstanding: Option<Outstanding>,
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
    /// The driver abandoned the attempt: from then on it only settles.
    abandoned: bool,
    /// The action's effect is writes that commit with its complete ([`Attempt::in_transaction`]).
    transactional: bool,
    /// The command given up at its reply deadline by the last `poll`, not yet taken.
    given_up: Option<CommandKind>,
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
            abandoned: false,
            transactional: false,
            given_up: None,
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
    /// The fence of the attempt's grant (MODEL.md `F1`), while its action runs under it:
    /// `None` before the grant, when the action runs unprotected (fail-open), and on a store
    /// that hands out no fences.
    pub fn fence(&self) -> Option<Fence> {
        match &self.phase {
            Phase::Acting(acting) if acting.result.is_none() => acting.fence,
            _ => None,
        }
    }
    /// The options the attempt runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Whether the attempt is over.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Finished(_))
    }

    /// How the attempt ended, once it has.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.phase {
            Phase::Finished(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// Whether a command is out and its reply still awaited. Once this turns false without
    /// an input from the driver (its reply deadline passed at a [`poll`](Self::poll)), the
    /// driver drops the command and never feeds its reply.
    pub fn awaiting_reply(&self) -> bool {
        self.outstanding.is_some()
    }

    /// The command the last [`poll`](Self::poll) gave up because its reply deadline had
    /// passed, once: a driver drops that command (its reply must never be fed) and may count
    /// and log the give-up. The same `poll` may already have sent the next command, so
    /// [`awaiting_reply`](Self::awaiting_reply) alone does not tell.
    pub fn take_given_up(&mut self) -> Option<CommandKind> {
        self.given_up.take()
    }

    /// Whether the driver [abandoned](Self::abandon) the attempt.
    pub fn is_abandoned(&self) -> bool {
        self.abandoned
    }

    /// The next thing to do at `now`; see [`Step`].
    pub fn poll(&mut self, now: Timestamp) -> Step {
        if let Some(outstanding) = self.outstanding {
            if now < outstanding.reply_by {
                // One command at a time; while it is out, only its reply deadline and the
                // action's own deadline (the lease) are of interest.
                let until = match self.lease_watch(now) {
                    Some(lease) => lease.min(outstanding.reply_by),
                    None => outstanding.reply_by,
                };
                return Step::Wait { until: Some(until) };
            }
            // Rule 12: the reply deadline is the machine's. The command may still be
            // applied; every command is safe to repeat.
            self.given_up = Some(outstanding.kind);
            self.fail_outstanding(now);
        }
        match &mut self.phase {
            Phase::Finished(outcome) => Step::Done(outcome.clone()),
            Phase::Reserving { not_before, .. } => {
                if now < *not_before {
                    return Step::Wait {
                        until: Some(*not_before),
                    };
                }
                self.send(CommandKind::Reserve, now)
            }
            Phase::Acting(acting) => {
                if !acting.run_handed_out {
                    acting.run_handed_out = true;
                    return Step::Run;
                }
                if let Some(result) = acting.result.take() {
                    let protection = acting.protection;
                    let confirmed_until =
                        (protection == Protection::Reserved).then_some(acting.confirmed_until);
                    self.phase = self.after_action(result, protection, confirmed_until, now);
                    return self.poll(now);
                }
                if acting.protection == Protection::Reserved && !self.lease_lost {
                    if now >= acting.next_renew {
                        return self.send(CommandKind::Renew, now);
                    }
                    // Wake for the renewal, or earlier when the confirmed lease runs
                    // out first (a driver then tells the action its lease is unconfirmed).
                    let mut until = acting.next_renew;
                    if now < acting.confirmed_until {
                        until = until.min(acting.confirmed_until);
                    }
                    return Step::Wait { until: Some(until) };
                }
                Step::Wait { until: None }
            }
            Phase::Completing(Completing { not_before, .. }) => {
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
            Phase::Probing(Completing { not_before, .. }) => {
                if now < *not_before {
                    return Step::Wait {
                        until: Some(*not_before),
                    };
                }
                self.send(CommandKind::Read, now)
            }
        }
    }

    /// The store answered the outstanding command.
    ///
    /// A reply that does not answer the outstanding command (a store bug) is handled as a
    /// store failure of that command.
    pub fn handle_reply(&mut self, reply: Reply, now: Timestamp) -> Result<(), ProtocolError> {
        let Outstanding { kind, sent_at, .. } = self
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
                self.phase = Phase::Acting(Acting {
                    run_handed_out: false,
                    protection: Protection::Reserved,
                    result: None,
                    next_renew: granted_from.saturating_add(self.options.renew_every()),
                    confirmed_until: self.confirmed_from(granted_from),
                    renew_failures: 0,
                    fence: reservation.fence,
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
            (CommandKind::Reserve, Reply::Replay { result, .. }) => {
                self.reserve_first_sent = None;
                self.phase = Phase::Finished(Outcome::Replayed { result });
            }
            (CommandKind::Reserve, Reply::KeyReuse { stored }) => {
                self.reserve_first_sent = None;
                self.phase = Phase::Finished(Outcome::KeyReuse {
                    stored,
                    given: self.fingerprint,
                });
            }
            (CommandKind::Renew, Reply::Renewed(reservation))
                if reservation.owner == self.owner =>
            {
                let confirmed_until = self.confirmed_from(sent_at);
                if let Phase::Acting(acting) = &mut self.phase {
                    acting.renew_failures = 0;
                    acting.confirmed_until = confirmed_until;
                    acting.next_renew = sent_at.saturating_add(self.options.renew_every());
                }
            }
            (CommandKind::Renew, Reply::Refused(_)) => {
                // The lease is gone: stop renewing, and say so in the outcome.
                self.lease_lost = true;
            }
            (CommandKind::Complete, reply) if self.transactional => {
                self.transactional_completed(reply);
            }
            (CommandKind::Read, Reply::Read(record)) => self.probed(record.as_ref(), now),
            (CommandKind::Complete, Reply::Completed(completion)) => {
                // A late complete means the reservation lapsed during the action; an action
                // that ran unprotected (fail-open) had no reservation to lose. A repeated
                // complete answers for an earlier one whose reply was lost, applied at some
                // moment before `now`: if the confirmed lease had ended by `now`, that one
                // may have been late, and the lapse cannot be ruled out (`I7`).
                let lapsed = match completion {
                    Completion::InTime => false,
                    Completion::AfterLeaseExpiry => true,
                    Completion::Repeated => self.completing_lapsed_by(now),
                };
                if lapsed && self.completing_reserved() {
                    self.lease_lost = true;
                }
                self.finish_complete(None);
            }
            (CommandKind::Complete, Reply::Refused(refusal)) => {
                self.lease_lost |= self.completing_reserved();
                self.finish_complete(Some(Recording::Refused(refusal)));
            }
            (CommandKind::Release, Reply::Released | Reply::Refused(_)) => {
                // Refused: nothing of ours is left under the key, as good as released.
                self.finish_release(true);
            }
            (kind, _) => {
                self.outstanding = Some(Outstanding {
                    kind,
                    sent_at,
                    reply_by: now,
                });
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
    /// [`Options::store_retries`] times; a failed renewal is retried within the renewal
    /// interval.
    pub fn handle_store_error(&mut self, now: Timestamp) -> Result<(), ProtocolError> {
        if self.outstanding.is_none() {
            return Err(ProtocolError::NoCommandOutstanding);
        }
        self.fail_outstanding(now);
        Ok(())
    }

    /// The store answered the outstanding command, but the key holds a value that is not a
    /// record (another type, garbage bytes, an unknown encoding): the store changed nothing.
    ///
    /// This is not unavailability (rule 11): nothing is retried, nothing fails open, and
    /// nothing is written over the value. A reserve ends [`Outcome::CorruptRecord`]; a
    /// renewal marks the lease lost (the key is not this attempt's any more); a complete
    /// ends with [`Recording::CorruptRecord`]; a release counts as done (nothing of this
    /// attempt's is left under the key).
    pub fn handle_corrupt_record(&mut self, now: Timestamp) -> Result<(), ProtocolError> {
        let Outstanding { kind, .. } = self
            .outstanding
            .take()
            .ok_or(ProtocolError::NoCommandOutstanding)?;
        self.sent_on_notice = false;
        match kind {
            CommandKind::Reserve => {
                self.reserve_first_sent = None;
                self.phase = Phase::Finished(Outcome::CorruptRecord);
            }
            CommandKind::Renew => self.lease_lost = true,
            // A transactional complete refused by a corrupt value rolls its writes back.
            CommandKind::Complete if self.transactional => {
                self.phase = Phase::Finished(Outcome::RolledBack { released: true });
            }
            CommandKind::Complete => self.finish_complete(Some(Recording::CorruptRecord)),
            CommandKind::Release => self.finish_release(true),
            // A probe that finds the key unreadable cannot tell whether the commit landed.
            CommandKind::Read => self.phase = Phase::Finished(Outcome::CommitUnknown),
        }
        let _ = now;
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
            Phase::Acting(acting) if acting.run_handed_out && acting.result.is_none() => {
                acting.result = Some(result);
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
}
