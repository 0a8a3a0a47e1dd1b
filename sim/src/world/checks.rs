//! The checks of a run, named for MODEL.md's invariants: each store step judged by the
//! store's true clock, each answer a client gets, the attempt's view of its lease, and at
//! the end the cause of every extra effect.

use std::fmt::Write as _;

use idem_core::record::Write;
use idem_core::{
    Abandonment, Command, Completion, Fingerprint, LeaseState, Outcome, OwnerToken, Protection,
    Record, Recording, Reply, StoredResult, Timestamp,
};

use super::World;
use crate::faults::Exercised;
use crate::report::{Cause, Charge, Check};

impl World<'_> {
    /// The attempt's promise about its lease: while it says `Held`, the store holds the
    /// caller's live reservation, and the store's lease lasts at least as long as the
    /// attempt believes (so a driver that stops the action when the lease is no longer
    /// held never runs it past a lease the store has already ended).
    pub(super) fn check_lease(&mut self, worker: usize, clock: u64) {
        let w = &self.workers[worker];
        if w.lease_misreported || w.attempt.lease(Timestamp::from_millis(clock)) != LeaseState::Held
        {
            return;
        }
        let owner = w.attempt.owner();
        let store_now = self.store_now();
        let honest = match &self.records[self.storage[w.slot]] {
            Some(Record::Pending {
                owner: holder,
                lease_until,
                ..
            }) if *holder == owner && lease_until.as_millis() > store_now => {
                // The store's lease end, on this caller's clock.
                let end = (lease_until.as_millis() - store_now).saturating_add(clock);
                w.attempt.lease(Timestamp::from_millis(end)) != LeaseState::Held
            }
            _ => false,
        };
        if !honest {
            let detail = format!(
                "w{worker} is told its lease is held until after the store's lease ends: \
                 store has {:?} at t+{store_now}ms",
                self.records[self.storage[w.slot]]
            );
            self.workers[worker].lease_misreported = true;
            self.violation(Check::HeldLeaseIsLive, detail);
        }
    }

    /// `I12`: the store files the record under the caller's operation and key, byte for
    /// byte.
    pub(super) fn check_key_verbatim(&mut self, worker: usize) {
        let attempt = &self.workers[worker].attempt;
        let given = attempt.key().as_str();
        let filed = self.variant.stored_key(given);
        if filed != given {
            let detail = format!(
                "w{worker}'s key of {} characters is filed under {} characters",
                given.len(),
                filed.len()
            );
            self.violation(Check::KeysVerbatim, detail);
        }
    }

    /// `I5`: a complete carries the result of its owner's own successful action; rule 11:
    /// after a panic, and only then, it carries `StoredResult::Panicked`.
    pub(super) fn check_recorded_result(&mut self, worker: usize, command: &Command) {
        let Command::Complete { result, .. } = command else {
            return;
        };
        let w = &self.workers[worker];
        let (check, fine) = match result {
            StoredResult::Panicked => (Check::PanicIsOutcomeUnknown, w.panicked),
            _ if w.panicked => (Check::PanicIsOutcomeUnknown, false),
            StoredResult::Value(body) => {
                let fine = match (w.action.fails, w.charge) {
                    (false, Some(charge)) => {
                        !w.action.unrecordable
                            && body.as_bytes() == self.report.charges[charge].id().as_bytes()
                    }
                    _ => false,
                };
                (Check::FailuresNotRecorded, fine)
            }
            StoredResult::NotStored => (
                Check::FailuresNotRecorded,
                !w.action.fails && w.charge.is_some() && w.action.unrecordable,
            ),
        };
        if !fine {
            let detail = format!(
                "w{worker} records {result:?} after {}",
                if w.panicked { "a panic" } else { "no panic" }
            );
            self.violation(check, detail);
        }
    }

    /// Rule 11: an owner whose action may have had its effect never gives its key back: not
    /// after a panic, not after its action was dropped mid-run.
    pub(super) fn check_abnormal_command(&mut self, worker: usize, command: &Command) {
        if !matches!(command, Command::Release { .. }) {
            return;
        }
        let (panicked, dropped) = {
            let w = &self.workers[worker];
            (w.panicked, w.dropped_at.is_some())
        };
        if panicked {
            let detail = format!("w{worker} releases its key after its action panicked");
            self.violation(Check::PanicIsOutcomeUnknown, detail);
        }
        if dropped {
            let detail = format!("w{worker} releases its key after its action was dropped mid-run");
            self.violation(Check::DroppedActionKeepsKey, detail);
        }
    }

    /// Whether the key of `worker` started out holding a value that is not a record.
    fn on_corrupt_key(&self, worker: usize) -> bool {
        self.plan.slots[self.storage[self.workers[worker].slot]].corrupt
    }

    /// Rule 11: an attempt the store answered "corrupt" never runs its action.
    pub(super) fn check_run_on_corrupt_key(&mut self, worker: usize) {
        if self.workers[worker].corrupt_before_run {
            let detail =
                format!("w{worker} runs its action after the store said its key holds no record");
            self.violation(Check::CorruptRecordRunsNothing, detail);
        }
    }

    /// Rule 11: nothing is charged under a key that holds a value that is not a record,
    /// but by an attempt that failed open without ever being answered.
    pub(super) fn check_charge_on_corrupt_key(&mut self, worker: usize) {
        let w = &self.workers[worker];
        if self.on_corrupt_key(worker) && (!w.unprotected || w.corrupt_before_run) {
            let detail = format!("w{worker} charges under a key that holds no record");
            self.violation(Check::CorruptRecordRunsNothing, detail);
        }
    }

    /// Rule 11: every answer under a key that holds a value that is not a record is
    /// `CorruptRecord`, but for an attempt the store never answered (fail-closed, or
    /// failed open and ran unprotected).
    pub(super) fn check_answer_on_corrupt_key(&mut self, worker: usize, outcome: &Outcome) {
        if !self.on_corrupt_key(worker) {
            return;
        }
        let w = &self.workers[worker];
        let unanswered_run = w.unprotected && !w.corrupt_before_run;
        let fine = match outcome {
            Outcome::CorruptRecord => true,
            Outcome::Abandoned(Abandonment::Settled | Abandonment::LeftToLease) => true,
            Outcome::StoreUnavailable => !w.corrupt_before_run,
            Outcome::Abandoned(Abandonment::ActionDropped) | Outcome::ActionFailed { .. } => {
                unanswered_run
            }
            Outcome::Executed(execution) | Outcome::Panicked(execution) => {
                execution.protection == Protection::FailedOpen && unanswered_run
            }
            Outcome::Replayed { .. }
            | Outcome::KeyReuse { .. }
            | Outcome::InProgress
            | Outcome::RolledBack { .. }
            | Outcome::CommitUnknown => false,
        };
        if !fine {
            let detail = format!("w{worker} ends {outcome:?} under a key that holds no record");
            self.violation(Check::CorruptRecordRunsNothing, detail);
        }
    }

    /// The checks of one store step, judged by the store's true clock.
    pub(super) fn check_step(
        &mut self,
        worker: usize,
        before: Option<&Record>,
        command: &CommandSummary,
        reply: &Reply,
        write: &Write,
    ) {
        let store_now = Timestamp::from_millis(self.store_now());
        let live = before.filter(|record| !record.is_expired(store_now));
        let expired = before.is_some() && live.is_none();
        let changed = *write != Write::Unchanged;
        let fail = |world: &mut Self, check: Check, what: &str| {
            let detail = format!(
                "w{worker} {} on {before:?} at {store_now}: {reply:?}, {write:?} ({what})",
                command.name
            );
            world.violation(check, detail);
        };
        // I1: a live reservation of another owner is never replaced by a new one.
        if let (
            Some(Record::Pending { owner: holder, .. }),
            Write::Put(Record::Pending { owner, .. }),
        ) = (live, write)
            && owner != holder
        {
            fail(self, Check::OneLiveHolder, "a second live holder");
        }
        // I2: complete, renew and release change nothing for a non-owner.
        if let (Some(owner), Some(record)) = (command.owner_only, live)
            && record.owner() != owner
            && changed
        {
            fail(self, Check::OwnerOnly, "a non-owner changed the record");
        }
        // I3: a live completed record never changes.
        if matches!(live, Some(Record::Completed { .. })) && changed {
            fail(
                self,
                Check::CompletedUnchanged,
                "a completed record changed",
            );
        }
        if let Some(fingerprint) = command.reserve {
            // I4: another fingerprint is refused.
            if let Some(record) = live
                && record.fingerprint() != fingerprint
                && !matches!(reply, Reply::KeyReuse { .. })
            {
                fail(
                    self,
                    Check::KeyReuseRefused,
                    "another fingerprint not refused",
                );
            }
            // I9: an expired record is absent, so the reserve is granted.
            if expired && !matches!(reply, Reply::Reserved(_)) {
                fail(self, Check::ExpiredIsAbsent, "an expired record answered");
            }
            // I11: the holder's repeated reserve is its reservation, unchanged.
            if let Some(Record::Pending {
                owner, lease_until, ..
            }) = live
                && Some(*owner) == command.owner
            {
                let same =
                    matches!(reply, Reply::Reserved(r) if r.lease_until == Some(*lease_until));
                if !same || changed {
                    fail(self, Check::ReserveIdempotent, "the reservation moved");
                }
            }
            match (reply, before) {
                (Reply::Reserved(_), Some(Record::Pending { owner, .. }))
                    if expired && Some(*owner) != command.owner =>
                {
                    self.exercised(Exercised::LeaseTakeover);
                }
                (Reply::Reserved(_), Some(Record::Completed { .. })) if expired => {
                    self.exercised(Exercised::RetentionExpired);
                }
                (Reply::InFlight { .. }, _) => self.exercised(Exercised::InFlight),
                (Reply::KeyReuse { .. }, _) => self.exercised(Exercised::KeyReuse),
                _ => {}
            }
        }
        // The reporting half of I7: a complete or renewal that finds the key no longer the
        // caller's (by the store's true clock) means the lease lapsed during the action.
        if matches!(command.name, "complete" | "renew")
            && let Some(owner) = command.owner_only
            && live.is_none_or(|record| record.owner() != owner)
        {
            self.workers[worker].lapsed = true;
        }
        // I5: a release never records anything.
        if command.name == "release" && matches!(write, Write::Put(Record::Completed { .. })) {
            fail(self, Check::FailuresNotRecorded, "a failure was recorded");
        }
        // I10: a renewal never shortens the lease.
        if command.name == "renew"
            && let (Some(Record::Pending { lease_until, .. }), Reply::Renewed(renewed)) =
                (live, reply)
            && renewed.lease_until.is_none_or(|until| until < *lease_until)
        {
            fail(self, Check::LeaseNeverShrinks, "the lease shrank");
        }
        // I6: the reservation of a holder that stopped renewing (it crashed, or its action
        // was dropped) is not reported in flight past its lease, counted from the last
        // renewal it may have sent then.
        if let (Reply::InFlight { .. }, Some(Record::Pending { owner, .. })) = (reply, live)
            && let Some(holder) = self.worker_of(*owner)
            && let Some(stopped_at) = self.workers[holder]
                .crashed_at
                .or(self.workers[holder].dropped_at)
        {
            let lease = self.workers[holder].attempt.options().lease().as_millis() as u64;
            let bound = stopped_at + lease + self.plan.network.max_delay;
            if self.now > bound {
                fail(
                    self,
                    Check::DeadHolderFreesKey,
                    "a dead holder still holds the key",
                );
            }
        }
        match reply {
            Reply::Completed(Completion::AfterLeaseExpiry) => {
                self.exercised(Exercised::LateComplete);
            }
            Reply::Completed(Completion::Repeated) => {
                self.exercised(Exercised::RepeatedComplete);
            }
            Reply::Refused(_) => self.exercised(Exercised::Refused),
            _ => {}
        }
    }

    /// `I8`: a replayed result is a charge made for this key by the same request.
    pub(super) fn check_replay(
        &mut self,
        worker: usize,
        slot: usize,
        fingerprint: Fingerprint,
        text: &str,
    ) {
        let made = text
            .strip_prefix("ch_")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.report.charges.get(i))
            .is_some_and(|charge| {
                charge.slot == slot
                    && self.workers[charge.worker as usize].attempt.fingerprint() == fingerprint
            });
        if !made {
            self.violation(
                Check::ReplayIsTheResult,
                format!("w{worker} replayed {text}, not a charge of its own request"),
            );
        }
    }

    /// `I8`: a replay without a body answers an execution of the same request whose result
    /// could not be recorded.
    pub(super) fn check_bodiless_replay(
        &mut self,
        worker: usize,
        slot: usize,
        fingerprint: Fingerprint,
    ) {
        let made = self.report.charges.iter().any(|charge| {
            let by = &self.workers[charge.worker as usize];
            charge.slot == slot && by.action.unrecordable && by.attempt.fingerprint() == fingerprint
        });
        if !made {
            self.violation(
                Check::ReplayIsTheResult,
                format!("w{worker} replayed no body, but no execution went unrecorded"),
            );
        }
    }

    /// Rule 11: a replay of `StoredResult::Panicked` ("outcome unknown") answers a request
    /// whose own execution panicked.
    pub(super) fn check_panic_replay(
        &mut self,
        worker: usize,
        slot: usize,
        fingerprint: Fingerprint,
    ) {
        let made = self
            .workers
            .iter()
            .any(|by| by.slot == slot && by.panicked && by.attempt.fingerprint() == fingerprint);
        if !made {
            self.violation(
                Check::PanicIsOutcomeUnknown,
                format!(
                    "w{worker} is answered \"outcome unknown\", but no such execution panicked"
                ),
            );
        }
    }

    /// `I7`: the first charge of a key is its effect; each further one must be explained
    /// by a cause the model allows (MODEL.md, "Non-guarantees"), one cause per charge.
    pub(super) fn classify_effects(&mut self, slot: usize) {
        let charges: Vec<Charge> = self
            .report
            .charges
            .iter()
            .filter(|charge| charge.slot == slot)
            .copied()
            .collect();
        if charges.len() < 2 {
            return;
        }
        let extras = charges.len() - 1;
        let mut causes = Vec::with_capacity(charges.len());
        for (i, charge) in charges.iter().enumerate() {
            let cause = self.cause_of(charge.worker as usize, &charges).or_else(|| {
                let at = charge.at + self.plan.store_offset;
                charges[..i]
                    .iter()
                    .filter_map(|earlier| self.workers[earlier.worker as usize].recorded_until)
                    .any(|until| at >= until)
                    .then_some(Cause::RetentionExpired)
            });
            causes.extend(cause);
        }
        for cause in causes.iter().take(extras) {
            self.report.extra.add(*cause);
        }
        if causes.len() < extras {
            let mut detail = format!(
                "{} charges for {} {} with {} allowed:",
                charges.len(),
                self.plan.slots[slot].operation.as_str(),
                self.plan.slots[slot].key.as_str(),
                causes.len()
            );
            for charge in &charges {
                let w = &self.workers[charge.worker as usize];
                let _ = write!(
                    detail,
                    " {} by w{} ({:?});",
                    charge.id(),
                    charge.worker,
                    w.outcome
                );
            }
            self.violation(Check::OneEffectPerKey, detail);
        }
    }

    /// The allowed cause a charge by `worker` brings with it, if any: each such charge
    /// allows one extra charge of its key (`charges`, every charge of the key).
    ///
    /// A holder that crashed, or whose action was dropped mid-run, leaves its key held
    /// until its lease ends: its charge explains another only when the holder of another
    /// charge got the key at or after that lease end, on the store's clock. A panic is no
    /// cause: the key of a panicked action is completed ("outcome unknown").
    pub(super) fn cause_of(&self, worker: usize, charges: &[Charge]) -> Option<Cause> {
        let w = &self.workers[worker];
        if w.unprotected {
            return Some(Cause::FailOpen);
        }
        let gone = if w.crashed_at.is_some() {
            Some(Cause::HolderCrashed)
        } else if w.outcome == Some(Outcome::Abandoned(Abandonment::ActionDropped)) {
            Some(Cause::AbandonedMidAction)
        } else {
            None
        };
        if let Some(cause) = gone {
            let lease_end = w.lease_end?;
            let taken_over = charges.iter().any(|other| {
                other.worker as usize != worker
                    && self.workers[other.worker as usize]
                        .granted_at
                        .is_some_and(|granted| granted >= lease_end)
            });
            return taken_over.then_some(cause);
        }
        match &w.outcome {
            Some(Outcome::Executed(execution) | Outcome::Panicked(execution)) => {
                if execution.protection == Protection::FailedOpen {
                    Some(Cause::FailOpen)
                } else if execution.lease_lost {
                    Some(Cause::LeaseExpired)
                } else if execution.record == Recording::Unknown {
                    Some(Cause::CompleteUnknown)
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

/// What the checks need of a command, taken before the command is consumed.
pub(super) struct CommandSummary {
    pub(super) name: &'static str,
    /// The token of any command that carries one.
    owner: Option<OwnerToken>,
    /// The token of a complete, renew or release (owner-only commands, `I2`).
    owner_only: Option<OwnerToken>,
    /// The fingerprint of a reserve.
    reserve: Option<Fingerprint>,
}

impl CommandSummary {
    pub(super) fn of(command: &Command) -> Self {
        let (owner, owner_only, reserve) = match command {
            Command::Reserve {
                owner, fingerprint, ..
            } => (Some(*owner), None, Some(*fingerprint)),
            Command::Complete { owner, .. }
            | Command::Renew { owner, .. }
            | Command::Release { owner } => (Some(*owner), Some(*owner), None),
            Command::Read => (None, None, None),
        };
        Self {
            name: command.name(),
            owner,
            owner_only,
            reserve,
        }
    }
}
