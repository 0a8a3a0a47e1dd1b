//! Where owner tokens and backoff jitter seeds come from.
//!
//! Owner tokens must be unpredictable and unique per attempt (`I2`), so by default they are
//! drawn from the operating system's random source. A seeded source makes a test's tokens
//! and jitter the same on every run; it is predictable and meant for tests only.

use std::sync::atomic::{AtomicU64, Ordering};

use idem_core::OwnerToken;

#[derive(Debug)]
pub(crate) enum Entropy {
    /// The thread-local CSPRNG of `rand`, seeded from the OS.
    Os,
    /// A counter run through SplitMix64: a fixed sequence per seed.
    Seeded(AtomicU64),
}

impl Entropy {
    pub(crate) fn next_u64(&self) -> u64 {
        match self {
            Entropy::Os => rand::random(),
            Entropy::Seeded(state) => {
                let mut z = state
                    .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
                    .wrapping_add(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
        }
    }

    pub(crate) fn owner_token(&self) -> OwnerToken {
        let high = u128::from(self.next_u64());
        let low = u128::from(self.next_u64());
        OwnerToken::from_u128((high << 64) | low)
    }
}
