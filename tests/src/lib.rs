//! Model checking of idem: the real record machine (or a broken variant of it) and the real
//! attempt machine, driven by callers that are loom or shuttle threads.
//!
//! The run's history, the card statement, the judge of MODEL.md's rules and the broken
//! variants are `idem_check`'s, shared with the simulation. The pieces here, one module
//! each:
//!
//! - [`world`]: the shared state behind the checker's lock: the records (and the keys that
//!   hold a corrupt value) and the history being written, whose statement is the card's.
//! - [`platform`]: the few synchronisation primitives the harness needs, for loom and for
//!   shuttle.
//! - [`caller`]: one client driving `idem_core::Attempt` exactly as a driver does, with
//!   crashes, failing and panicking actions, slow actions that renew, callers that go away
//!   (the attempt abandoned and its settlement pumped), lost replies, hung commands, corrupt
//!   answers and a skewed clock; or as one of the catalogue's broken drivers.
//! - [`scenario`]: a set of callers, keys and clock ticks, run on a platform and judged.
//! - [`coverage`]: what a set of runs exercised, so a passing test shows it reached the
//!   paths it claims to check.
//! - [`model_check`]: a scenario under loom (every schedule up to a preemption bound) or
//!   shuttle (random and PCT schedules, replayable), with the counterexample handed back.
//!
//! With the `admin` feature, `admin`: the operator's tools (`idem::admin::AdminStore`)
//! checked once, generically, and run on each store by its crate's tests.
//!
//! And, with the `postgres` feature, `postgres`: the PostgreSQL harness the store's and the
//! HTTP layer's tests share (a database per test, a private server to stop and start); and,
//! with the `mysql` feature, `mysql`: a MariaDB database per test; and always, [`redis`] (`redis-server` processes and a Cluster) [`net`] (free ports) and [`process`] (examples served as child processes, to pause, stop
//! or kill): one
//! harness per server, for every crate whose tests start one.

#[cfg(feature = "admin")]
pub mod admin;
pub mod caller;
pub mod coverage;
pub mod exhaustive;
pub mod model_check;
#[cfg(feature = "mysql")]
pub mod mysql;
pub mod net;
pub mod platform;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod process;
pub mod records;
pub mod redis;
pub mod scenario;
pub mod world;

pub use caller::{Action, CallerPlan, Fault, FaultKind};
pub use coverage::Coverage;
pub use idem_check::{Counterexample, History, Rule, Variant};
pub use model_check::{ModelCheck, ShuttleSchedules, loom_check, shuttle_check, shuttle_replay};
pub use platform::{Loom, Platform, Shuttle};
pub use scenario::Scenario;
pub use world::{AttemptId, Delivery, World};
