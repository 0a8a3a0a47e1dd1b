//! The statements, shipped with the crate as SQL files (`sqlite-adapter/sql/`) and written
//! out once per store for its table.
//!
//! Placeholders: `{records}` (the quoted table name), `{index}` (the expiry index),
//! `{fences}` (the fence counter's table) and `{valid}` (the test that the row `r` is one
//! this adapter wrote). No statement reads a clock: the store reads the host's clock once
//! per command, inside the command's write transaction, and passes it in.

use std::sync::Arc;

use crate::row::VALID;
use crate::table::TableName;

/// The migration: the records table, its expiry index, the fence counter.
pub const MIGRATE: &str = include_str!("../sql/migrate.sql");
/// The record of one key, its columns' types, and the last fence granted.
pub const FIND: &str = include_str!("../sql/find.sql");
/// Writes a record.
pub const PUT: &str = include_str!("../sql/put.sql");
/// Deletes a record.
pub const DELETE: &str = include_str!("../sql/delete.sql");
/// Remembers the last fence granted.
pub const FENCE: &str = include_str!("../sql/fence.sql");
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

/// The statements of one store, for its table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) migrate: Arc<str>,
    pub(crate) find: Arc<str>,
    pub(crate) put: Arc<str>,
    pub(crate) delete: Arc<str>,
    pub(crate) fence: Arc<str>,
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
            find: expand(FIND),
            put: expand(PUT),
            delete: expand(DELETE),
            fence: expand(FENCE),
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
        .replace("{fences}", &table.quoted_fences())
        .replace("{valid}", VALID)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_written_out() {
        let table = TableName::new("t").unwrap();
        for template in [
            MIGRATE, FIND, PUT, DELETE, FENCE, SWEEP, LIST, FORGET, STATS,
        ] {
            let sql = expand(template, &table);
            assert!(!sql.contains('{') && !sql.contains('}'), "{sql}");
        }
    }
}
