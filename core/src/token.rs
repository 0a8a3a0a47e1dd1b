//! The owner token that fences stale holders (MODEL.md, `I2`).

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// The identity of one attempt's reservation.
///
/// Complete, renew and release act only for the token that holds the key, so a holder that
/// lost its lease can never overwrite, extend or delete the record of the holder that took
/// over. The token must be unpredictable and unique per attempt: 128 random bits from the
/// caller's random source (the core draws no randomness of its own).
///
/// Kept as two 64-bit halves, high first (so tokens order as their 128-bit values do), not
/// as a `u128`: a `u128` is aligned to 16 bytes, and every record, command, reply and
/// attempt holding a token would be too, padded to it, and allocated through the slower
/// aligned path of allocators whose blocks only promise 8.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerToken {
    high: u64,
    low: u64,
}

impl OwnerToken {
    /// A token from 128 random bits supplied by the caller.
    pub const fn from_u128(bits: u128) -> Self {
        Self {
            high: (bits >> 64) as u64,
            low: bits as u64,
        }
    }

    /// The token's bits.
    pub const fn as_u128(self) -> u128 {
        ((self.high as u128) << 64) | self.low as u128
    }

    /// The token as 16 big-endian bytes.
    pub const fn to_bytes(self) -> [u8; 16] {
        self.as_u128().to_be_bytes()
    }

    /// The token from 16 big-endian bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self::from_u128(u128::from_be_bytes(bytes))
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.as_u128())
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({:032x})", self.as_u128())
    }
}

/// A string that is not 32 lowercase hex digits was given as an [`OwnerToken`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("owner token must be 32 lowercase hex digits")]
pub struct ParseOwnerTokenError;

impl FromStr for OwnerToken {
    type Err = ParseOwnerTokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(ParseOwnerTokenError);
        }
        u128::from_str_radix(s, 16)
            .map(Self::from_u128)
            .map_err(|_| ParseOwnerTokenError)
    }
}
