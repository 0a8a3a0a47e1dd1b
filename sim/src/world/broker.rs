//! The broker (MODEL.md `C1`): each message delivered at least once, to consumers that run
//! every delivery as a call under the message's key (the real attempt, with every store,
//! network and action fault a request meets) and tell the broker what the core's decision
//! says (`CallEnd::of_outcome`, `Redelivery::dispose`). The broker delivers a message again
//! when a consumer asks (after the delay it gives) and when a delivery's ack-wait runs out
//! unacknowledged: its consumer crashed, its ack was lost, or its handler is still running.

use std::fmt::Write as _;

use idem_check::EventKind;
use idem_core::{CallEnd, Disposition, Outcome, StoredResult};

use super::World;
use super::drive::Caller;
use super::events::Event;
use crate::faults::Exercised;
use crate::plan::ActionPlan;

/// What the broker holds of one message.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Deliveries made so far.
    deliveries: u32,
    /// The worker of its latest delivery.
    current: Option<usize>,
    /// The broker got a nak for its latest delivery and holds the message for its delay.
    naked: bool,
    /// The broker got its ack, or its dead-lettering: it delivers it no more.
    settled: bool,
}

impl World<'_> {
    /// The broker delivers message `m` (again, unless `published`): a consumer's call
    /// under its key, its ack-wait counted from now.
    pub(super) fn deliver(&mut self, m: usize, published: bool) {
        let plans = self.plan;
        let plan = &plans.messages[m];
        let held = &mut self.held[m];
        if held.settled {
            return;
        }
        held.deliveries += 1;
        held.naked = false;
        let delivery = held.deliveries;
        let worker = self.workers.len();
        held.current = Some(worker);
        if published && plan.copy > 0 {
            self.exercised(Exercised::DuplicatePublish);
        }
        self.report.broker.deliveries += 1;
        let action = plan
            .actions
            .get(delivery as usize - 1)
            .copied()
            .unwrap_or(ActionPlan::charge(50));
        let caller = Caller {
            slot: plan.slot,
            fingerprint: plan.fingerprint,
            options: &plan.options,
            clock_offset: plan.clock_offset,
            client: u32::MAX,
            try_no: delivery,
            message: Some(m as u32),
        };
        self.spawn(caller, action);
        self.note(
            worker,
            EventKind::Delivered {
                message: m,
                delivery,
            },
        );
        trace!(
            self,
            "broker delivers m{m} ({}), delivery {delivery} -> w{worker}",
            if published { "published" } else { "again" }
        );
        self.at(
            self.now + plan.ack_wait,
            Event::AckWait {
                message: m as u32,
                delivery,
            },
        );
        self.drive(worker);
    }

    /// Delivery `delivery` of message `m` reaches its ack-wait: if the broker has neither
    /// its ack nor its nak, and delivered the message no more since, it delivers it again.
    pub(super) fn ack_wait(&mut self, m: usize, delivery: u32) {
        let held = &self.held[m];
        if held.settled || held.naked || held.deliveries != delivery {
            return;
        }
        let running = held.current.is_some_and(|w| self.workers[w].live());
        let class = if running {
            Exercised::AckWaitWhileRunning
        } else {
            Exercised::AckWaitRedelivery
        };
        self.exercised(class);
        self.report.broker.ack_wait_redeliveries += 1;
        trace!(
            self,
            "broker: the ack-wait of m{m} delivery {delivery} runs out ({})",
            class.name()
        );
        self.deliver(m, false);
    }

    /// The consumer's call for a delivery ended with `outcome`: it tells the broker what
    /// the core decides.
    pub(super) fn dispose(&mut self, worker: usize, outcome: &Outcome) {
        let w = &mut self.workers[worker];
        w.answered = true;
        if w.disposed {
            // The broken consumer acknowledged already.
            return;
        }
        w.disposed = true;
        let Some(m) = w.message else {
            return;
        };
        let delivery = w.try_no;
        let end = CallEnd::of_outcome(outcome);
        let seed = self.rng.next_u64();
        let disposition = self.plan.messages[m as usize]
            .redelivery
            .dispose(end, delivery, seed);
        let replay = matches!(
            outcome,
            Outcome::Replayed {
                result: StoredResult::Value(_) | StoredResult::NotStored
            }
        );
        self.tell_broker(worker, disposition, replay);
    }

    /// The consumer tells the broker `disposition` for the delivery `worker` runs (an ack
    /// may be lost on its way); the broker settles the message, holds it for the delay, or
    /// (a nak for a delivery it already delivered again after its ack-wait) ignores it.
    pub(super) fn tell_broker(&mut self, worker: usize, disposition: Disposition, replay: bool) {
        let Some(m) = self.workers[worker].message.map(|m| m as usize) else {
            return;
        };
        let delivery = self.workers[worker].try_no;
        let lost = disposition == Disposition::Ack
            && self.plan.messages[m]
                .acks_lost
                .get(delivery as usize - 1)
                .copied()
                .unwrap_or(false);
        self.note(worker, EventKind::Disposed { disposition, lost });
        match disposition {
            Disposition::Ack => {
                self.report.broker.acks += 1;
                if replay {
                    self.exercised(Exercised::AckedReplay);
                }
                if lost {
                    self.report.broker.acks_lost += 1;
                    self.exercised(Exercised::AckLost);
                }
            }
            Disposition::Redeliver { .. } => {
                self.report.broker.redeliveries += 1;
                self.exercised(Exercised::Redelivered);
            }
            Disposition::DeadLetter(reason) => {
                self.report.broker.dead_letters.add(reason);
                self.exercised(Exercised::DeadLettered);
            }
        }
        trace!(
            self,
            "w{worker} tells the broker {disposition:?} for m{m} delivery {delivery}{}",
            if lost { ", and it is LOST" } else { "" }
        );
        let held = &mut self.held[m];
        if held.settled || lost {
            return;
        }
        match disposition {
            Disposition::Ack | Disposition::DeadLetter(_) => held.settled = true,
            Disposition::Redeliver { after } => {
                if held.deliveries == delivery && !held.naked {
                    held.naked = true;
                    let at = self.now + after.as_millis() as u64;
                    self.at(
                        at,
                        Event::Deliver {
                            message: m as u32,
                            published: false,
                        },
                    );
                } else {
                    trace!(
                        self,
                        "broker ignores the nak: m{m} was delivered again since delivery {delivery}"
                    );
                }
            }
        }
    }
}
