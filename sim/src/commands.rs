//! What each command does: the article's table, an exploration of many seeds (with its
//! progress bar), and the replay of one seed with its trace.

use std::io::IsTerminal;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use idem_sim::{Config, FaultKind, SCENARIOS, explore_in_parallel, run_seed};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long an exploration runs before it draws a progress bar: one that ends sooner
/// needs none.
const BAR_AFTER: Duration = Duration::from_secs(1);

/// Prints one row of the table and, if it differs from the article's, what was expected;
/// true when it matches.
pub(crate) fn print_row(scenario: &idem_sim::Scenario, row: &idem_sim::RowResult) -> bool {
    println!("{}", row.line(scenario));
    let matches = row.matches(scenario);
    if !matches {
        println!(
            "  MISMATCH: expected responses=[{}] charges=[{}]",
            scenario.expected_responses.join(", "),
            scenario.expected_charges.join(", ")
        );
    }
    matches
}

/// Prints every row; true when each matches its expectation and passes every check.
pub(crate) fn table(trace: bool) -> bool {
    let mut ok = true;
    for scenario in SCENARIOS {
        match scenario.simulate(trace) {
            Ok((row, report)) => {
                ok &= print_row(scenario, &row);
                // The result cache is the deliberately broken row: its second charge is
                // the violation the table exists to show.
                if scenario.store != idem_sim::TableStore::ResultCache {
                    for violation in &report.violations {
                        ok = false;
                        println!("  violation: {violation}");
                    }
                }
                if let Some(text) = report.trace {
                    print!("{text}");
                }
            }
            Err(err) => {
                ok = false;
                println!("{}: {err}", scenario.label);
            }
        }
    }
    ok
}

/// A progress bar for an exploration of `seeds` seeds, on stderr when stderr is a terminal,
/// drawn only once the exploration has run [`BAR_AFTER`]: what the program prints, and what
/// a test reads of it, is the same with or without it.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    drawn: bool,
}

impl Progress {
    fn new(seeds: u64) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(seeds), ProgressDrawTarget::hidden());
            if let Ok(style) =
                ProgressStyle::with_template("{bar:40} {pos}/{len} seeds {per_sec} eta {eta}")
            {
                bar.set_style(style);
            }
            bar
        });
        Self {
            bar,
            started: Instant::now(),
            drawn: false,
        }
    }

    /// Counts `done` more seeds.
    fn advance(&mut self, done: u64) {
        let Some(bar) = &self.bar else {
            return;
        };
        if !self.drawn && self.started.elapsed() >= BAR_AFTER {
            bar.set_draw_target(ProgressDrawTarget::stderr());
            self.drawn = true;
        }
        bar.inc(done);
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The threads an exploration runs on when none are named: one per core.
pub(crate) fn default_jobs() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

pub(crate) fn run_explore(from: u64, seeds: u64, config: &Config, jobs: NonZeroUsize) -> bool {
    let mut progress = Progress::new(seeds);
    let started = Instant::now();
    let mut shown = 0;
    let result = explore_in_parallel(from, seeds, config, jobs, |finished| {
        progress.advance(finished - shown);
        shown = finished;
    });
    let wall = started.elapsed().as_secs_f64();
    progress.finish();
    match result {
        Ok(summary) => {
            println!(
                "explore: seeds {from}..{}, {} callers, {} keys, variant {}, provider {}",
                from.saturating_add(seeds),
                config.shape.callers,
                config.shape.keys,
                config.variant.name(),
                config.provider.name()
            );
            println!("{summary}");
            let per_sec = |n: u64| if wall > 0.0 { n as f64 / wall } else { 0.0 };
            println!(
                "wall: {wall:.2}s on {jobs} threads, {:.0} seeds/s, {:.0} simulated requests/s",
                per_sec(summary.runs),
                per_sec(summary.requests)
            );
            if let Some(seed) = summary.failing_seeds.first() {
                println!(
                    "replay the first: idem-sim replay --seed {seed} {}",
                    run_options(config)
                );
            }
            summary.failing_seeds.is_empty()
        }
        Err(err) => {
            println!("explore: {err}");
            false
        }
    }
}

/// The run options that reproduce `config`, as `replay` takes them.
pub(crate) fn run_options(config: &Config) -> String {
    let faults: Vec<&str> = FaultKind::ALL
        .into_iter()
        .filter(|kind| config.shape.faults.has(*kind))
        .map(FaultKind::name)
        .collect();
    format!(
        "--callers {} --keys {} --faults {} --variant {} --provider {}",
        config.shape.callers,
        config.shape.keys,
        if faults.is_empty() {
            "none".to_owned()
        } else {
            faults.join(",")
        },
        config.variant.name(),
        config.provider.name()
    )
}

pub(crate) fn replay(seed: u64, config: &Config) -> bool {
    match run_seed(seed, config, true) {
        Ok(report) => {
            print!("{}", report.trace.unwrap_or_default());
            println!(
                "seed {seed}: {} requests, {} effects, {} extra",
                report.requests,
                report.effects,
                report.extra.total()
            );
            for violation in &report.violations {
                println!("violation: {violation}");
            }
            report.violations.is_empty()
        }
        Err(err) => {
            println!("replay: {err}");
            false
        }
    }
}
