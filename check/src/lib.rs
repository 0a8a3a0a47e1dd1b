//! idem-check: the checking of idem, in one place. The simulation (`idem-sim`), the model
//! checkers (loom and shuttle, in `idem-tests`), the driver's tests and the Redis tests all
//! use it, so that a rule of MODEL.md or a deliberately broken variant is written once.
//!
//! - [`history`]: what happened in one run, in one vocabulary: store steps (the record
//!   before and after, and the reply or the corrupt or unapplied answer) on the store's
//!   clock, what each attempt sent and received, the action (run, charge, end), crashes,
//!   pauses, abandonments and settlements, the attempt machine's view of its lease, every
//!   outcome, and a broker's deliveries and a consumer's dispositions of them; printable as
//!   a story.
//! - [`statement`]: the card statement, the provider's own count of the effects, and the
//!   one-effect check on it.
//! - [`judge`](mod@judge): the judge of every invariant and rule of MODEL.md over a
//!   history, each named as MODEL.md names it ([`Rule`]), with the cause of every extra
//!   effect ([`Cause`]).
//! - [`variant`]: the one catalogue of deliberately broken store and driver behaviours
//!   ([`Variant`]), each with one name, that every checker is shown to catch.
//! - [`tally`]: counts per named class (causes, variants), and parsing their names.
//!
//! ```
//! use idem_check::{AttemptSpec, EventKind, History, KeySpec, Rule, judge};
//! use idem_core::{Fingerprint, OwnerToken};
//!
//! // Two attempts charge one key, and neither says why: `I7` is broken.
//! let mut history = History::default();
//! let key = history.add_key(KeySpec {
//!     operation: "payment.charge".into(),
//!     key: "order-1".into(),
//!     filed: None,
//!     corrupt: false,
//! });
//! for n in 1..=2 {
//!     let who = history.add_attempt(AttemptSpec {
//!         label: format!("c{n}"),
//!         key,
//!         fingerprint: Fingerprint::of_bytes(b"order-1|100"),
//!         owner: OwnerToken::from_u128(n),
//!     });
//!     history.push(0, who, EventKind::Run { unprotected: false });
//!     history.charge(10, who);
//! }
//! let verdict = judge(&history);
//! assert!(verdict.breaks(Rule::I7));
//! assert_eq!(history.statement.one_effect(&key).is_err(), true);
//! ```

pub mod history;
pub mod judge;
pub mod statement;
pub mod tally;
pub mod variant;

pub use history::{
    ActionEnd, Answer, AttemptSpec, Event, EventKind, History, KeySpec, MessageSpec, Received,
    StoreStep, Story, numbered,
};
pub use judge::{Cause, CauseCounts, Counterexample, Rule, Verdict, Violation, check_run, judge};
pub use statement::{Charge, Provider, Statement};
pub use tally::{Class, Tally, UnknownName, parse_name};
pub use variant::{InFront, TRUNCATED_KEY_LEN, Variant};
