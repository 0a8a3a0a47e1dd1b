//! The event queue: what happens next, on simulated milliseconds, ordered by (time,
//! sequence); the commands and answers events carry (`Parcels`); and what comes back to a
//! caller for one command.

use idem_core::Reply;

/// Something that happens at a simulated instant. Two words: a command or an answer waits in
/// a [`Parcels`] slot and the event names the slot, so that queueing, taking and dispatching
/// an event copies a few registers rather than the hundred-odd bytes of a command (the
/// events that carried them, copied at offsets their one-byte tag shifted, were the hottest
/// instructions of a run).
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
        command: Parcel,
    },
    Reply {
        worker: u32,
        cmd: u32,
        answer: Parcel,
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
        command: Parcel,
    },
}

// An event stays two words: a field that would carry a command or a record fails the build
// here.
const _: () = assert!(std::mem::size_of::<Event>() <= 16);

/// What events carry that is larger than they are (commands, answers), each in a slot of its
/// own from its event's queueing until it is handled: slots are reused, so a command in
/// transit costs no allocation.
#[derive(Debug)]
pub(super) struct Parcels<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

/// A slot of [`Parcels`], named by an event. Neither `Copy` nor `Clone`: [`Parcels::put`]
/// makes the only one for its item, and [`Parcels::take`] uses it up, so no item is taken
/// twice and none is taken by the next item put in its slot.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parcel(u32);

impl<T> Default for Parcels<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Parcels<T> {
    /// Keeps `item` until its parcel is taken.
    pub(super) fn put(&mut self, item: T) -> Parcel {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(item);
                Parcel(slot)
            }
            None => {
                self.slots.push(Some(item));
                // A run has at most a few hundred things in transit at once; its event
                // budget ends it long before four billion.
                Parcel(u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX))
            }
        }
    }

    /// The item `parcel` names, taken out; `None` only for a parcel older than the last
    /// [`clear`](Self::clear) (a run's events and its parcels are emptied together).
    pub(super) fn take(&mut self, parcel: Parcel) -> Option<T> {
        let item = self.slots.get_mut(parcel.0 as usize)?.take()?;
        self.free.push(parcel.0);
        Some(item)
    }

    /// Drops every item, keeping the room they took.
    pub(super) fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
    }
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

/// The events still to happen, latest first, each beside its time: the earliest comes off
/// the end. Events due at one time come out in the order they were queued, because a new
/// one goes in after every other due at its time (nearer the front). The order is total,
/// and runs are the same on every replay.
///
/// A sorted vector rather than a binary heap: a run holds about twenty events at a time, most
/// of them due soon, so a new one goes in near the end and the earliest comes off the end,
/// where a heap pays a descent through every level for each pop (a run spent 15% of its
/// instructions there), nor a radix heap (8% more instructions a run than this, and slower).
/// An event is two words, so it waits in the order itself: moving a few of them up for an
/// insert costs less than a slot of its own would.
#[derive(Debug, Default)]
pub(super) struct Queue {
    order: Vec<Queued>,
}

/// An event and its time.
#[derive(Debug)]
struct Queued {
    at: u64,
    event: Event,
}

impl Queue {
    /// Drops every event, keeping the room they took.
    pub(super) fn clear(&mut self) {
        self.order.clear();
    }

    /// Makes room for `more` events beyond those queued.
    pub(super) fn reserve(&mut self, more: usize) {
        self.order.reserve(more);
    }

    /// Queues `event` at simulated time `at`, after every event queued before it at `at`.
    pub(super) fn push(&mut self, at: u64, event: Event) {
        // Latest first: the new event goes after every later one and before every other due
        // at its time. Searched from the end, where the earliest are: most events are due
        // soon, so few are passed.
        let mut place = self.order.len();
        while place > 0 && self.order[place - 1].at <= at {
            place -= 1;
        }
        self.order.insert(place, Queued { at, event });
    }

    /// The earliest event and its time.
    pub(super) fn pop(&mut self) -> Option<(u64, Event)> {
        let Queued { at, event } = self.order.pop()?;
        Some((at, event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events come out by time, and in the order they were queued at one time, however they
    /// were queued.
    #[test]
    fn events_come_out_by_time_then_in_the_order_queued() {
        let mut queue = Queue::default();
        let times = [30, 10, 20, 10, 30, 10, 0];
        for (n, at) in times.into_iter().enumerate() {
            queue.push(at, Event::Wake { worker: n as u32 });
        }
        let mut order = Vec::new();
        while let Some((at, event)) = queue.pop() {
            let Event::Wake { worker } = event else {
                panic!("only wake-ups were queued");
            };
            order.push((at, worker));
        }
        assert_eq!(
            order,
            [(0, 6), (10, 1), (10, 3), (10, 5), (20, 2), (30, 0), (30, 4)]
        );
    }

    /// A parcel gives back what was put in it (taking it uses it up: a second take does not
    /// compile); its slot then holds the next one put, and a parcel from before a clear
    /// finds nothing.
    #[test]
    fn a_parcel_is_taken_once_and_its_slot_reused() {
        let mut parcels = Parcels::default();
        let first = parcels.put("first");
        let second = parcels.put("second");
        assert_eq!(first, Parcel(0));
        assert_eq!(parcels.take(first), Some("first"));
        let third = parcels.put("third");
        assert_eq!(third, Parcel(0), "the freed slot is reused");
        assert_eq!(parcels.slots.len(), 2);
        assert_eq!(parcels.take(second), Some("second"));
        assert_eq!(parcels.take(third), Some("third"));
        let left_over = parcels.put("left over");
        parcels.clear();
        assert_eq!(parcels.take(left_over), None);
    }

    /// An event queued after others were taken out still comes out after every event
    /// queued before it at its time, and before every later one.
    #[test]
    fn an_event_queued_between_pops_keeps_its_turn_at_its_time() {
        let mut queue = Queue::default();
        queue.push(10, Event::Wake { worker: 0 });
        queue.push(20, Event::Wake { worker: 1 });
        assert!(matches!(queue.pop(), Some((10, Event::Wake { worker: 0 }))));
        queue.push(20, Event::Wake { worker: 2 });
        queue.push(10, Event::Wake { worker: 3 });
        queue.push(20, Event::Wake { worker: 4 });
        let mut order = Vec::new();
        while let Some((at, event)) = queue.pop() {
            let Event::Wake { worker } = event else {
                panic!("only wake-ups were queued");
            };
            order.push((at, worker));
        }
        assert_eq!(order, [(10, 3), (20, 1), (20, 2), (20, 4)]);
    }
}
