//! How long a completed record that a store said has `remaining` left may be answered from a
//! process's memory (MODEL.md, "The replay cache"). A completed record never changes before
//! it expires (`I3`), so a copy is as good as the store's answer for as long as the record
//! lives; the copy is let go strictly before that (`I9`), with room for the two clocks'
//! rounding. The driver's replay cache enforces this; it decides nothing of its own.

use std::time::Duration;

/// How much less than its remaining time a record is kept, beyond the 1%: milliseconds lost
/// to rounding on either clock, and a store key that expires one millisecond early.
pub const REPLAY_LIFE_SLACK: Duration = Duration::from_millis(5);

/// How long a record known to live `remaining` more may be replayed from memory, counted from
/// the instant the command that learned it was sent: 1% and [`REPLAY_LIFE_SLACK`] less than
/// `remaining`, and never more than `max_age`.
pub fn replay_life(remaining: Duration, max_age: Duration) -> Duration {
    remaining
        .saturating_sub(remaining / 100)
        .saturating_sub(REPLAY_LIFE_SLACK)
        .min(max_age)
}
