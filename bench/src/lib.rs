//! Benchmarks and runs of idem against real stores, kept apart from the simulation so that
//! `idem-sim` depends on `idem-core` alone.
//!
//! Each store has a module, and each module the same two runs:
//!
//! - the article's table: the rows of [`idem_sim::SCENARIOS`] through the driver on the
//!   real store, on real time, compared with the same expectations as the simulated table;
//! - the bench: what a call costs on the store, measured against the least work it could do
//!   in the same run (BENCHMARKS.md reports the figures).
//!
//! [`redis`] is the Redis one. The binary, `idem-bench`, runs them:
//!
//! ```text
//! idem-bench table --redis redis://127.0.0.1:6379
//! idem-bench bench --redis redis://127.0.0.1:6379 [--concurrency N[,N...]] [--window-ms MS] [--json]
//! ```
//!
//! ```no_run
//! # async fn demo() -> Result<(), idem_bench::redis::table::TableError> {
//! // The table as data: every row must match the simulated one.
//! let rows = idem_bench::redis::table::run("redis://127.0.0.1:6379").await?;
//! assert!(rows.iter().all(|(scenario, row)| row.matches(scenario)));
//! # Ok(())
//! # }
//! ```

pub mod redis;
