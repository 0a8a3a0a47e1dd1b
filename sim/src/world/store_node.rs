//! The store node: where each key is filed, each command applied at the store's own clock
//! (the real `record::apply_fenced`, every grant fenced from the node's own counter, or a
//! broken variant), a transactional complete committed or
//! rolled back with it, the step written down, and the reply and change notices sent back
//! over the network.

use std::fmt::Write as _;

use idem_check::{Answer as StoreAnswer, EventKind, Variant};
use idem_core::record::{Completion, Write};
use idem_core::{Command, Record, Reply, Timestamp};

use super::World;
use super::events::{Answer, Event};
use crate::faults::Exercised;
use crate::plan::{CALLER_EPOCH, Outage, OutageKind, Plan};

/// Where the store files each of the plan's keys: plan slots whose stored operation and key
/// are equal share the first such slot's record.
pub(super) fn storage_slots(plan: &Plan, variant: Variant) -> Vec<usize> {
    let filed = |i: usize| {
        let slot = &plan.slots[i];
        variant.files_as(slot.operation.as_str(), slot.key.as_str())
    };
    (0..plan.slots.len())
        .map(|i| (0..i).find(|&j| filed(j) == filed(i)).unwrap_or(i))
        .collect()
}

impl World<'_> {
    /// The store node: applies one command at its own clock, writes the step down, replies.
    pub(super) fn store_receives(&mut self, worker: usize, cmd: u32, command: Command) {
        let network = self.plan.network;
        match self.plan.outages.iter().find(|o| o.covers(self.now)) {
            Some(Outage {
                kind: OutageKind::Refusing,
                ..
            }) => {
                self.exercised(Exercised::StoreDown);
                trace!(self, "store is down: #{cmd} of w{worker} refused");
                self.stored(worker, command, None, StoreAnswer::NotApplied, None);
                let delay = self.rng.between(network.min_delay, network.max_delay);
                let answer = self.answers.put(Answer::Refused);
                self.at(
                    self.now + delay,
                    Event::Reply {
                        worker: worker as u32,
                        cmd,
                        answer,
                    },
                );
                return;
            }
            Some(Outage {
                kind: OutageKind::Silent,
                ..
            }) => {
                self.exercised(Exercised::StoreSilent);
                trace!(self, "store does not answer: #{cmd} of w{worker} swallowed");
                self.stored(worker, command, None, StoreAnswer::NotApplied, None);
                return;
            }
            None => {}
        }
        let stored = self.storage[self.workers[worker].slot];
        if let Some((lands, committer)) = self.committing[stored] {
            if command != Command::Read {
                // A writer meets the uncommitted insert and waits for its transaction.
                trace!(
                    self,
                    "#{cmd} {} of w{worker} waits for the commit in progress on its key",
                    command.name()
                );
                let command = self.commands.put(command);
                self.at(
                    lands,
                    Event::Arrive {
                        worker: worker as u32,
                        cmd,
                        command,
                    },
                );
                return;
            }
            // A reader does not see the uncommitted insert: it finds no record.
            if committer == worker {
                self.workers[worker].read_before_landing = true;
            }
        } else if self.commits_late(worker, stored, &command) {
            let timeout = self.workers[worker].attempt.options().reply_timeout();
            let timeout = timeout.as_millis() as u64;
            let lands = self.now + self.rng.between(2 * timeout, 10 * timeout);
            self.committing[stored] = Some((lands, worker));
            self.exercised(Exercised::CommitLate);
            trace!(
                self,
                "store applies #{cmd} complete of w{worker}, inserting its record; the \
                 commit lands at {lands}"
            );
            let command = self.commands.put(command);
            self.at(
                lands,
                Event::CommitLands {
                    worker: worker as u32,
                    cmd,
                    command,
                },
            );
            return;
        }
        self.apply_step(worker, cmd, command);
    }

    /// Whether this transactional complete inserts its record (the key holds none) and, as
    /// the network plan draws, commits late.
    fn commits_late(&mut self, worker: usize, stored: usize, command: &Command) -> bool {
        let w = &self.workers[worker];
        matches!(command, Command::Complete { .. })
            && w.transactional
            && w.written.is_some()
            && !self.garbage[stored]
            && self.records[stored].is_none()
            && self.rng.chance(self.plan.network.commit_late)
    }

    /// A late commit lands: the complete the store applied earlier is decided and committed
    /// now (nothing else could change the key meanwhile: writers waited, readers found no
    /// record), and answered; its attempt gave it up long ago.
    pub(super) fn commit_lands(&mut self, worker: usize, cmd: u32, command: Command) {
        let stored = self.storage[self.workers[worker].slot];
        self.committing[stored] = None;
        if self.workers[worker].read_before_landing {
            self.exercised(Exercised::CommitLandedAfterRead);
        }
        self.apply_step(worker, cmd, command);
    }

    /// Applies one command at the store's clock, writes the step down, commits or rolls
    /// back a transactional complete with it, and replies.
    fn apply_step(&mut self, worker: usize, cmd: u32, command: Command) {
        let slot = self.workers[worker].slot;
        let store_now = Timestamp::from_millis(self.store_now());
        let judged_at = if self.variant.judges_by_caller_clock() {
            // The caller's reading of the same wall time as the store's, off by its skew.
            let skew = self.caller_now(worker) - self.now;
            Timestamp::from_millis((store_now.as_millis() + skew).saturating_sub(CALLER_EPOCH))
        } else {
            store_now
        };
        let stored = self.storage[slot];
        let name = command.name();
        if self.garbage[stored] {
            let Some(transition) = self.variant.apply_to_garbage(command.clone(), judged_at) else {
                self.exercised(Exercised::CorruptRecord);
                trace!(
                    self,
                    "store applies #{cmd} {name} of w{worker}: the key holds no record"
                );
                self.stored(worker, command, None, StoreAnswer::Corrupt, None);
                self.reply(worker, cmd, Answer::Corrupt);
                return;
            };
            trace!(
                self,
                "store applies #{cmd} {name} of w{worker} to a value that is not a record: {:?}",
                transition.reply
            );
            let written = match transition.write {
                Write::Put(record) => {
                    self.garbage[stored] = false;
                    self.versions[stored] += 1;
                    self.records[stored] = Some(record.clone());
                    Some(record)
                }
                Write::Unchanged | Write::Delete => None,
            };
            let reply = StoreAnswer::Reply(transition.reply.clone());
            let complete = matches!(command, Command::Complete { .. });
            self.stored(worker, command, None, reply, written);
            if complete {
                self.commit_or_roll_back(worker, &transition.reply);
            }
            self.reply(worker, cmd, Answer::Reply(transition.reply));
            return;
        }
        let before = self.records[stored].take();
        let fences = &mut self.fences[stored];
        let transition =
            self.variant
                .apply_fenced(before.as_ref(), command.clone(), judged_at, || {
                    fences.next(store_now)
                });
        self.exercise_step(before.as_ref(), &command, &transition.reply);
        trace!(
            self,
            "store applies #{cmd} {name} of w{worker}: {:?}", transition.reply
        );
        let notify = self.plan.notices
            && matches!(
                transition.write,
                Write::Delete | Write::Put(Record::Completed { .. })
            );
        if transition.write != Write::Unchanged {
            self.versions[stored] += 1;
        }
        self.records[stored] = match transition.write {
            Write::Unchanged => before.clone(),
            Write::Put(record) => Some(record),
            Write::Delete => None,
        };
        let after = self.records[stored].clone();
        let answer = StoreAnswer::Reply(transition.reply.clone());
        let complete = matches!(command, Command::Complete { .. });
        self.stored(worker, command, before, answer, after);
        if complete {
            self.commit_or_roll_back(worker, &transition.reply);
        }
        if notify {
            self.notify(stored, worker);
        }
        self.reply(worker, cmd, Answer::Reply(transition.reply));
    }

    /// A transactional complete was applied inside its action's transaction, at this very
    /// step: the store commits the writes with it if the record machine recorded the result
    /// (`record::commits`, or the variant's rule), else the transaction rolls back.
    pub(super) fn commit_or_roll_back(&mut self, worker: usize, reply: &Reply) {
        let w = &self.workers[worker];
        if !w.transactional {
            return;
        }
        let Some(id) = w.written.clone() else {
            return;
        };
        if !self.variant.commits(reply) {
            self.exercised(Exercised::CommitRefused);
            trace!(
                self,
                "store rolls back the transaction of w{worker}: {id} never happened"
            );
            return;
        }
        self.exercised(Exercised::TransactionCommitted);
        self.workers[worker].charge = Some(self.history.statement.len());
        self.report.effects += 1;
        self.report.transactional_effects += 1;
        let at = self.store_now();
        self.history.commit(at, worker, id.clone());
        trace!(self, "store commits {id} of w{worker} with its record");
    }

    /// Writes a store step down.
    pub(super) fn stored(
        &mut self,
        worker: usize,
        command: Command,
        before: Option<Record>,
        answer: StoreAnswer,
        after: Option<Record>,
    ) {
        self.note(worker, EventKind::store(command, before, answer, after));
    }

    /// The paths a store step took, counted (the checks are the judge's).
    pub(super) fn exercise_step(
        &mut self,
        before: Option<&Record>,
        command: &Command,
        reply: &Reply,
    ) {
        let store_now = Timestamp::from_millis(self.store_now());
        let expired = before.is_some_and(|record| record.is_expired(store_now));
        if let Command::Reserve { owner, .. } = command {
            match (reply, before) {
                (Reply::Reserved(_), Some(Record::Pending { owner: holder, .. }))
                    if expired && holder != owner =>
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

    /// Sends an answer back over the network, which may lose or delay it.
    pub(super) fn reply(&mut self, worker: usize, cmd: u32, answer: Answer) {
        let network = self.plan.network;
        if self.rng.chance(network.reply_lost) {
            self.exercised(Exercised::ReplyLost);
            trace!(self, "the reply to #{cmd} of w{worker} is lost");
            return;
        }
        let mut delay = self.rng.between(network.min_delay, network.max_delay);
        if self.rng.chance(network.reply_late) {
            self.exercised(Exercised::ReplyLate);
            // Past the attempt's own reply deadline: by one to ten reply timeouts.
            let timeout = self.workers[worker].attempt.options().reply_timeout();
            let timeout = timeout.as_millis() as u64;
            delay += self.rng.between(timeout, timeout * 10);
        }
        let answer = self.answers.put(answer);
        self.at(
            self.now + delay,
            Event::Reply {
                worker: worker as u32,
                cmd,
                answer,
            },
        );
    }

    /// The store tells every other live caller of the key that its record changed; each
    /// notice travels (and may be lost) like any message.
    pub(super) fn notify(&mut self, stored: usize, writer: usize) {
        let network = self.plan.network;
        for other in 0..self.workers.len() {
            let w = &self.workers[other];
            if other == writer || self.storage[w.slot] != stored || !w.live() {
                continue;
            }
            if self.rng.chance(network.request_lost) {
                continue;
            }
            let delay = self.rng.between(network.min_delay, network.max_delay);
            self.at(
                self.now + delay,
                Event::Notice {
                    worker: other as u32,
                },
            );
        }
    }
}
