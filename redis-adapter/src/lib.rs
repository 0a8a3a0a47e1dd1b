//! The Redis and Redis Cluster store of idem
//!
//! Not built yet: this crate is filled by its own issue.
