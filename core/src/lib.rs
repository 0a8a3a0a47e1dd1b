//! The sans-IO core of idem: everything that decides, nothing that waits.
//!
//! idem makes a side effect safe to retry under an idempotency key: charge a card once,
//! however many times the client retries, even when the retry arrives while the first
//! attempt is still running. This crate holds the two state machines that make that
//! promise, as pure functions of their inputs:
//!
//! - the **record machine** ([`record`]): the state of one key in a store and its
//!   transitions (reserve, complete, renew, release, read, and expiry). Every store backend
//!   implements exactly this machine.
//! - the **attempt machine** ([`Attempt`]): one caller's protocol: reserve, run the action,
//!   renew, complete or release, wait for an in-flight holder, retry, fail open or closed.
//!   Drivers poll it for the next [`Step`] and feed it replies, failures and time.
//!
//! Neither reads a clock, draws randomness, or does I/O: `now`, the owner token and the
//! jitter seed are inputs. The tokio driver, the simulation and the model checkers all drive
//! these same machines, so the logic that is verified is the logic that runs.
//!
//! `MODEL.md` at the repository root states every invariant (`I1`, `I2`, ...) and the tests
//! that check each; comments here refer to them by name.

pub mod attempt;
pub mod delivery;
pub mod downstream;
pub mod fence;
pub mod fingerprint;
pub mod key;
pub mod options;
pub mod record;
pub mod time;
pub mod token;

pub use attempt::{
    Abandonment, ActionResult, Attempt, Execution, LeaseState, Outcome, Protection, ProtocolError,
    Recording, Step, confirmed_lease,
};
pub use delivery::{CallEnd, DeadLetterReason, Disposition, Redelivery, RedeliveryError};
pub use downstream::{DOWNSTREAM_KEY_PREFIX, DownstreamKey};
pub use fence::{Fence, FenceCounter, ParseFenceError};
pub use fingerprint::{Fingerprint, FingerprintBuilder, FingerprintError, ParseFingerprintError};
pub use key::{Key, KeyError, Operation, OperationError};
pub use options::{InFlightPolicy, Options, OptionsBuilder, OptionsError, StoreFailurePolicy};
pub use record::{
    Body, Command, CommandKind, Completion, Record, Refusal, Reply, Reservation, StoredResult,
};
pub use time::Timestamp;
pub use token::{OwnerToken, ParseOwnerTokenError};
