//! The conformance kit of idem's stores: one suite that holds any [`idem::Store`] to the
//! record machine of `idem-core`, and says, for the first thing it finds wrong, what and after
//! which commands.
//!
//! Every store in the workspace passes it (`MemoryStore`, Redis, Redis Cluster, PostgreSQL,
//! MySQL/MariaDB, SQLite), and the [`broken`] stores, each with one bug a store author could
//! make, are each caught by it. A third-party store's author implements [`Subject`] (the
//! store and its clock) and calls [`run`]:
//!
//! ```
//! use idem::MemoryStore;
//! use idem_conformance::{Config, run};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let report = run("MemoryStore", &MemoryStore::new(), &Config::default()).await;
//! println!("{report}");
//! assert!(report.passed(), "{report}");
//! # }
//! ```
//!
//! # What it checks
//!
//! Each [`Check`] in turn, on keys of its own: every (state, command) pair of the record
//! machine, owner checks, the ends of leases and retentions polled across on the store's
//! clock, reserves racing on one key, a value the store did not write, the largest result the
//! store keeps, names compared byte for byte, random command sequences with time moving,
//! shrunk to a short history when one fails, and, for a store that sends them, change notices
//! that wake a waiter. Replies are judged at the instant the store
//! decided them ([`Timing`]): exactly when the store reports it, otherwise within the window
//! between two reads of the store's clock (see [`judge`]). Grants that carry fences are held to
//! `F1`. A run takes a few seconds on a local store.
//!
//! # What it does not check
//!
//! Durability across a restart or a failover, and behaviour under faults (a lost reply, a partition): those depend on the store's deployment
//! and are each store's own tests.

pub mod broken;
mod checks;
pub mod judge;
mod report;
mod subject;
mod timing;

use std::time::Instant;

pub use report::{Check, CheckResult, Divergence, Report, Verdict};
pub use subject::Subject;
pub use timing::Timing;

/// How much a run tries.
#[derive(Debug, Clone)]
pub struct Config {
    /// Random sequences the differential check runs.
    pub cases: u32,
    /// The longest sequence, in steps.
    pub steps: usize,
    /// The seed of the sequences: every report names it, and the same seed draws the same
    /// sequences again.
    pub seed: u64,
    /// The checks to make; every one by default.
    pub checks: Vec<Check>,
}

/// Every check, 64 random sequences of up to 16 steps, from a seed of the clock's: each run
/// draws sequences no run drew before, and a failure names the seed that draws them again
/// (set [`Config::seed`] to it).
impl Default for Config {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        Self {
            cases: 64,
            steps: 16,
            seed: (nanos as u64) ^ u64::from(std::process::id()).rotate_left(32),
            checks: Check::ALL.to_vec(),
        }
    }
}

/// Runs the kit's checks on `subject`, named `name` in the report.
///
/// Checks run one after another; a failed check does not stop the others, so one report says
/// everything the kit found.
pub async fn run<S: Subject>(name: &str, subject: &S, config: &Config) -> Report {
    let mut results = Vec::new();
    for &check in &config.checks {
        let started = Instant::now();
        let verdict = match check {
            Check::Transitions => passed(checks::transitions::run(subject).await),
            Check::Owners => passed(checks::owners::run(subject).await),
            Check::Expiry => passed(checks::expiry::run(subject).await),
            Check::Races => passed(checks::races::run(subject).await),
            Check::Corrupt => match checks::corrupt::run(subject).await {
                Ok(Some(what)) => Verdict::Passed(what),
                Ok(None) => Verdict::Skipped(
                    "the subject cannot hold a value the store did not write".to_owned(),
                ),
                Err(divergence) => Verdict::Failed(divergence),
            },
            Check::Sizes => passed(checks::sizes::run(subject).await),
            Check::Names => passed(checks::names::run(subject).await),
            Check::Differential => passed(checks::differential::run(subject, config).await),
            Check::Notices => match checks::notices::run(subject).await {
                Ok(Some(what)) => Verdict::Passed(what),
                Ok(None) => Verdict::Skipped(
                    "the store sends no change notices (waiters reserve again at their backoff)"
                        .to_owned(),
                ),
                Err(divergence) => Verdict::Failed(divergence),
            },
        };
        results.push(CheckResult {
            check,
            verdict,
            elapsed: started.elapsed(),
        });
    }
    Report {
        subject: name.to_owned(),
        results,
    }
}

fn passed(result: Result<String, Divergence>) -> Verdict {
    match result {
        Ok(what) => Verdict::Passed(what),
        Err(divergence) => Verdict::Failed(divergence),
    }
}
