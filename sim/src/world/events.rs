//! The event queue: what happens next, on simulated milliseconds, ordered by (time,
//! sequence), and what comes back to a caller for one command.

use std::cmp::Ordering;

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

#[derive(Debug)]
pub(super) struct Queued {
    pub(super) at: u64,
    pub(super) seq: u64,
    pub(super) event: Event,
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    // Reversed: the heap pops the earliest (time, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}
