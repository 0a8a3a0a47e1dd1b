//! Transactional actions (MODEL.md, "Effects that commit with the record"): the action's
//! effect is writes in the store's own database, made in a transaction that the complete
//! joins. The store applies the complete inside that transaction and commits only if the
//! record machine recorded the result ([`commits`](crate::record::commits)), so the writes and the record commit
//! together or not at all. A holder whose lease ran out and was taken over cannot commit:
//! its writes roll back, and the effect happens once, by the holder that took over.
//!
//! What changes in the attempt:
//! - a complete is sent once, never retried outside the transaction: its reply decides
//!   between [`Outcome::Executed`] (committed; no lease can have been lost to a second
//!   effect) and [`Outcome::RolledBack`];
//! - a complete whose reply is lost is followed by reads of the record: completed by this
//!   owner, the commit landed ([`Outcome::Executed`]); still this attempt's own reservation,
//!   it did not (the reservation is released, [`Outcome::RolledBack`]); anything else (no
//!   record, or another owner's) proves nothing, since a commit still in progress may land
//!   after the read ([`Outcome::CommitUnknown`]);
//! - a panic, or an action dropped mid-run, takes its transaction with it, so nothing
//!   happened and the key is released.

use std::time::Duration;

use super::{AfterRelease, Attempt, Completing, Phase};
use crate::attempt::Outcome;
use crate::record::{Record, Reply, commits};
use crate::time::Timestamp;

impl Attempt {
    /// Marks the attempt's action as transactional: its effect is writes that commit with its
    /// complete, in one transaction of the store's database (see the `transaction` module
    /// docs). Set before the first [`poll`](Self::poll).
    #[must_use]
    pub fn in_transaction(mut self) -> Self {
        self.transactional = true;
        self
    }

    /// Whether the attempt's action is transactional.
    pub fn is_transactional(&self) -> bool {
        self.transactional
    }

    /// The reply to a complete sent inside the transaction: committed with it, or rolled
    /// back.
    pub(super) fn transactional_completed(&mut self, reply: Reply) {
        if commits(&reply) {
            // The writes committed with the record: nobody else can have committed an
            // effect under this key (I7 holds whatever the lease did).
            self.finish_complete(None);
        } else {
            // Refused, or an answer that is not a complete's: the transaction rolled back and
            // nothing of this attempt's is recorded.
            self.phase = Phase::Finished(Outcome::RolledBack { released: true });
        }
    }

    /// A transactional complete failed with its effect unknown: the commit may or may not
    /// have landed, and it cannot be sent again outside its transaction. Read the record.
    pub(super) fn transactional_complete_failed(&mut self, now: Timestamp, delay: Duration) {
        let phase = std::mem::replace(&mut self.phase, Phase::Finished(Outcome::CommitUnknown));
        if let Phase::Completing(completing) = phase {
            self.phase = Phase::Probing(Completing {
                not_before: now.saturating_add(delay),
                retries: 0,
                ..completing
            });
        }
    }

    /// What a read of the record says of a transactional commit.
    pub(super) fn probed(&mut self, record: Option<&Record>, now: Timestamp) {
        if !matches!(self.phase, Phase::Probing(_)) {
            return;
        }
        match record {
            Some(Record::Completed { owner, .. }) if *owner == self.owner => {
                // Committed: the record is completed by this very attempt.
                if let Phase::Probing(completing) = &self.phase {
                    self.phase = Phase::Completing(completing.clone());
                }
                self.finish_complete(None);
            }
            Some(Record::Pending { owner, .. }) if *owner == self.owner => {
                // Not committed, and never will be: the reservation is still ours, so the
                // complete was not applied (a store whose complete updates this record makes
                // the read wait for a commit in progress on it, and one whose complete has
                // not run by now never gets its transaction committed). Give it back.
                self.phase = Phase::Releasing {
                    not_before: now,
                    retries: 0,
                    after: AfterRelease::RolledBack,
                };
            }
            // Absent, or another owner's record: nothing says our commit will not land
            // still. A store's read need not wait for a commit in progress that inserts
            // the record (on PostgreSQL, a row the sweeper had removed is inserted again,
            // invisible until its transaction commits), so only a definite answer is
            // reported as one (`T1`: `RolledBack` only if the writes never commit).
            _ => self.phase = Phase::Finished(Outcome::CommitUnknown),
        }
    }
}
