//! Capped exponential backoff with seeded jitter, the one retry schedule of an attempt:
//! waiting for a holder, and retrying a store command (the settlement of an abandoned
//! attempt included).

use std::time::Duration;

/// The delay before retry number `n` (from zero): doubling from `initial`, capped at `cap`,
/// with "equal jitter" (half the delay fixed, half drawn from `jitter`).
pub(crate) fn delay(initial: Duration, cap: Duration, n: u32, jitter: &mut SplitMix64) -> Duration {
    let full = initial.saturating_mul(1u32 << n.min(20)).min(cap);
    let half = full / 2;
    let spread = u64::try_from(half.as_micros()).unwrap_or(u64::MAX);
    let extra = if spread == 0 {
        0
    } else {
        jitter.next() % spread.saturating_add(1)
    };
    half.saturating_add(Duration::from_micros(extra))
}

/// A small, seeded, portable generator for backoff jitter (not for tokens).
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn the_jitter_generator_is_splitmix64() {
        // The reference implementation's first outputs for seed 0: the jitter of a seeded
        // attempt is the same on every platform and in every version that keeps this test.
        let mut g = SplitMix64(0);
        assert_eq!(g.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next(), 0x6e78_9e6a_a1b9_65f4);
    }
}
