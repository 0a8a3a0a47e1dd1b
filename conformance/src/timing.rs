//! When, on a store's clock, a command was decided.

use std::fmt;

use idem_core::Timestamp;

/// The instant, on the store's own clock (MODEL.md, rule 10), at which a store decided a
/// command: exactly, when the store says (a SQL store returns the instant its statement
/// judged by), or as a window read from the store's clock before and after the command.
///
/// The kit steps the record machine at every instant the timing allows and accepts the
/// store's reply if it agrees at one of them, so a window costs only precision: a store
/// that is off by less than the window's width passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// At this instant.
    At(Timestamp),
    /// At some instant in this window, both ends included.
    Within(Timestamp, Timestamp),
}

impl Timing {
    /// The first and last instant the timing allows, in milliseconds.
    pub fn bounds(self) -> (u64, u64) {
        match self {
            Timing::At(now) => (now.as_millis(), now.as_millis()),
            Timing::Within(from, to) => (from.as_millis(), to.as_millis().max(from.as_millis())),
        }
    }

    /// The last instant the timing allows.
    pub fn latest(self) -> Timestamp {
        Timestamp::from_millis(self.bounds().1)
    }
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Timing::At(now) => write!(f, "at {} ms", now.as_millis()),
            Timing::Within(from, to) => {
                write!(f, "within {}..={} ms", from.as_millis(), to.as_millis())
            }
        }
    }
}
