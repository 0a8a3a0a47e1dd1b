//! The tokio driver of idem: Coordinator, the Store trait and MemoryStore
//!
//! Not built yet: this crate is filled by its own issue.
