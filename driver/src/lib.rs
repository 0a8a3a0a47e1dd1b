//! The tokio driver of idem: [`Coordinator`], the [`Store`] trait and [`MemoryStore`].
//!
//! idem makes a side effect safe to retry under an idempotency key: the card is charged
//! once however many times the client retries, even when the retry arrives while the first
//! attempt still runs. The decisions are `idem-core`'s state machines; this crate drives
//! them with real time and real I/O.
//!
//! # Charge once
//!
//! ```
//! use idem::{Coordinator, Fingerprint, MemoryStore, Options};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
//! struct Charge { id: String, amount: u64 }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let payments = Coordinator::new(MemoryStore::new(), Options::default());
//! // The fields that make the request this request.
//! let fingerprint = Fingerprint::builder()
//!     .field("order_id", "o-1")
//!     .field("amount", 100)
//!     .finish()?;
//!
//! let charge = || {
//!     payments.execute("payment.charge", "key-1", fingerprint, |claim| async move {
//!         // Pass the key on: the provider deduplicates on it too.
//!         let id = format!("ch_for_{}", claim.key());
//!         Ok::<_, std::io::Error>(Charge { id, amount: 100 })
//!     })
//! };
//! let first = charge().await?;
//! let retry = charge().await?; // replayed, not charged again
//! assert_eq!(first, retry);
//! assert_eq!(payments.metrics().executed, 1);
//! assert_eq!(payments.metrics().replayed, 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Refusals map onto HTTP
//!
//! ```
//! use idem::{Coordinator, Error, Fingerprint, MemoryStore, Options};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
//! let amount = |n: u64| Fingerprint::builder().field("amount", n).finish().unwrap();
//! let ok = |_claim| async { Ok::<u64, String>(7) };
//!
//! coordinator.execute("payment.charge", "k", amount(100), ok).await.unwrap();
//! // The same key for another request: refused with both fingerprints (I4).
//! let reused = coordinator.execute("payment.charge", "k", amount(5), ok).await;
//! assert!(matches!(reused, Err(Error::KeyReuse { .. })));
//! assert_eq!(reused.unwrap_err().http_status(), Some(422));
//! // A key with a space is refused, never trimmed (I12).
//! let bad = coordinator.execute("payment.charge", "k ", amount(100), ok).await;
//! assert_eq!(bad.unwrap_err().http_status(), Some(400));
//! # }
//! ```
//!
//! # Failures are not cached, and provenance is reported
//!
//! ```
//! use idem::{Coordinator, Error, Fingerprint, MemoryStore, Options, Provenance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let coordinator = Coordinator::new(MemoryStore::new(), Options::default());
//! let fp = Fingerprint::of_bytes(b"send welcome mail to u-1");
//!
//! let failed = coordinator
//!     .execute("mail.send", "u-1", fp, |_claim| async { Err::<(), _>("smtp timeout") })
//!     .await;
//! assert!(matches!(failed, Err(Error::Action("smtp timeout"))));
//!
//! // The failure released the key (I5): the retry runs the action.
//! let retried = coordinator
//!     .execute_with_provenance("mail.send", "u-1", fp, |_claim| async { Ok::<_, &str>(()) })
//!     .await
//!     .unwrap();
//! assert!(matches!(retried.provenance, Provenance::Executed { lease_lost: false, .. }));
//! # }
//! ```
//!
//! # Guarantees
//!
//! MODEL.md at the repository root states the invariants (`I1`..`I12`) and the cases where
//! an action can run twice; comments here refer to them by name. The driver adds, for the
//! ways a call can end abnormally (rule 11):
//!
//! - **A caller that goes away.** [`Coordinator::execute`] is detached: a dropped caller's
//!   future (a client that hung up, a request timeout) never stops an action that started;
//!   the rest of the call moves to a task of its own, runs to its end and is recorded, and a
//!   retry gets its result. [`Coordinator::execute_attached`] runs in the caller's
//!   future; dropped mid-action, it leaves the key held until its lease ends (never
//!   released), and counts and logs the drop.
//! - **Panics.** An action that panics (or whose value panics while being encoded) is
//!   recorded as "outcome unknown", never released: an identical retry gets
//!   [`Error::OutcomeUnknown`] instead of a second effect. The panic then resumes in the
//!   caller.
//! - **A corrupt record.** A key holding a value that is not a record ends the call with
//!   [`Error::CorruptRecord`], under either store-failure policy: nothing runs, nothing is
//!   retried or overwritten.
//! - **A store that never answers.** Every command is given up at the attempt's own reply
//!   deadline ([`Options::reply_timeout`]) and retried as the attempt says; no call waits
//!   on a store for ever.
//! - **Values that do not encode.** The action succeeded, so the key is completed without a
//!   body, never released; the caller still gets the value, and a retry gets
//!   [`Error::ResultNotStored`] rather than a second effect.

pub mod admin;
pub mod answer;
pub mod any_store;
mod call;
pub mod claim;
mod clock;
pub mod codec;
pub mod coordinator;
pub mod detached;
mod ending;
mod entropy;
pub mod error;
pub mod memory;
pub mod metrics;
pub mod operation;
pub mod replay_cache;
mod settle;
pub mod store;
pub mod transaction;
mod watching;

pub use answer::{Answer, Provenance};
pub use any_store::AnyStore;
pub use claim::Claim;
pub use codec::{Codec, Json};
pub use coordinator::Coordinator;
pub use detached::ShutdownReport;
pub use ending::Ending;
pub use error::Error;
pub use idem_core::record;
pub use idem_core::{
    DownstreamKey, Fence, Fingerprint, FingerprintBuilder, FingerprintError, InFlightPolicy, Key,
    KeyError, LeaseState, Operation, OperationError, Options, OptionsBuilder, OptionsError,
    OwnerToken, ParseFenceError, Recording, Refusal, StoreFailurePolicy, StoredResult, Timestamp,
};
pub use memory::MemoryStore;
pub use metrics::{MetricsSnapshot, ReplayCacheStats, StoreErrors};
pub use operation::OperationHandle;
pub use replay_cache::{ReplayCacheBuilder, ReplayCacheConfig, ReplayCacheError};
pub use store::{BoxError, CommandTimeout, Store, StoreError};
pub use transaction::{AnyTransaction, Transaction, TransactionalStore};
