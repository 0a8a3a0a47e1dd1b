//! The adapter's own errors: setting the store up, migrating, sweeping. A record
//! command's failure is always an [`idem::StoreError`].

use std::time::Duration;

use thiserror::Error;

use crate::table::TableNameError;

/// Why the store could not be set up, migrated or swept.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The table name was refused.
    #[error(transparent)]
    TableName(#[from] TableNameError),
    /// The connection URL or options were refused.
    #[error("invalid PostgreSQL configuration: {0}")]
    Config(#[source] sqlx::Error),
    /// The database could not be reached, or refused a statement.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A statement did not answer within the command timeout; it may still have run.
    #[error("no answer within {0:?}; the statement may still have run")]
    Timeout(Duration),
    /// A table of this name exists and is not laid out as this adapter's: it is left as it
    /// is, and the store does not use it.
    #[error("the table {table} exists and is not idem's: {detail}")]
    Layout {
        /// The table.
        table: String,
        /// What differs.
        detail: String,
    },
}

pub use idem::CommandTimeout;

/// What a failed statement means for the record, beyond "unavailable": for logs.
pub(crate) fn describe(error: &sqlx::Error) -> Option<&'static str> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    Some(match db.code().as_deref()? {
        "42P01" => "the records table does not exist: run PostgresStore::migrate",
        "57014" => "the statement was cancelled (statement_timeout or a cancel request)",
        "57P01" | "57P02" | "57P03" => "the server terminated the session or is shutting down",
        "55P03" => "a lock was not available in time (lock_timeout)",
        "40001" | "40P01" => "a serialization failure or deadlock",
        "25006" => "the server is read-only (a standby)",
        _ => return None,
    })
}

/// A failed statement, with the cause spelled out where it is known.
#[derive(Debug, Error)]
#[error("{detail}: {source}")]
pub struct StatementFailed {
    detail: &'static str,
    #[source]
    source: sqlx::Error,
}

/// The error to report for a failed statement.
pub(crate) fn failed(error: sqlx::Error) -> idem::BoxError {
    match describe(&error) {
        Some(detail) => Box::new(StatementFailed {
            detail,
            source: error,
        }),
        None => Box::new(error),
    }
}
