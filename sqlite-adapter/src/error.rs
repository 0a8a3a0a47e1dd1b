//! The adapter's own errors: opening the database, migrating, sweeping. A record
//! command's failure is always an [`idem::StoreError`].

use std::time::Duration;

use thiserror::Error;

use crate::table::TableNameError;

/// Why the store could not be opened, migrated or swept.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The table name was refused.
    #[error(transparent)]
    TableName(#[from] TableNameError),
    /// The database file could not be opened, or refused a statement.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A statement did not answer within the command timeout; it may still have run.
    #[error("no answer within {0:?}; the statement may still have run")]
    Timeout(Duration),
    /// The host's clock reads a time before 1970: no deadline can be judged by it.
    #[error("the host's clock reads a time before 1970")]
    Clock,
}

pub use idem::CommandTimeout;

/// What a failed statement means, beyond "unavailable": for logs.
fn describe(error: &sqlx::Error) -> Option<&'static str> {
    let sqlx::Error::Database(db) = error else {
        return None;
    };
    let code = db.code()?;
    // The primary result code is the low byte of the extended one.
    let primary = code.parse::<i32>().ok()? & 0xff;
    Some(match primary {
        5 => "the database is locked by another writer (SQLITE_BUSY) past the busy timeout",
        6 => "a table is locked (SQLITE_LOCKED)",
        10 => "a disk I/O error (SQLITE_IOERR)",
        11 => "the database file is malformed (SQLITE_CORRUPT)",
        13 => "the disk is full (SQLITE_FULL)",
        14 => "the database file cannot be opened (SQLITE_CANTOPEN)",
        8 => "the database is read-only (SQLITE_READONLY)",
        1 if db.message().contains("no such table") => {
            "the records table does not exist: run SqliteStore::migrate"
        }
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

/// The host's clock read before 1970, as a command's failure.
#[derive(Debug, Error)]
#[error("the host's clock reads a time before 1970")]
pub(crate) struct ClockBeforeEpoch;

/// A deadline the table cannot hold (past `i64::MAX` milliseconds): nothing was written.
#[derive(Debug, Error)]
#[error("a deadline of {0} ms does not fit the table's 64-bit column; nothing was written")]
pub(crate) struct DeadlineOutOfRange(pub(crate) u64);
