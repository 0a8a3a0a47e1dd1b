//! A seeded deterministic simulation of idem under faults
//!
//! Not built yet: this crate is filled by its own issue.

#[cfg(feature = "redis")]
pub mod bench;
#[cfg(feature = "redis")]
pub mod redis_table;
