//! The table's upkeep: [`MySqlStore::migrate`] creates the records table and its fence
//! sequence and checks that the table is laid out as this adapter's, and
//! [`MySqlStore::sweep`] deletes expired records, which every command already reads as
//! absent (I9).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use super::MySqlStore;
use crate::error::MySqlError;

/// The named lock that serialises migrations.
const MIGRATE_LOCK: &str = "idem_mysql_migrate";

/// The columns a records table has, in order: name, `COLUMN_TYPE`, nullable.
const LAYOUT: [(&str, &str, bool); 8] = [
    ("operation", "varbinary(255)", false),
    ("key", "varbinary(255)", false),
    ("state", "smallint(6)", false),
    ("owner", "varbinary(16)", false),
    ("fingerprint", "varbinary(32)", false),
    ("body", "longblob", true),
    ("expires_at", "bigint(20)", false),
    ("fence", "bigint(20)", true),
];

/// The oldest MariaDB the statements run on: `INSERT … RETURNING` is 10.5's.
const MIN_MARIADB: (u32, u32) = (10, 5);

impl MySqlStore {
    /// Creates the records table (InnoDB) and the sequence its fences are drawn from
    /// (`{table}_fence`, MODEL.md `F1`) if they do not exist, and checks that the table is
    /// laid out as this adapter's and that the server is one the statements run on
    /// (MariaDB 10.5 or later). Nothing else is created. Safe to run again and from several
    /// processes at once (a named lock, `GET_LOCK`, serialises it). A table of the same
    /// name that is not this adapter's is left as it is and reported
    /// ([`MySqlError::Layout`]).
    pub async fn migrate(&self) -> Result<(), MySqlError> {
        let mut conn = self.inner.pool.acquire().await?;
        check_server(&mut conn).await?;
        let locked: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 10)")
            .bind(MIGRATE_LOCK)
            .fetch_one(&mut *conn)
            .await?;
        if locked != Some(1) {
            return Err(MySqlError::Timeout(std::time::Duration::from_secs(10)));
        }
        let result = self.migrate_locked(&mut conn).await;
        let _ = sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(MIGRATE_LOCK)
            .execute(&mut *conn)
            .await;
        result
    }

    async fn migrate_locked(&self, conn: &mut MySqlConnection) -> Result<(), MySqlError> {
        if self.table_exists(conn).await? {
            self.check_layout(conn).await?;
        }
        for statement in &self.inner.sql.migrate {
            sqlx::raw_sql(AssertSqlSafe(Arc::clone(statement)))
                .execute(&mut *conn)
                .await?;
        }
        self.check_layout(conn).await
    }

    pub(super) async fn table_exists(
        &self,
        conn: &mut MySqlConnection,
    ) -> Result<bool, MySqlError> {
        let table = &self.inner.table;
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
        )
        .bind(table.database())
        .bind(table.table())
        .fetch_one(&mut *conn)
        .await?;
        Ok(count > 0)
    }

    /// Whether the table is laid out as this adapter's: an InnoDB base table, the columns,
    /// their types and nullability in order, and the primary key on (operation, key).
    pub(super) async fn check_layout(&self, conn: &mut MySqlConnection) -> Result<(), MySqlError> {
        let table = &self.inner.table;
        let layout = |detail: String| MySqlError::Layout {
            table: table.to_string(),
            detail,
        };
        let kind: Option<(String, Option<String>)> = sqlx::query(
            "SELECT CAST(TABLE_TYPE AS CHAR), CAST(ENGINE AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
        )
        .bind(table.database())
        .bind(table.table())
        .fetch_optional(&mut *conn)
        .await?
        .map(|row| Ok::<_, sqlx::Error>((row.try_get(0)?, row.try_get(1)?)))
        .transpose()?;
        match kind {
            Some((kind, Some(engine))) if kind == "BASE TABLE" && engine == "InnoDB" => {}
            other => {
                return Err(layout(format!(
                    "it is not an InnoDB base table (type and engine {other:?})"
                )));
            }
        }
        let columns: Vec<(String, String, bool)> = sqlx::query(
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), IS_NULLABLE = 'YES' \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
        )
        .bind(table.database())
        .bind(table.table())
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|row| {
            let nullable: i64 = row.try_get(2)?;
            Ok((row.try_get(0)?, row.try_get(1)?, nullable != 0))
        })
        .collect::<Result<_, sqlx::Error>>()?;
        let expected: Vec<(String, String, bool)> = LAYOUT
            .iter()
            .map(|(name, kind, null)| ((*name).to_owned(), (*kind).to_owned(), *null))
            .collect();
        if columns != expected {
            return Err(layout(format!(
                "its columns are {columns:?}, not {expected:?}"
            )));
        }
        let key: Vec<String> = sqlx::query_scalar(
            "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
               AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        )
        .bind(table.database())
        .bind(table.table())
        .fetch_all(&mut *conn)
        .await?;
        if key != ["operation", "key"] {
            return Err(layout(format!(
                "its primary key is {key:?}, not (operation, key)"
            )));
        }
        Ok(())
    }

    /// Deletes at most `batch` records that have expired on the server's clock, oldest
    /// first, and returns how many it deleted. They read as absent already (I9), so no
    /// reply changes; this keeps the table bounded. Rows this adapter did not write are
    /// never deleted. A row locked by a transaction in progress (a complete inside a
    /// caller's transaction, a takeover) makes the sweep wait for it, within the command
    /// timeout; run it from one task, periodically, in short batches.
    ///
    /// ```no_run
    /// # async fn demo(store: idem_mysql::MySqlStore) {
    /// let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
    /// loop {
    ///     every.tick().await;
    ///     while let Ok(removed) = store.sweep(1_000).await {
    ///         if removed < 1_000 {
    ///             break;
    ///         }
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn sweep(&self, batch: u32) -> Result<u64, MySqlError> {
        let timeout = self.inner.command_timeout;
        let sweep = sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.sweep)))
            .bind(batch)
            .execute(&self.inner.pool);
        let done = tokio::time::timeout(timeout, sweep)
            .await
            .map_err(|_| MySqlError::Timeout(timeout))??;
        let removed = done.rows_affected();
        self.inner
            .counters
            .swept
            .fetch_add(removed, Ordering::Relaxed);
        Ok(removed)
    }
}

/// Refuses a server the statements do not run on: MySQL (no `INSERT … RETURNING`, no
/// sequences) and MariaDB before 10.5. Returns the server's `VERSION()`.
pub(super) async fn check_server(conn: &mut MySqlConnection) -> Result<String, MySqlError> {
    let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(&mut *conn)
        .await?;
    let unsupported = |detail| MySqlError::Unsupported {
        version: version.clone(),
        detail,
    };
    if !version.contains("MariaDB") {
        return Err(unsupported(
            "MySQL is not supported yet: the statements use MariaDB's INSERT … RETURNING and sequences",
        ));
    }
    let mut parts = version.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    let major = parts.next().flatten().unwrap_or(0);
    let minor = parts.next().flatten().unwrap_or(0);
    if (major, minor) < MIN_MARIADB {
        return Err(unsupported(
            "MariaDB 10.5 or later is needed (INSERT … RETURNING)",
        ));
    }
    Ok(version)
}
