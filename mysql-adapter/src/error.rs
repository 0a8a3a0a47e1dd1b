//! The adapter's own errors: setting the store up, migrating, sweeping. A record
//! command's failure is always an [`idem::StoreError`].

use std::time::Duration;

use thiserror::Error;

use crate::table::TableNameError;

/// Why the store could not be set up, migrated or swept.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MySqlError {
    /// The table name was refused.
    #[error(transparent)]
    TableName(#[from] TableNameError),
    /// The connection URL or options were refused.
    #[error("invalid MySQL configuration: {0}")]
    Config(#[source] sqlx::Error),
    /// The database could not be reached, or refused a statement.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A statement did not answer within the command timeout; it may still have run.
    #[error("no answer within {0:?}; the statement may still have run")]
    Timeout(Duration),
    /// The server lacks what the statements use: MariaDB 10.5 or later (`INSERT …
    /// RETURNING`, sequences). MySQL is not supported yet.
    #[error("unsupported server {version:?}: {detail}")]
    Unsupported {
        /// The server's `VERSION()`.
        version: String,
        /// What is missing.
        detail: &'static str,
    },
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
        "42S02" => "the records table does not exist: run MySqlStore::migrate",
        "70100" => "the statement was interrupted (max_statement_time or KILL QUERY)",
        "40001" => "a deadlock; the transaction was rolled back",
        "HY000" => "the server refused the statement (a lock wait timeout, a read-only server)",
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

/// The server's error number, if `error` is one the server reported.
pub(crate) fn server_errno(error: &sqlx::Error) -> Option<u16> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .map(|e| e.number())
}

/// `ER_DUP_ENTRY`: an insert met a row of the same key (another caller's, committed
/// meanwhile).
pub(crate) const DUPLICATE_KEY: u16 = 1062;
/// `ER_LOCK_DEADLOCK`: InnoDB rolled the transaction back to break a deadlock.
pub(crate) const DEADLOCK: u16 = 1213;
