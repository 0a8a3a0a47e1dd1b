//! idem-sim: a seeded, deterministic discrete-event simulation of idem under faults.
//!
//! Many callers send requests under a few keys; each request is a real
//! [`idem_core::Attempt`] driven over a simulated network (delay, lost requests, replies
//! lost after the store applied the command, late replies) to a store node that applies the
//! real [`idem_core::record::apply`] at its own clock. Every timer is the attempt's: the
//! world wakes a worker at the instant the attempt names, and the attempt gives up a
//! command whose reply has not come by its own deadline. Clients go away and retry with the
//! same key (an attached try is then abandoned with its action, a detached one runs on);
//! actions are slow, fail, panic, crash or pause past their lease; the store has outages in
//! which it refuses commands or answers none, and keys that hold a value that is not a
//! record; results outlive their retention. A provider keeps the card statement. About a
//! third of the keys are transactional (`Attempt::in_transaction`): their action's effect is
//! writes that the store node commits with the complete that records its result, or rolls
//! back, and the judge's `T1` holds them to one effect per life of the record.
//!
//! Every run is written down as it happens in `idem_check`'s history (store steps, sends and
//! replies, charges, abnormal ends, lease views, outcomes) and judged at its end by
//! `idem_check`'s judge of MODEL.md's rules (see [`Rule`]), which also classifies every
//! extra effect by its [`Cause`]: an extra charge with no allowed cause is a violation. The
//! same seed gives the same run byte for byte: all randomness comes from [`SimRng`] seeded
//! with it, and time is simulated.
//!
//! A run can use one of `idem_check`'s deliberately broken store and driver behaviours
//! ([`Variant`]), only to show that the judge catches the bugs it is meant to catch.
//!
//! ```
//! use idem_sim::{Config, explore, run_seed};
//!
//! // One seed, with its full event trace: the same bytes on every run.
//! let report = run_seed(42, &Config::default(), true).unwrap();
//! assert!(report.violations.is_empty());
//! assert_eq!(report.trace, run_seed(42, &Config::default(), true).unwrap().trace);
//!
//! // Many seeds, summarised.
//! let summary = explore(0, 100, &Config::default(), |_seed| {}).unwrap();
//! assert!(summary.failing_seeds.is_empty());
//! assert!(summary.to_string().ends_with("violations: 0"));
//! ```
//!
//! The simulation depends on `idem-core` and `idem-check`; `clap`, `indicatif` and
//! `mimalloc` are used only by the binary (its command line, its progress bar and its
//! allocator). The same table on a real
//! Redis, and the Redis bench, are `idem-bench`'s: it runs [`SCENARIOS`] through the driver.

mod explore;
mod faults;
mod plan;
mod report;
mod rng;
mod table;
mod world;

pub use explore::{Config, Summary, explore, explore_in_parallel, run_plan, run_seed};
pub use faults::{Exercised, ExercisedCounts, FaultKind, Faults};
pub use idem_check::{
    Cause, CauseCounts, Charge, Class, Provider, Rule, Tally, UnknownName, Variant, Violation,
};
pub use plan::{
    ActionPlan, CallerGone, ClientPlan, MessagePlan, NetworkPlan, Outage, OutageKind, Plan,
    PlanError, Shape, Slot, Stage,
};
pub use report::{BrokerCounts, DeadLetters, Response, RunReport};
pub use rng::SimRng;
pub use table::{Call, RowResult, SCENARIOS, Scenario, TableStore};
