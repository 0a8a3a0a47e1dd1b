//! The event queue: what happens next, on simulated milliseconds, ordered by (time,
//! sequence), and what comes back to a caller for one command.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use idem_core::{Command, Reply};

#[derive(Debug)]
pub(super) enum Event {
    Try {
        client: u32,
        late: bool,
    },
    ClientTimeout {
        client: u32,
        try_no: u32,
    },
    /// The caller of a try goes away at the point its plan names.
    CallerGone {
        worker: u32,
    },
    Wake {
        worker: u32,
    },
    Resume {
        worker: u32,
    },
    Arrive {
        worker: u32,
        cmd: u32,
        command: Command,
    },
    Reply {
        worker: u32,
        cmd: u32,
        answer: Answer,
    },
    Effect {
        worker: u32,
    },
    ActionDone {
        worker: u32,
    },
    Crash {
        worker: u32,
    },
    Pause {
        worker: u32,
        length: u64,
    },
    Notice {
        worker: u32,
    },
    /// The broker delivers a message: first when it is published, then again when a
    /// consumer's redelivery delay has passed.
    Deliver {
        message: u32,
        published: bool,
    },
    /// A delivery's ack-wait runs out: unless the broker got its ack or nak, it delivers
    /// the message again.
    AckWait {
        message: u32,
        delivery: u32,
    },
    /// A transactional complete that inserted its record, applied by the store earlier,
    /// commits now (MODEL.md, "Simulation": late commits).
    CommitLands {
        worker: u32,
        cmd: u32,
        command: Command,
    },
}

/// What comes back to a caller for one command.
#[derive(Debug)]
pub(super) enum Answer {
    /// The store applied the command and answered.
    Reply(Reply),
    /// The store refused the command (an outage): its effect is unknown to the caller.
    Refused,
    /// The key holds a value that is not a record: the store changed nothing.
    Corrupt,
}

/// The events still to happen. The heap orders small keys (time, sequence, slot) and the
/// events wait in slots beside it, so a push or pop moves a few words, not an event: the
/// order is (time, sequence) either way, and sequences are unique, so runs are unchanged.
#[derive(Debug, Default)]
pub(super) struct Queue {
    order: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Option<Event>>,
    free: Vec<usize>,
}

impl Queue {
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Self {
            order: BinaryHeap::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            free: Vec::new(),
        }
    }

    /// Queues `event` at simulated time `at`, after every event queued before it at `at`
    /// (`seq` grows with each push).
    pub(super) fn push(&mut self, at: u64, seq: u64, event: Event) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                self.slots.len() - 1
            }
        };
        self.order.push(Reverse((at, seq, slot)));
    }

    /// The earliest event and its time.
    pub(super) fn pop(&mut self) -> Option<(u64, Event)> {
        let Reverse((at, _, slot)) = self.order.pop()?;
        // Every key in the heap names a slot its push filled, and only this pop empties it.
        let event = self.slots.get_mut(slot).and_then(Option::take)?;
        self.free.push(slot);
        Some((at, event))
    }
}
