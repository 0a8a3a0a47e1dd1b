//! The PostgreSQL store of idem.

mod error;
mod row;
pub mod sql;
mod store;
pub mod table;

pub use error::{CommandTimeout, PostgresError};
pub use store::{
    DEFAULT_COMMAND_TIMEOUT, MAX_DURATION_MS, MAX_RACES, PostgresStore, PostgresStoreBuilder,
    StoreStats,
};
pub use table::{DEFAULT_TABLE, TableName, TableNameError};
mod transaction;
pub use transaction::{
    BEGIN, PgTransaction, RecordTransaction, in_transaction, in_transaction_with_provenance,
};
