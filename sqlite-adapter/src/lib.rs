//! idem's records in an SQLite file: the store for a single-node service whose idempotency
//! records must survive a restart of its process, with no server to run.
//!
//! See the crate's store, [`SqliteStore`], and MODEL.md, section "SQLite (idem-sqlite)".

mod error;
mod row;
pub mod sql;
mod store;
pub mod table;
mod transaction;

/// The sqlx this crate is built on, re-exported: the transaction an action writes on
/// dereferences to this sqlx's `SqliteConnection`.
pub use sqlx;

pub use error::{CommandTimeout, SqliteError};
pub use row::VALID;
pub use store::{
    DEFAULT_COMMAND_TIMEOUT, SqliteStore, SqliteStoreBuilder, StoreStats, Synchronous,
};
pub use table::{DEFAULT_TABLE, TableName, TableNameError};
pub use transaction::{RecordTransaction, in_transaction, in_transaction_with_provenance};
