//! The statements, shipped with the crate as SQL files (`postgres-adapter/sql/`) and
//! written out once per store for its table.
//!
//! Each file uses these placeholders: `{records}` (the quoted table name), `{fences}` (the
//! quoted name of the sequence fences are drawn from), `{now}` (the
//! server's clock in whole milliseconds since the Unix epoch, read with
//! `clock_timestamp()`: the instant the statement runs, not `now()`, which is the start of
//! the transaction and would be stale inside a long caller transaction) and `{valid}` (the
//! test that the row `r` is one this adapter wrote).

use std::sync::Arc;

use crate::table::TableName;

/// The migration: the table and its expiry index.
pub const MIGRATE: &str = include_str!("../sql/migrate.sql");
/// The reserve's read-only first step (see [`PostgresStoreBuilder::read_first`](crate::PostgresStoreBuilder::read_first)).
pub const PEEK: &str = include_str!("../sql/peek.sql");
/// Reserve.
pub const RESERVE: &str = include_str!("../sql/reserve.sql");
/// Complete.
pub const COMPLETE: &str = include_str!("../sql/complete.sql");
/// Renew.
pub const RENEW: &str = include_str!("../sql/renew.sql");
/// Release.
pub const RELEASE: &str = include_str!("../sql/release.sql");
/// Read.
pub const READ: &str = include_str!("../sql/read.sql");
/// The sweeper's batch.
pub const SWEEP: &str = include_str!("../sql/sweep.sql");
/// The operator's listing: a keyset page of records, expired ones included
/// ([`idem::admin::AdminStore::list`]).
pub const LIST: &str = include_str!("../sql/list.sql");
/// The operator's delete of a completed or expired record
/// ([`idem::admin::AdminStore::forget`]).
pub const FORGET: &str = include_str!("../sql/forget.sql");
/// The operator's counts by operation and state ([`idem::admin::AdminStore::stats`]).
pub const STATS: &str = include_str!("../sql/stats.sql");

/// The server's clock, in whole milliseconds since the Unix epoch, read when evaluated.
pub const NOW: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Whether the row `r` is one this adapter wrote: a known state, a 16-byte owner, a
/// 32-byte fingerprint, a deadline the record machine can hold, a body exactly when the
/// state is "completed with a value", and a pending row's fence, if it has one, a fence the
/// sequence hands out (above zero). The same rules as the row decoder's, so that no statement
/// writes over, renews or takes over a row whose answer the decoder would then refuse.
/// Never NULL (every column but `body` and `fence` is NOT NULL, and a NULL fence passes).
pub const VALID: &str = "(r.state BETWEEN 1 AND 4 AND octet_length(r.owner) = 16 \
     AND octet_length(r.fingerprint) = 32 AND r.expires_at >= 0 \
     AND (r.body IS NULL) = (r.state <> 2) \
     AND (r.state <> 1 OR r.fence IS NULL OR r.fence > 0))";

/// The statements of one store, for its table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) migrate: Arc<str>,
    pub(crate) peek: Arc<str>,
    pub(crate) reserve: Arc<str>,
    pub(crate) complete: Arc<str>,
    pub(crate) renew: Arc<str>,
    pub(crate) release: Arc<str>,
    pub(crate) read: Arc<str>,
    pub(crate) sweep: Arc<str>,
    pub(crate) list: Arc<str>,
    pub(crate) forget: Arc<str>,
    pub(crate) stats: Arc<str>,
}

impl Statements {
    pub(crate) fn new(table: &TableName) -> Self {
        let expand = |template: &str| -> Arc<str> { expand(template, table).into() };
        Self {
            migrate: expand(MIGRATE),
            peek: expand(PEEK),
            reserve: expand(RESERVE),
            complete: expand(COMPLETE),
            renew: expand(RENEW),
            release: expand(RELEASE),
            read: expand(READ),
            sweep: expand(SWEEP),
            list: expand(LIST),
            forget: expand(FORGET),
            stats: expand(STATS),
        }
    }
}

/// `template` written out for `table`.
pub fn expand(template: &str, table: &TableName) -> String {
    template
        .replace("{records}", &table.quoted())
        .replace("{index}", &table.quoted_index())
        .replace("{fences}", &table.quoted_fence_sequence())
        .replace("{valid}", VALID)
        .replace("{now}", NOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_written_out() {
        let table = TableName::new("s.t").unwrap();
        for template in [
            MIGRATE, PEEK, RESERVE, COMPLETE, RENEW, RELEASE, READ, SWEEP, LIST, FORGET, STATS,
        ] {
            let sql = expand(template, &table);
            assert!(!sql.contains('{') && !sql.contains('}'), "{sql}");
            assert!(sql.contains("\"s\".\"t\""), "{sql}");
            // The transaction's start time is never used as the clock.
            assert!(!sql.contains("now()"), "{sql}");
        }
        // Every transition judges time by the statement's own clock reading.
        for template in [
            PEEK, RESERVE, COMPLETE, RENEW, RELEASE, READ, SWEEP, LIST, FORGET, STATS,
        ] {
            assert!(expand(template, &table).contains("clock_timestamp()"));
        }
    }
}
