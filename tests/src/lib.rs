//! Model checking (loom, shuttle) and cross-crate tests of idem
//!
//! Not built yet: this crate is filled by its own issue.
