//! The table's upkeep: [`PostgresStore::migrate`] creates the records table and checks
//! that it is laid out as this adapter's, and [`PostgresStore::sweep`] deletes expired
//! records, which every command already reads as absent (I9).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sqlx::{AssertSqlSafe, PgConnection, Row};

use super::PostgresStore;
use crate::error::PostgresError;

/// The advisory lock that serialises migrations (the bytes of `idempgs1`).
const MIGRATE_LOCK: i64 = 0x6964_656d_7067_7331;

/// The columns a records table has, in order: name, type, NOT NULL.
const LAYOUT: [(&str, &str, bool); 8] = [
    ("operation", "text", true),
    ("key", "text", true),
    ("state", "smallint", true),
    ("owner", "bytea", true),
    ("fingerprint", "bytea", true),
    ("body", "bytea", false),
    ("expires_at", "bigint", true),
    ("fence", "bigint", false),
];

/// The columns a table made before fences has: the layout without its last column, which
/// the migration adds in place.
const BEFORE_FENCES: usize = 7;

/// Which layouts [`PostgresStore::check_layout`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    /// The current one, or the one before fences, which the migration brings up to date.
    BeforeMigration,
    /// The current one only.
    Current,
}

impl PostgresStore {
    /// Creates the records table, its expiry index and the sequence its fences are drawn
    /// from (`{table}_fence`, MODEL.md `F1`) if they do not exist, adds the `fence` column
    /// to a table made before fences, and checks that the table is laid out as this
    /// adapter's. Nothing else is created. Safe to run
    /// again and from several processes at once (an advisory lock serialises it). A table
    /// of the same name that is not this adapter's is left as it is and reported
    /// ([`PostgresError::Layout`]).
    pub async fn migrate(&self) -> Result<(), PostgresError> {
        let mut tx = self.inner.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATE_LOCK)
            .execute(&mut *tx)
            .await?;
        if self.relation_kind(&mut tx).await?.is_some() {
            self.check_layout(&mut tx, Layout::BeforeMigration).await?;
        }
        sqlx::raw_sql(AssertSqlSafe(Arc::clone(&self.inner.sql.migrate)))
            .execute(&mut *tx)
            .await?;
        self.check_layout(&mut tx, Layout::Current).await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn relation_kind(
        &self,
        conn: &mut PgConnection,
    ) -> Result<Option<String>, PostgresError> {
        let row = sqlx::query("SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)")
            .bind(self.inner.table.quoted())
            .fetch_optional(&mut *conn)
            .await?;
        Ok(row.map(|row| row.try_get(0)).transpose()?)
    }

    /// Whether the table is laid out as this adapter's: the columns, their types and
    /// nullability, in order, and the primary key on (operation, key). Before the migration
    /// runs, a table made before fences (without the `fence` column) is this adapter's too.
    pub(super) async fn check_layout(
        &self,
        conn: &mut PgConnection,
        when: Layout,
    ) -> Result<(), PostgresError> {
        let layout = |detail: String| PostgresError::Layout {
            table: self.inner.table.to_string(),
            detail,
        };
        let kind = self.relation_kind(conn).await?;
        if kind.as_deref() != Some("r") {
            return Err(layout(format!(
                "it is not a plain table (relkind {kind:?})"
            )));
        }
        let columns: Vec<(String, String, bool)> = sqlx::query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_attribute AS a \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
        )
        .bind(self.inner.table.quoted())
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?)))
        .collect::<Result<_, sqlx::Error>>()?;
        let expected: Vec<(String, String, bool)> = LAYOUT
            .iter()
            .map(|(name, kind, not_null)| ((*name).to_owned(), (*kind).to_owned(), *not_null))
            .collect();
        let earlier = when == Layout::BeforeMigration && columns[..] == expected[..BEFORE_FENCES];
        if columns != expected && !earlier {
            return Err(layout(format!(
                "its columns are {columns:?}, not {expected:?}"
            )));
        }
        let key: Option<Vec<String>> = sqlx::query(
            "SELECT array_agg(a.attname::text ORDER BY k.i) \
             FROM pg_index AS x \
             CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, i) \
             JOIN pg_attribute AS a ON a.attrelid = x.indrelid AND a.attnum = k.attnum \
             WHERE x.indrelid = to_regclass($1) AND x.indisprimary",
        )
        .bind(self.inner.table.quoted())
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
        if key.as_deref() != Some(&["operation".to_owned(), "key".to_owned()][..]) {
            return Err(layout(format!(
                "its primary key is {key:?}, not (operation, key)"
            )));
        }
        Ok(())
    }

    /// Deletes at most `batch` records that have expired on the server's clock, and returns
    /// how many it deleted.
    ///
    /// An expired record already reads as absent for every command (I9); the sweeper only
    /// keeps the table from growing. It skips rows that anyone has locked (a complete
    /// inside a caller's transaction, a takeover under way) and every row this adapter did
    /// not write. Run it from one task of the service, often enough that a batch keeps up
    /// with the keys that expire, for instance:
    ///
    /// ```no_run
    /// # async fn sweeper(store: idem_postgres::PostgresStore) {
    /// use std::time::Duration;
    ///
    /// let mut every = tokio::time::interval(Duration::from_secs(10));
    /// loop {
    ///     every.tick().await;
    ///     // Drain what has expired, one short statement at a time.
    ///     while let Ok(removed) = store.sweep(1_000).await {
    ///         if removed < 1_000 {
    ///             break;
    ///         }
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn sweep(&self, batch: u32) -> Result<u64, PostgresError> {
        let timeout = self.inner.command_timeout;
        let sweep = sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.sweep)))
            .bind(i64::from(batch))
            .fetch_one(&self.inner.pool);
        let row = tokio::time::timeout(timeout, sweep)
            .await
            .map_err(|_| PostgresError::Timeout(timeout))??;
        let removed: i64 = row.try_get("removed")?;
        let removed = u64::try_from(removed).unwrap_or(0);
        self.inner
            .counters
            .swept
            .fetch_add(removed, Ordering::Relaxed);
        Ok(removed)
    }
}
