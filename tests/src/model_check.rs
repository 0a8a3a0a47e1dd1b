//! Model checking a scenario: every loom schedule up to a preemption bound, or many shuttle
//! schedules, each run judged by `idem_check`'s judge.
//!
//! A violation stops the model checker with a panic whose message is the counterexample
//! (the broken rules and the readable history); the runners here catch it and hand it back,
//! so a test can assert that a broken variant IS caught, and which rule caught it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use shuttle::scheduler::{PctScheduler, RandomScheduler, ReplayScheduler, Scheduler};
use shuttle::{Config, FailurePersistence, Runner};

use idem_check::{Counterexample, History};

use crate::coverage::Coverage;
use crate::platform::{Loom, Platform, Shuttle};
use crate::scenario::Scenario;

/// A further check of one scenario's runs, beyond the invariants: `Err` explains the miss.
pub type Expectation = fn(&History) -> Result<(), String>;

/// What a model check saw.
#[derive(Debug, Default)]
pub struct ModelCheck {
    /// How many schedules ran (the failing one included).
    pub schedules: usize,
    /// The first counterexample, if a run broke a rule.
    pub counterexample: Option<Box<Counterexample>>,
    /// What the passing runs exercised, summed.
    pub coverage: Coverage,
    /// The message of a panic that was not a counterexample (an expectation missed, or a
    /// checker's own failure such as loom's branch limit), if any.
    pub failure: Option<String>,
}

impl ModelCheck {
    /// Whether every schedule passed.
    pub fn passed(&self) -> bool {
        self.counterexample.is_none() && self.failure.is_none()
    }
}

/// Shared between the model's closure (run once per schedule) and the caller.
#[derive(Debug, Default)]
struct Tally {
    schedules: AtomicUsize,
    coverage: Mutex<Coverage>,
    counterexample: Mutex<Option<Box<Counterexample>>>,
}

impl Tally {
    /// One schedule: run, judge, and on a violation keep the counterexample and panic with
    /// it, which stops the model checker.
    fn run<P: Platform>(&self, scenario: &Scenario, expect: Option<Expectation>) {
        self.schedules.fetch_add(1, Ordering::Relaxed);
        match scenario.check::<P>() {
            Ok(history) => {
                if let Ok(mut coverage) = self.coverage.lock() {
                    coverage.add(&Coverage::of(&history));
                }
                if let Some(Err(miss)) = expect.map(|expect| expect(&history)) {
                    panic!("expectation missed: {miss}\nhistory:\n{history}");
                }
            }
            Err(counterexample) => {
                let message = counterexample.to_string();
                if let Ok(mut slot) = self.counterexample.lock() {
                    slot.get_or_insert(counterexample);
                }
                panic!("{message}");
            }
        }
    }

    fn finish(self: Arc<Self>, outcome: std::thread::Result<()>) -> ModelCheck {
        let counterexample = self
            .counterexample
            .lock()
            .map(|mut slot| slot.take())
            .unwrap_or_default();
        let failure = match outcome {
            Ok(()) => None,
            Err(_) if counterexample.is_some() => None,
            Err(panic) => Some(panic_message(panic.as_ref())),
        };
        ModelCheck {
            schedules: self.schedules.load(Ordering::Relaxed),
            coverage: self.coverage.lock().map(|c| *c).unwrap_or_default(),
            counterexample,
            failure,
        }
    }
}

/// The text of a panic payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else {
        "a panic without a message".to_string()
    }
}

/// Runs every loom schedule of `scenario` with at most `preemption_bound` preemptions.
pub fn loom_check(
    scenario: &Scenario,
    preemption_bound: usize,
    expect: Option<Expectation>,
) -> ModelCheck {
    let tally = Arc::new(Tally::default());
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemption_bound);
    let model = {
        let tally = Arc::clone(&tally);
        let scenario = scenario.clone();
        move || tally.run::<Loom>(&scenario, expect)
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| builder.check(model)));
    tally.finish(outcome)
}

/// Which shuttle scheduler picks the schedules, with its seed (same seed, same schedules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShuttleSchedules {
    /// Uniformly random scheduling decisions.
    Random {
        /// The scheduler's seed.
        seed: u64,
        /// How many schedules.
        iterations: usize,
    },
    /// Probabilistic concurrency testing: random priorities with `depth - 1` priority
    /// changes, which finds bugs of small depth with a known probability.
    Pct {
        /// The scheduler's seed.
        seed: u64,
        /// How many schedules.
        iterations: usize,
        /// The bug depth aimed at.
        depth: usize,
    },
}

/// Runs shuttle schedules; `make` builds each run's scenario, drawing its choices
/// (faults, crashes, skews) from shuttle's own random source so that a schedule replays
/// them exactly. `persist` says where a failing schedule is written for
/// [`shuttle_replay`]: `FailurePersistence::Print` prints it.
pub fn shuttle_check(
    make: impl Fn() -> Scenario + Send + Sync + 'static,
    schedules: ShuttleSchedules,
    persist: FailurePersistence,
    expect: Option<Expectation>,
) -> ModelCheck {
    match schedules {
        ShuttleSchedules::Random { seed, iterations } => shuttle_run(
            make,
            RandomScheduler::new_from_seed(seed, iterations),
            persist,
            expect,
        ),
        ShuttleSchedules::Pct {
            seed,
            iterations,
            depth,
        } => shuttle_run(
            make,
            PctScheduler::new_from_seed(seed, depth, iterations),
            persist,
            expect,
        ),
    }
}

/// Replays the one schedule a failing shuttle run printed.
pub fn shuttle_replay(
    make: impl Fn() -> Scenario + Send + Sync + 'static,
    schedule: &str,
) -> ModelCheck {
    shuttle_run(
        make,
        ReplayScheduler::new_from_encoded(schedule),
        FailurePersistence::None,
        None,
    )
}

fn shuttle_run<S: Scheduler + 'static>(
    make: impl Fn() -> Scenario + Send + Sync + 'static,
    scheduler: S,
    persist: FailurePersistence,
    expect: Option<Expectation>,
) -> ModelCheck {
    let tally = Arc::new(Tally::default());
    let mut config = Config::new();
    config.failure_persistence = persist;
    let runner = Runner::new(scheduler, config);
    let model = {
        let tally = Arc::clone(&tally);
        move || tally.run::<Shuttle>(&make(), expect)
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        runner.run(model);
    }));
    tally.finish(outcome)
}
