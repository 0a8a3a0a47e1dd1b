//! What a set of runs exercised, so that a test can assert that its schedules reached the
//! paths it claims to check (a takeover, a renewal, a replay, a lost lease) instead of
//! passing because nothing interesting happened.

use std::fmt;

use idem_check::{Answer, EventKind, History, Received};
use idem_core::record::{Record, Reply, StoredResult};
use idem_core::{Abandonment, Outcome, Protection, Timestamp};

/// Counts of paths taken, summed over runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Runs counted.
    pub runs: u64,
    /// Outcomes `Executed`.
    pub executed: u64,
    /// Outcomes `Replayed`.
    pub replayed: u64,
    /// Outcomes `KeyReuse`.
    pub key_reuse: u64,
    /// Outcomes `InProgress`.
    pub in_progress: u64,
    /// Outcomes `ActionFailed`.
    pub action_failed: u64,
    /// Outcomes `StoreUnavailable`.
    pub store_unavailable: u64,
    /// Executions that ran unprotected (`FailedOpen`).
    pub failed_open: u64,
    /// Executions that reported `lease_lost`.
    pub lease_lost: u64,
    /// Callers that crashed mid-action.
    pub crashes: u64,
    /// Renewals granted.
    pub renewals: u64,
    /// Reservations granted over another owner's expired reservation.
    pub takeovers: u64,
    /// Store replies lost after the command was applied.
    pub lost_replies: u64,
    /// Commands the store never answered, given up by their attempt at its reply deadline.
    pub hung: u64,
    /// Times an attempt's machine said its lease was held (each checked against the store).
    pub lease_views: u64,
    /// Keys charged more than once in a run (each excused, or the run failed).
    pub repeated_effects: u64,
    /// Outcomes `Panicked`.
    pub panicked: u64,
    /// Replays of a panicked action's record ("outcome unknown").
    pub unknown_replays: u64,
    /// Outcomes `CorruptRecord`.
    pub corrupt: u64,
    /// Attempts abandoned by their driver.
    pub abandoned: u64,
    /// Settlements that left the key of an action dropped mid-run to its lease.
    pub actions_dropped: u64,
    /// Releases sent by a settlement that freed a reservation.
    pub settlement_releases: u64,
}

impl Coverage {
    /// What one run exercised.
    pub fn of(history: &History) -> Self {
        let mut c = Coverage {
            runs: 1,
            ..Coverage::default()
        };
        let mut abandoned: Vec<usize> = Vec::new();
        for (index, event) in history.events.iter().enumerate() {
            match &event.kind {
                EventKind::Finished(outcome) => match outcome {
                    Outcome::Executed(execution) => {
                        c.executed += 1;
                        c.lease_lost += u64::from(execution.lease_lost);
                        c.failed_open += u64::from(execution.protection == Protection::FailedOpen);
                    }
                    Outcome::Replayed { result } => {
                        c.replayed += 1;
                        c.unknown_replays += u64::from(*result == StoredResult::Panicked);
                    }
                    Outcome::KeyReuse { .. } => c.key_reuse += 1,
                    Outcome::InProgress => c.in_progress += 1,
                    Outcome::ActionFailed { .. } => c.action_failed += 1,
                    Outcome::StoreUnavailable => c.store_unavailable += 1,
                    Outcome::Panicked(execution) => {
                        c.panicked += 1;
                        c.lease_lost += u64::from(execution.lease_lost);
                    }
                    Outcome::CorruptRecord => c.corrupt += 1,
                    // Only a settlement ends so; these worlds run no transactional actions.
                    Outcome::Abandoned(_) | Outcome::RolledBack { .. } | Outcome::CommitUnknown => {
                    }
                },
                EventKind::Crashed => c.crashes += 1,
                EventKind::Abandoned => {
                    c.abandoned += 1;
                    abandoned.push(event.who);
                }
                EventKind::Settled(outcome) => {
                    c.actions_dropped +=
                        u64::from(*outcome == Outcome::Abandoned(Abandonment::ActionDropped));
                }
                EventKind::LeaseView { .. } => c.lease_views += 1,
                EventKind::Received(Received::GivenUp) => c.hung += 1,
                EventKind::Store(step) => {
                    let Answer::Reply(reply) = &step.answer else {
                        continue;
                    };
                    // Applied, and what came back was a failure: the reply was lost.
                    let lost = history.events.get(index + 1).is_some_and(|next| {
                        next.who == event.who
                            && matches!(next.kind, EventKind::Received(Received::Failed))
                    });
                    c.lost_replies += u64::from(lost);
                    match reply {
                        Reply::Renewed(_) => c.renewals += 1,
                        Reply::Reserved(granted) => {
                            let now = Timestamp::from_millis(event.at);
                            let takeover = matches!(&step.before, Some(record @ Record::Pending { .. })
                                if record.owner() != granted.owner && record.is_expired(now));
                            c.takeovers += u64::from(takeover);
                        }
                        Reply::Released => {
                            c.settlement_releases += u64::from(abandoned.contains(&event.who));
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        c.repeated_effects = (0..history.keys.len())
            .filter(|k| history.statement.count(k) > 1)
            .count() as u64;
        c
    }

    /// Every count, by name.
    pub fn counts(&self) -> [(&'static str, u64); 21] {
        [
            ("executed", self.executed),
            ("replayed", self.replayed),
            ("key_reuse", self.key_reuse),
            ("in_progress", self.in_progress),
            ("action_failed", self.action_failed),
            ("store_unavailable", self.store_unavailable),
            ("failed_open", self.failed_open),
            ("lease_lost", self.lease_lost),
            ("crashes", self.crashes),
            ("renewals", self.renewals),
            ("takeovers", self.takeovers),
            ("lost_replies", self.lost_replies),
            ("hung", self.hung),
            ("lease_views", self.lease_views),
            ("repeated_effects", self.repeated_effects),
            ("panicked", self.panicked),
            ("unknown_replays", self.unknown_replays),
            ("corrupt", self.corrupt),
            ("abandoned", self.abandoned),
            ("actions_dropped", self.actions_dropped),
            ("settlement_releases", self.settlement_releases),
        ]
    }

    /// Adds another count to this one.
    pub fn add(&mut self, other: &Coverage) {
        self.runs += other.runs;
        self.executed += other.executed;
        self.replayed += other.replayed;
        self.key_reuse += other.key_reuse;
        self.in_progress += other.in_progress;
        self.action_failed += other.action_failed;
        self.store_unavailable += other.store_unavailable;
        self.failed_open += other.failed_open;
        self.lease_lost += other.lease_lost;
        self.crashes += other.crashes;
        self.renewals += other.renewals;
        self.takeovers += other.takeovers;
        self.lost_replies += other.lost_replies;
        self.hung += other.hung;
        self.lease_views += other.lease_views;
        self.repeated_effects += other.repeated_effects;
        self.panicked += other.panicked;
        self.unknown_replays += other.unknown_replays;
        self.corrupt += other.corrupt;
        self.abandoned += other.abandoned;
        self.actions_dropped += other.actions_dropped;
        self.settlement_releases += other.settlement_releases;
    }

    /// The paths never taken, by name.
    pub fn missing(&self) -> Vec<&'static str> {
        self.missing_of(&self.counts().map(|(name, _)| name))
    }

    /// Which of `names` were never taken (an unknown name counts as never taken).
    pub fn missing_of(&self, names: &[&'static str]) -> Vec<&'static str> {
        let counts = self.counts();
        names
            .iter()
            .copied()
            .filter(|name| !counts.iter().any(|(n, count)| n == name && *count > 0))
            .collect()
    }
}

impl fmt::Display for Coverage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} runs:", self.runs)?;
        for (index, (name, count)) in self.counts().into_iter().enumerate() {
            let sep = if index == 0 { "" } else { "," };
            write!(f, "{sep} {} {count}", name.replace('_', " "))?;
        }
        Ok(())
    }
}
