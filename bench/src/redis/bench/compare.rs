//! `idem-bench compare --redis URL`: fresh calls against the store's own two commands,
//! alternated in rounds, for a ratio that one noisy window cannot swing.
//!
//! On a shared host the rate of one phase moves by a third from one window to the next, and
//! the second of two back-to-back phases is often the slower whichever it is
//! (BENCHMARKS.md, "The detached call's own cost"). So each round runs both phases for the
//! same number of calls, `raw_fresh` first in even rounds and `fresh` first in odd ones, each
//! round on keys of its own; the figures are the median of the rounds' ratios and the pooled
//! ratio (every fresh call over the time all of them took, against the same for
//! `raw_fresh`). Nothing here is asserted: the figures are reported.

use std::fmt::Write as _;

use super::load::{self, LoadStats};
use super::{BenchError, CallsPhase, Harness};

/// What to compare.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// The Redis server (standalone), e.g. `redis://127.0.0.1:6379`.
    pub url: String,
    /// Concurrency levels, each compared in full.
    pub concurrency: Vec<usize>,
    /// Rounds at each level.
    pub rounds: usize,
    /// Calls of each phase in each round.
    pub calls: u64,
}

impl Default for CompareConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            concurrency: vec![64, 256],
            rounds: 10,
            calls: 50_000,
        }
    }
}

/// One round: both phases, one after the other.
#[derive(Debug, Clone, PartialEq)]
pub struct Round {
    /// Whether `raw_fresh` ran first.
    pub raw_first: bool,
    /// The adapter's reserve and complete, with nothing around them.
    pub raw_fresh: LoadStats,
    /// `Coordinator::execute` on new keys.
    pub fresh: LoadStats,
}

impl Round {
    /// Fresh calls per second over raw ones, if both phases made calls.
    pub fn ratio(&self) -> Option<f64> {
        let raw = self.raw_fresh.per_second();
        (raw > 0.0).then(|| self.fresh.per_second() / raw)
    }
}

/// The rounds at one concurrency level.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Calls in flight in each phase.
    pub concurrency: usize,
    /// In the order run.
    pub rounds: Vec<Round>,
}

impl Comparison {
    /// The median of the rounds' ratios (the mean of the middle two for an even count).
    pub fn median(&self) -> Option<f64> {
        let mut ratios: Vec<f64> = self.rounds.iter().filter_map(Round::ratio).collect();
        if ratios.is_empty() {
            return None;
        }
        ratios.sort_by(f64::total_cmp);
        let mid = ratios.len() / 2;
        Some(if ratios.len().is_multiple_of(2) {
            (ratios[mid - 1] + ratios[mid]) / 2.0
        } else {
            ratios[mid]
        })
    }

    /// Every fresh call over the time all the fresh phases took, against the same for
    /// `raw_fresh`: a slow window weighs as long as it lasted.
    pub fn pooled(&self) -> Option<f64> {
        let rate = |stats: &mut dyn Iterator<Item = &LoadStats>| {
            let (calls, secs) = stats.fold((0u64, 0.0f64), |(calls, secs), s| {
                (calls + s.calls, secs + s.elapsed.as_secs_f64())
            });
            (secs > 0.0).then(|| calls as f64 / secs)
        };
        let fresh = rate(&mut self.rounds.iter().map(|r| &r.fresh))?;
        let raw = rate(&mut self.rounds.iter().map(|r| &r.raw_fresh))?;
        (raw > 0.0).then(|| fresh / raw)
    }
}

/// Runs `config.rounds` rounds at each level against `config.url`. Keys live under a prefix
/// unique to this run, each round's and phase's apart, and expire after the minimum
/// retention.
pub async fn compare(config: &CompareConfig) -> Result<Vec<Comparison>, BenchError> {
    let harness = Harness::connect(&config.url).await?;
    let until = load::Until::Calls(config.calls);
    let mut levels = Vec::with_capacity(config.concurrency.len());
    for &c in &config.concurrency {
        let mut rounds = Vec::with_capacity(config.rounds);
        for round in 0..config.rounds {
            let raw_first = round.is_multiple_of(2);
            // Keys of this round's own: a later round's fresh calls are fresh too.
            let run = format!("{}.{round}", harness.run_id);
            let raw = || harness.phase(CallsPhase::RawFresh, &run, c, until);
            let fresh = || harness.phase(CallsPhase::Fresh, &run, c, until);
            let (raw_fresh, fresh) = if raw_first {
                let raw = raw().await;
                (raw, fresh().await)
            } else {
                let fresh = fresh().await;
                (raw().await, fresh)
            };
            rounds.push(Round {
                raw_first,
                raw_fresh,
                fresh,
            });
        }
        levels.push(Comparison {
            concurrency: c,
            rounds,
        });
    }
    Ok(levels)
}

/// A table for people: each round's rates and ratio, then each level's median and pooled
/// ratio.
pub fn text(levels: &[Comparison]) -> String {
    let mut out = String::new();
    let figure = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.3}"));
    for level in levels {
        let _ = writeln!(out, "concurrency {}", level.concurrency);
        for (n, round) in level.rounds.iter().enumerate() {
            let _ = writeln!(
                out,
                "  round {n:>2} ({} first)  raw_fresh {:>9.0} calls/s  fresh {:>9.0} calls/s  errors {}/{}  ratio {}",
                if round.raw_first { "raw" } else { "fresh" },
                round.raw_fresh.per_second(),
                round.fresh.per_second(),
                round.raw_fresh.errors,
                round.fresh.errors,
                figure(round.ratio()),
            );
        }
        let _ = writeln!(
            out,
            "  fresh / raw_fresh at {}: median {}, pooled {}",
            level.concurrency,
            figure(level.median()),
            figure(level.pooled()),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stats(calls: u64, millis: u64) -> LoadStats {
        LoadStats {
            concurrency: 8,
            calls,
            errors: 0,
            elapsed: Duration::from_millis(millis),
            p50: Duration::ZERO,
            p99: Duration::ZERO,
        }
    }

    fn round(raw: (u64, u64), fresh: (u64, u64)) -> Round {
        Round {
            raw_first: true,
            raw_fresh: stats(raw.0, raw.1),
            fresh: stats(fresh.0, fresh.1),
        }
    }

    /// The median is of the rounds' ratios, the middle two averaged for an even count; the
    /// pooled ratio weighs each phase by how long it ran, so one fast window does not carry
    /// it as it carries a mean of ratios.
    #[test]
    fn the_median_and_the_pooled_ratio_are_of_the_rounds() {
        let level = Comparison {
            concurrency: 8,
            rounds: vec![
                // 1,000/s against 1,000/s: 1.0
                round((1_000, 1_000), (1_000, 1_000)),
                // 1,000/s against 2,000/s: 0.5
                round((1_000, 1_000), (1_000, 2_000)),
                // 1,000/s against 500/s: 2.0
                round((1_000, 1_000), (1_000, 500)),
                // 1,000/s against 1,250/s: 0.8
                round((1_000, 1_000), (1_000, 1_250)),
            ],
        };
        let median = level.median().expect("rounds were run");
        assert!((median - 0.9).abs() < 1e-12, "{median}");
        // 4,000 fresh calls in 4.75 s against 4,000 raw calls in 4 s.
        let pooled = level.pooled().expect("calls were made");
        assert!((pooled - 4.0 / 4.75).abs() < 1e-12, "{pooled}");
        let odd = Comparison {
            concurrency: 8,
            rounds: level.rounds[..3].to_vec(),
        };
        assert_eq!(odd.median(), Some(1.0));
    }

    /// A round whose raw phase made no call has no ratio, and a level without one has no
    /// figures: nothing is divided by zero.
    #[test]
    fn a_level_without_raw_calls_has_no_ratio() {
        let empty = round((0, 1_000), (1_000, 1_000));
        assert_eq!(empty.ratio(), None);
        let level = Comparison {
            concurrency: 8,
            rounds: vec![empty],
        };
        assert_eq!(level.median(), None);
        assert_eq!(level.pooled(), None);
        assert!(text(&[level]).contains("median -, pooled -"));
    }
}
