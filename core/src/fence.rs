//! The fencing token a grant carries: the [`Fence`] (MODEL.md, `F1`).
//!
//! A lease can end while its holder still runs: a holder paused or cut off past its lease is
//! taken over, and then two attempts of one call run at once (MODEL.md `I7`). The downstream
//! key (`D1`) makes their two requests one request at a provider that deduplicates. A fence
//! does something else: it **orders** the holders. Every grant of a key carries a fence
//! greater than every fence granted for that key before, so a provider that stores the highest
//! fence it has applied for a key and refuses anything not above it refuses a stale holder's
//! write once the newer holder's has landed. A fence does not deduplicate: a stale holder's
//! write that lands *before* the newer holder's is accepted, and then the newer one replaces
//! it. What it stops is the stale write that lands after, overwriting newer state.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use crate::time::Timestamp;

/// The fencing token of one grant of a key (MODEL.md `F1`): on a store that hands them out,
/// strictly greater than every fence granted for that key before, the same for the holder's
/// whole reservation (its renewals and a repeated reserve carry it unchanged).
///
/// Fences of different keys are not comparable in any useful way (a store may draw them from
/// one counter or from several); a provider compares fences of one key only. A fence fits in
/// a signed 64-bit integer (a PostgreSQL `bigint`), and renders as its decimal digits.
///
/// ```
/// use idem_core::{Fence, Timestamp};
///
/// let first = Fence::next_after(None, Timestamp::from_millis(5));
/// let second = Fence::next_after(Some(first), Timestamp::from_millis(5));
/// assert!(second > first);
/// assert_eq!("5001".parse::<Fence>()?, second);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence(u64);

/// The largest fence: `i64::MAX`, so that every fence is a PostgreSQL `bigint`.
const MAX: u64 = i64::MAX as u64;

impl Fence {
    /// The smallest fence a store grants.
    pub const MIN: Self = Self(1);

    /// The fence with this value, if it is one: 1 to `i64::MAX`.
    pub const fn new(value: u64) -> Option<Self> {
        if value == 0 || value > MAX {
            None
        } else {
            Some(Self(value))
        }
    }

    /// The fence's value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The fence a store that counts fences grants next, given the last one it granted
    /// (`None`: none yet) and its clock: one above `last`, and at least `now` in
    /// microseconds. Starting from the clock keeps a store's fences rising across a restart
    /// that lost its counter, as long as its clock did not step back past the fences it had
    /// granted (MODEL.md, "Where the fence ends"). Saturates at the largest fence, which is
    /// centuries past any clock.
    #[must_use]
    pub fn next_after(last: Option<Fence>, now: Timestamp) -> Fence {
        let from_clock = now.as_millis().saturating_mul(1_000);
        let after_last = last.map_or(0, |fence| fence.0.saturating_add(1));
        Self(from_clock.max(after_last).clamp(1, MAX))
    }
}

/// A store's fence source that counts (MODEL.md `F1`): the last fence it granted, and
/// [`next`](Self::next), one above it and at least the clock ([`Fence::next_after`]). One
/// counter per record, or one for many records, keeps each record's fences rising.
///
/// ```
/// use idem_core::{FenceCounter, Timestamp};
///
/// let mut counter = FenceCounter::default();
/// let first = counter.next(Timestamp::from_millis(5));
/// assert!(counter.next(Timestamp::from_millis(5)) > first);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FenceCounter {
    last: Option<Fence>,
}

impl FenceCounter {
    /// The next fence at the store's clock `now`, remembered as the last one granted.
    pub fn next(&mut self, now: Timestamp) -> Fence {
        let fence = Fence::next_after(self.last, now);
        self.last = Some(fence);
        fence
    }

    /// The last fence granted, if any.
    pub fn last(&self) -> Option<Fence> {
        self.last
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fence({})", self.0)
    }
}

/// A string that is not a fence: not decimal digits, or not within 1 to `i64::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ParseFenceError {
    /// Empty, or something other than the digits 0 to 9 (no sign, no spaces).
    #[error("a fence is decimal digits only")]
    NotDigits,
    /// Zero or above `i64::MAX`.
    #[error("a fence is between 1 and {MAX}")]
    OutOfRange,
}

impl FromStr for Fence {
    type Err = ParseFenceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseFenceError::NotDigits);
        }
        // Digits only: the one way to fail is a number past 64 bits.
        s.parse::<u64>()
            .ok()
            .and_then(Fence::new)
            .ok_or(ParseFenceError::OutOfRange)
    }
}

impl TryFrom<i64> for Fence {
    type Error = ParseFenceError;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        u64::try_from(value)
            .ok()
            .and_then(Fence::new)
            .ok_or(ParseFenceError::OutOfRange)
    }
}

impl From<Fence> for i64 {
    fn from(fence: Fence) -> i64 {
        // Every fence is at most `i64::MAX` (`Fence::new`, `next_after`).
        i64::try_from(fence.0).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_fence_is_above_the_last_and_the_clock() {
        let at = Timestamp::from_millis;
        assert_eq!(Fence::next_after(None, at(0)), Fence::MIN);
        assert_eq!(Fence::next_after(None, at(7)).get(), 7_000);
        // The counter runs ahead of a clock that has not moved.
        let last = Fence::next_after(None, at(7));
        assert_eq!(Fence::next_after(Some(last), at(7)).get(), 7_001);
        // A clock that stepped back does not pull the fence back.
        assert_eq!(Fence::next_after(Some(last), at(3)).get(), 7_001);
        // And one far ahead saturates rather than wrapping.
        assert_eq!(Fence::next_after(None, at(u64::MAX)).get(), MAX);
        let top = Fence::new(MAX).unwrap();
        assert_eq!(Fence::next_after(Some(top), at(0)), top);
    }

    #[test]
    fn a_fence_is_decimal_digits_within_a_bigint() {
        assert_eq!("1".parse::<Fence>(), Ok(Fence::MIN));
        assert_eq!(
            "9223372036854775807".parse::<Fence>().map(Fence::get),
            Ok(MAX)
        );
        assert_eq!(
            "9223372036854775808".parse::<Fence>(),
            Err(ParseFenceError::OutOfRange)
        );
        assert_eq!("0".parse::<Fence>(), Err(ParseFenceError::OutOfRange));
        assert_eq!(
            "99999999999999999999999".parse::<Fence>(),
            Err(ParseFenceError::OutOfRange)
        );
        for bad in ["", "+1", "-1", " 1", "1 ", "0x10", "1e3"] {
            assert_eq!(
                bad.parse::<Fence>(),
                Err(ParseFenceError::NotDigits),
                "{bad:?}"
            );
        }
        let fence = Fence::new(42).unwrap();
        assert_eq!(fence.to_string().parse::<Fence>(), Ok(fence));
        assert_eq!(i64::from(fence), 42);
        assert_eq!(Fence::try_from(42_i64), Ok(fence));
        assert_eq!(Fence::try_from(0_i64), Err(ParseFenceError::OutOfRange));
        assert_eq!(Fence::try_from(-5_i64), Err(ParseFenceError::OutOfRange));
    }
}
