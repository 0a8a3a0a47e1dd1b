//! Model checking of idem: the real record machine and the real attempt machine, driven by
//! callers that are loom or shuttle threads.
//!
//! The pieces, one module each:
//!
//! - [`history`]: what happened in one run (store steps, effects on the provider, crashes,
//!   outcomes), stamped with the store's logical clock, and its readable explanation.
//! - [`check`]: the pure judge of a history against MODEL.md's invariants (`I1`..`I11`),
//!   the effect count they allow (`I7`), the truth of each outcome's `lease_lost`, the
//!   attempt machine's own view of its lease, and the rules for abnormal ends (panics,
//!   corrupt records, abandoned attempts).
//! - [`coverage`]: what a set of runs exercised, so a passing test shows it reached the
//!   paths it claims to check.
//! - [`variant`]: the store and driver as they are (`record::apply`, `Attempt` fed as a
//!   driver must) and the known bugs of other implementations and of earlier drivers, built
//!   around them here, never in the library.
//! - [`world`]: the shared state behind the checker's lock: the records (and the keys that
//!   hold a corrupt value), the provider (the card statement) and the history being written.
//! - [`platform`]: the few synchronisation primitives the harness needs, for loom and for
//!   shuttle.
//! - [`caller`]: one client driving `idem_core::Attempt` exactly as a driver does, with
//!   crashes, failing and panicking actions, slow actions that renew, callers that go away
//!   (the attempt abandoned and its settlement pumped), lost replies, hung commands, corrupt
//!   answers and a skewed clock.
//! - [`scenario`]: a set of callers, keys and clock ticks, run on a platform and judged.
//! - [`explore`]: a scenario under loom (every schedule up to a preemption bound) or shuttle
//!   (random and PCT schedules, replayable), with the counterexample handed back.

pub mod caller;
pub mod check;
pub mod coverage;
pub mod explore;
pub mod history;
pub mod platform;
pub mod scenario;
pub mod variant;
pub mod world;

pub use caller::{Action, CallerPlan, Fault, FaultKind};
pub use check::{Counterexample, Invariant, Violation, check_run};
pub use coverage::Coverage;
pub use explore::{Exploration, ShuttleSchedules, loom_explore, shuttle_explore, shuttle_replay};
pub use history::{AttemptId, Event, EventKind, History};
pub use platform::{Loom, Platform, Shuttle};
pub use scenario::Scenario;
pub use variant::Variant;
pub use world::{Answer, Charge, Delivery, Provider, World};
