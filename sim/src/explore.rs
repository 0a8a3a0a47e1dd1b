//! Many seeded runs and their summary.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;

use idem_check::{Cause, CauseCounts, Provider, Rule, Variant, Violation};

use crate::faults::{Exercised, ExercisedCounts};
use crate::plan::{Plan, PlanError, Shape};
use crate::report::{BrokerCounts, DeadLetters, RunReport};
use crate::rng::SimRng;
use crate::world::{Spare, World};

/// What to run: the shape of each run and the store behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Config {
    /// Callers, keys and faults.
    pub shape: Shape,
    /// The store and driver: correct, or a deliberately broken variant of one of them (for
    /// checking the checker).
    pub variant: Variant,
    /// What the provider makes of the requests it gets (MODEL.md `D1`): every one an effect,
    /// or one effect per downstream key.
    pub provider: Provider,
}

/// One seeded run: the same seed and config give the same run, byte for byte (trace
/// included when `trace` is set).
pub fn run_seed(seed: u64, config: &Config, trace: bool) -> Result<RunReport, PlanError> {
    run_seed_in(seed, config, trace, &mut Spare::default())
}

/// As [`run_seed`], in the buffers an earlier run on this thread left in `spare`, and
/// leaving this run's there for the next.
fn run_seed_in(
    seed: u64,
    config: &Config,
    trace: bool,
    spare: &mut Spare,
) -> Result<RunReport, PlanError> {
    let mut rng = SimRng::new(seed);
    let plan = Plan::random(&mut rng, config.shape)?;
    let (mut report, left) =
        World::reusing(&plan, config.variant, rng, trace, std::mem::take(spare))
            .with_provider(config.provider)
            .run_sparing();
    *spare = left;
    report.seed = seed;
    Ok(report)
}

/// One run of a plan written by hand, with the store and driver of `variant`. The world's
/// own randomness (owner tokens, network delays and losses, whether a dropped action's
/// provider request was in flight) comes from `seed`: the same plan and seed give the same
/// run.
pub fn run_plan(plan: &Plan, variant: Variant, seed: u64, trace: bool) -> RunReport {
    World::new(plan, variant, SimRng::new(seed), trace).run()
}

/// The most violations a summary keeps in full (all failing seeds are kept).
const KEPT_VIOLATIONS: usize = 20;

/// Totals over many runs.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Runs made.
    pub runs: u64,
    /// Requests sent (tries, retries included).
    pub requests: u64,
    /// Effects (charges, and transactional writes committed).
    pub effects: u64,
    /// Of those, the transactional writes committed with their record.
    pub transactional_effects: u64,
    /// Simulated events.
    pub events: u64,
    /// Extra effects by allowed cause (transactional ones apart).
    pub extra: CauseCounts,
    /// Extra transactional effects by cause (only `retention-expired` is allowed).
    pub extra_transactional: CauseCounts,
    /// Extra effects at the provider, by cause (MODEL.md `D1`): [`extra`](Self::extra) at a
    /// plain provider, fewer at one that deduplicates by the downstream key.
    pub extra_at_provider: CauseCounts,
    /// Extra calls the provider absorbed, by cause: answered with the effect of their
    /// downstream key (keyed), refused as stale or replaced by a newer holder's write (fenced).
    pub absorbed: CauseCounts,
    /// Stale writes at the provider (MODEL.md `F1`): none at one that honours fences.
    pub stale_at_provider: u64,
    /// What the broker and its consumers did (MODEL.md `C1`).
    pub broker: BrokerCounts,
    /// Fault and path classes reached.
    pub exercised: ExercisedCounts,
    /// Every seed with a violation.
    pub failing_seeds: Vec<u64>,
    /// Violations in total.
    pub violation_count: u64,
    /// The first few violations, with their seeds.
    pub violations: Vec<(u64, Violation)>,
    /// Violations counted by rule, in the order first seen.
    pub by_rule: Vec<(Rule, u64)>,
}

impl Summary {
    /// Adds one run.
    pub fn add(&mut self, report: &RunReport) {
        let mut by_rule: Vec<(Rule, u64)> = Vec::new();
        for violation in &report.violations {
            match by_rule.iter_mut().find(|(rule, _)| *rule == violation.rule) {
                Some((_, count)) => *count += 1,
                None => by_rule.push((violation.rule, 1)),
            }
        }
        self.append(&Summary {
            runs: 1,
            requests: report.requests,
            effects: report.effects,
            transactional_effects: report.transactional_effects,
            events: report.events,
            extra: report.extra,
            extra_transactional: report.extra_transactional,
            extra_at_provider: report.extra_at_provider,
            absorbed: report.absorbed,
            stale_at_provider: report.stale_at_provider,
            broker: report.broker.clone(),
            exercised: report.exercised,
            failing_seeds: if report.violations.is_empty() {
                Vec::new()
            } else {
                vec![report.seed]
            },
            violation_count: report.violations.len() as u64,
            violations: report
                .violations
                .iter()
                .take(KEPT_VIOLATIONS)
                .map(|violation| (report.seed, violation.clone()))
                .collect(),
            by_rule,
        });
    }
}

impl Summary {
    /// Adds the summary of seeds that come after this one's: the result is the summary the
    /// two ranges would have made run one after the other (the same violations kept, rules
    /// in the order first seen, failing seeds in order).
    pub fn append(&mut self, later: &Summary) {
        self.runs += later.runs;
        self.requests += later.requests;
        self.effects += later.effects;
        self.transactional_effects += later.transactional_effects;
        self.events += later.events;
        self.extra.merge(&later.extra);
        self.extra_transactional.merge(&later.extra_transactional);
        self.extra_at_provider.merge(&later.extra_at_provider);
        self.absorbed.merge(&later.absorbed);
        self.stale_at_provider += later.stale_at_provider;
        self.broker.merge(&later.broker);
        self.exercised.merge(&later.exercised);
        self.failing_seeds.extend_from_slice(&later.failing_seeds);
        self.violation_count += later.violation_count;
        for &(rule, count) in &later.by_rule {
            match self.by_rule.iter_mut().find(|(seen, _)| *seen == rule) {
                Some((_, total)) => *total += count,
                None => self.by_rule.push((rule, count)),
            }
        }
        let room = KEPT_VIOLATIONS.saturating_sub(self.violations.len());
        self.violations
            .extend(later.violations.iter().take(room).cloned());
    }

    /// Extra transactional effects that a lease lost (expired, its holder crashed or
    /// paused past it, or its action dropped) would explain: zero when every write that
    /// commits with the record commits once (`T1`).
    pub fn transactional_lease_loss(&self) -> u64 {
        [
            Cause::LeaseExpired,
            Cause::HolderCrashed,
            Cause::AbandonedMidAction,
        ]
        .into_iter()
        .map(|cause| self.extra_transactional.get(cause))
        .sum()
    }
}

/// Runs seeds `from..from + seeds`, calling `progress` after each run.
pub fn explore(
    from: u64,
    seeds: u64,
    config: &Config,
    mut progress: impl FnMut(u64),
) -> Result<Summary, PlanError> {
    let mut summary = Summary::default();
    let mut spare = Spare::default();
    for seed in from..from.saturating_add(seeds) {
        let mut report = run_seed_in(seed, config, false, &mut spare)?;
        summary.add(&report);
        spare.keep_history(std::mem::take(&mut report.history));
        progress(seed);
    }
    Ok(summary)
}

/// Seeds a worker of [`explore_in_parallel`] takes at a time.
const CHUNK: u64 = 256;

/// Runs seeds `from..from + seeds` on `jobs` threads and gives the same summary as
/// [`explore`] (each seed's run is its own, and the ranges' summaries are appended in seed
/// order), so a failing seed and the printed summary do not depend on `jobs`. `progress` is
/// called on the calling thread with how many seeds have finished, as blocks of seeds finish.
pub fn explore_in_parallel(
    from: u64,
    seeds: u64,
    config: &Config,
    jobs: NonZeroUsize,
    mut progress: impl FnMut(u64),
) -> Result<Summary, PlanError> {
    let end = from.saturating_add(seeds);
    let chunks = (end - from).div_ceil(CHUNK);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (sender, receiver) = mpsc::channel::<(u64, Result<Summary, PlanError>)>();
    thread::scope(|scope| {
        for _ in 0..jobs
            .get()
            .min(usize::try_from(chunks).unwrap_or(usize::MAX))
        {
            let sender = sender.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let chunk = next.fetch_add(1, Ordering::Relaxed);
                    if chunk >= chunks {
                        break;
                    }
                    let start = from + chunk * CHUNK;
                    let count = CHUNK.min(end - start);
                    let result = explore(start, count, config, |_| {});
                    if result.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if sender.send((chunk, result)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        // Chunks arrive in any order; they are appended in seed order as soon as every
        // earlier one is in, so at most the chunks in flight wait here.
        let mut summary = Summary::default();
        let mut waiting = BTreeMap::new();
        let mut appended = 0;
        let mut finished = 0;
        for (chunk, result) in receiver {
            if let Ok(part) = &result {
                finished += part.runs;
                progress(finished);
            }
            waiting.insert(chunk, result);
            while let Some(result) = waiting.remove(&appended) {
                summary.append(&result?);
                appended += 1;
            }
        }
        // A worker stopped by a plan error leaves later chunks unrun: the first error in
        // seed order is the answer.
        match waiting.into_values().find_map(Result::err) {
            Some(err) => Err(err),
            None => Ok(summary),
        }
    })
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "runs: {}", self.runs)?;
        writeln!(f, "requests: {}", self.requests)?;
        writeln!(f, "effects: {}", self.effects)?;
        writeln!(
            f,
            "extra effects: {} (transactional apart)",
            self.extra.total()
        )?;
        for cause in Cause::ALL {
            writeln!(f, "  {:<26} {}", cause.name(), self.extra.get(cause))?;
        }
        writeln!(
            f,
            "transactional effects: {}, extra: {}, extra from lease loss: {}",
            self.transactional_effects,
            self.extra_transactional.total(),
            self.transactional_lease_loss()
        )?;
        for cause in Cause::ALL {
            writeln!(
                f,
                "  {:<26} {}",
                cause.name(),
                self.extra_transactional.get(cause)
            )?;
        }
        writeln!(
            f,
            "extra effects at the provider: {}, absorbed by it: {}",
            self.extra_at_provider.total(),
            self.absorbed.total()
        )?;
        for cause in Cause::ALL {
            writeln!(
                f,
                "  {:<26} {:>10} {:>10}",
                cause.name(),
                self.extra_at_provider.get(cause),
                self.absorbed.get(cause)
            )?;
        }
        writeln!(
            f,
            "stale writes at the provider (after a newer holder's): {}",
            self.stale_at_provider
        )?;
        writeln!(
            f,
            "messages: {}, deliveries: {}, acks: {} (lost: {}), redeliveries asked: {}, \
             after an ack-wait: {}, dead-lettered: {}",
            self.broker.messages,
            self.broker.deliveries,
            self.broker.acks,
            self.broker.acks_lost,
            self.broker.redeliveries,
            self.broker.ack_wait_redeliveries,
            self.broker.dead_letters.total()
        )?;
        for reason in DeadLetters::REASONS {
            writeln!(
                f,
                "  dead-lettered {:<19} {}",
                reason.name(),
                self.broker.dead_letters.get(reason)
            )?;
        }
        writeln!(
            f,
            "effects of messages: {} (transactional: {}), extra: {}, transactional extra: {}",
            self.broker.message_effects,
            self.broker.transactional_message_effects,
            self.broker.extra_messages.total(),
            self.broker.extra_transactional_messages.total()
        )?;
        for cause in Cause::ALL {
            writeln!(
                f,
                "  {:<26} {:>10} {:>10}",
                cause.name(),
                self.broker.extra_messages.get(cause),
                self.broker.extra_transactional_messages.get(cause)
            )?;
        }
        let reached = Exercised::ALL.len() - self.exercised.missing().len();
        writeln!(
            f,
            "exercised: {reached} of {} fault and path classes",
            Exercised::ALL.len()
        )?;
        for class in Exercised::ALL {
            writeln!(f, "  {:<26} {}", class.name(), self.exercised.get(class))?;
        }
        let missing = self.exercised.missing();
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|class| class.name()).collect();
            writeln!(f, "never exercised: {}", names.join(", "))?;
        }
        for (rule, count) in &self.by_rule {
            writeln!(f, "violated {:<34} {count}", rule.name())?;
        }
        for (seed, violation) in &self.violations {
            writeln!(f, "seed {seed}: {violation}")?;
        }
        if self.failing_seeds.is_empty() {
            write!(f, "violations: 0")
        } else {
            let shown: Vec<String> = self
                .failing_seeds
                .iter()
                .take(50)
                .map(u64::to_string)
                .collect();
            write!(
                f,
                "violations: {} in {} seeds: {}{}",
                self.violation_count,
                self.failing_seeds.len(),
                shown.join(" "),
                if self.failing_seeds.len() > 50 {
                    " ..."
                } else {
                    ""
                }
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run in the buffers earlier runs left is the run a fresh world makes: the same
    /// history, trace, answers and counts, seed for seed. An emptied buffer that kept
    /// anything of the last run (a statement line, a queued event, a command in transit)
    /// would show here.
    #[test]
    fn a_run_in_reused_buffers_is_the_run_in_new_ones() {
        let config = Config::default();
        let mut spare = Spare::default();
        for seed in 0..300 {
            let reused = run_seed_in(seed, &config, true, &mut spare).unwrap();
            let fresh = run_seed(seed, &config, true).unwrap();
            assert_eq!(reused.history, fresh.history, "seed {seed}");
            assert_eq!(reused.trace, fresh.trace, "seed {seed}");
            assert_eq!(reused.responses, fresh.responses, "seed {seed}");
            assert_eq!(reused.violations, fresh.violations, "seed {seed}");
            assert_eq!(
                (reused.events, reused.requests, reused.effects),
                (fresh.events, fresh.requests, fresh.effects),
                "seed {seed}"
            );
            spare.keep_history(reused.history);
        }
    }
}
