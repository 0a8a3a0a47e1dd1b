//! The tokio driver of idem: `Coordinator`, the [`Store`] trait and `MemoryStore`.
//!
//! The driver owns no decisions: it drives `idem-core`'s attempt machine with real time and
//! real I/O.

pub mod store;

pub use store::{BoxError, Store, StoreError};
