//! [`AdminStore`] for [`SqliteStore`]: what an operator's tool (the `idem` command) asks of
//! the file, answered with the store's own statements, row decoder and clock (the host's).
//!
//! - `inspect` runs the store's `find` and keeps the row it found, read with the clock
//!   after it as the store's reads are: a pending record whose lease ran out (not yet
//!   taken over or swept) is shown as such, and so is a completed one past its retention.
//! - `list` is one keyset page in (operation, key) order ([`sql::LIST`](crate::sql::LIST)),
//!   `stats` one `GROUP BY` over the table ([`sql::STATS`](crate::sql::STATS)) that never
//!   reads a body out, both at one reading of the clock.
//! - `forget` is one `DELETE` ([`sql::FORGET`](crate::sql::FORGET)) that checks the owner
//!   and the lease itself, so it never deletes a live pending record.
//! - `health` checks the clock, the journal mode, `synchronous`, the table's layout and the
//!   pool.
//!
//! Every statement runs within the store's command timeout: a tool that counts a large
//! table gives its store a longer one ([`SqliteStoreBuilder::command_timeout`]).
//!
//! [`SqliteStoreBuilder::command_timeout`]: crate::SqliteStoreBuilder::command_timeout

use std::future::Future;

use idem::admin::{
    self, AdminError, AdminStore, Cursor, Health, HealthCheck, Inspection, ListFilter, ListPage,
    ListQuery, Listed, OperationStats, PoolState, Scanned, Status, StoreStats, clock_check,
    system_now,
};
use idem_core::key::TENANT_SCOPE;
use idem_core::{Key, Operation, OwnerToken, Timestamp};
use sqlx::sqlite::SqliteRow;
use sqlx::{AssertSqlSafe, Row};

use super::{SqliteStore, bytes, clock};
use crate::error::{CommandTimeout, SqliteError, failed};
use crate::row::{Found, decode};

/// The columns of a records table as `migrate` makes it, in order: name, declared type,
/// NOT NULL, position in the primary key (0: not in it).
const LAYOUT: [(&str, &str, bool, i64); 8] = [
    ("operation", "BLOB", true, 1),
    ("key", "BLOB", true, 2),
    ("state", "INTEGER", true, 0),
    ("owner", "BLOB", true, 0),
    ("fingerprint", "BLOB", true, 0),
    ("body", "BLOB", false, 0),
    ("expires_at", "INTEGER", true, 0),
    ("fence", "INTEGER", false, 0),
];

impl SqliteStore {
    /// `work` within the command timeout, its failure as the operator's error.
    async fn within<T>(
        &self,
        work: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, AdminError> {
        let timeout = self.inner.command_timeout;
        match tokio::time::timeout(timeout, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(AdminError::Unavailable(failed(error))),
            Err(_) => Err(AdminError::Unavailable(Box::new(CommandTimeout(timeout)))),
        }
    }

    /// A row that is not a record this adapter wrote, named as the store's errors name it.
    fn corrupt(&self, operation: &str, key: &str, detail: &str) -> AdminError {
        AdminError::Corrupt(format!(
            "{} ({operation}, {key}) is not a record idem wrote: {detail}; left as it is",
            self.inner.table
        ))
    }

    /// The record a listing's row holds, under the names it is stored with.
    fn listed(&self, row: &SqliteRow) -> Result<Scanned, AdminError> {
        let name = |column: &str| -> Result<String, AdminError> {
            // A name of another type than BLOB is reported by the decoder below; read it
            // as text for the report.
            match row.try_get::<Vec<u8>, _>(column) {
                Ok(name) => Ok(String::from_utf8_lossy(&name).into_owned()),
                Err(_) => row.try_get::<String, _>(column).map_err(unreadable),
            }
        };
        let (operation, key) = (name("operation")?, name("key")?);
        let decoded = (|| {
            let record = decode(row)
                .map_err(unreadable)?
                .map_err(|detail| self.corrupt(&operation, &key, &detail))?
                .ok_or_else(|| self.corrupt(&operation, &key, "no record"))?;
            let stored = Operation::from_stored(&operation)
                .map_err(|error| self.corrupt(&operation, &key, &error.to_string()))?;
            let key_name = Key::new(&key)
                .map_err(|error| self.corrupt(&operation, &key, &error.to_string()))?;
            Ok(Listed {
                operation: stored,
                key: key_name,
                record,
            })
        })();
        Scanned::from_decoded(operation, key, decoded)
    }

    /// The `layout` check: the records table and the fence counter exist, and the records
    /// table has the columns and primary key `migrate` gives it.
    async fn layout_check(&self) -> Result<HealthCheck, AdminError> {
        let table = &self.inner.table;
        let columns = self
            .within(
                sqlx::query(
                    "SELECT name, upper(type) AS type, \"notnull\" AS not_null, pk \
                     FROM pragma_table_info(?1) ORDER BY cid",
                )
                .bind(table.as_str())
                .fetch_all(&self.inner.pool),
            )
            .await?;
        if columns.is_empty() {
            return Ok(HealthCheck::new(
                "layout",
                Status::Fail,
                format!("table {table} is missing: run migrate"),
            ));
        }
        let mut found = Vec::with_capacity(columns.len());
        for row in &columns {
            let name: String = row.try_get("name").map_err(unreadable)?;
            let kind: String = row.try_get("type").map_err(unreadable)?;
            let not_null: bool = row.try_get("not_null").map_err(unreadable)?;
            let pk: i64 = row.try_get("pk").map_err(unreadable)?;
            found.push((name, kind, not_null, pk));
        }
        let expected: Vec<(String, String, bool, i64)> = LAYOUT
            .iter()
            .map(|(name, kind, not_null, pk)| {
                ((*name).to_owned(), (*kind).to_owned(), *not_null, *pk)
            })
            .collect();
        if found != expected {
            let names: Vec<&str> = found.iter().map(|(name, ..)| name.as_str()).collect();
            return Ok(HealthCheck::new(
                "layout",
                Status::Fail,
                format!(
                    "table {table} is not idem's (columns {}): name another table",
                    names.join(", ")
                ),
            ));
        }
        let fences: i64 = self
            .within(
                sqlx::query_scalar("SELECT count(*) FROM pragma_table_info(?1)")
                    .bind(format!("{table}_fence"))
                    .fetch_one(&self.inner.pool),
            )
            .await?;
        Ok(if fences == 0 {
            HealthCheck::new(
                "layout",
                Status::Fail,
                format!("fence counter {table}_fence is missing: run migrate"),
            )
        } else {
            HealthCheck::new(
                "layout",
                Status::Ok,
                format!("table {table} is laid out as this version expects"),
            )
        })
    }
}

impl AdminStore for SqliteStore {
    fn kind(&self) -> String {
        format!(
            "sqlite, table {} in {}",
            self.inner.table,
            self.inner.path.display()
        )
    }

    /// Runs the store's `find` and returns the row it found, with the clock read after it,
    /// even when a read would answer "absent": an expired pending record shows as
    /// [`RecordState::Expired`](idem::admin::RecordState::Expired). A plain read (WAL): it sees the last commit, and does not
    /// wait for the writer.
    async fn inspect(&self, operation: &Operation, key: &Key) -> Result<Inspection, AdminError> {
        let row = self
            .within(
                sqlx::query(AssertSqlSafe(self.inner.sql.find.clone()))
                    .bind(bytes(operation.as_str()))
                    .bind(bytes(key.as_str()))
                    .fetch_one(&self.inner.pool),
            )
            .await?;
        let now = host_clock()?;
        let found = Found::from_row(&row).map_err(unreadable)?;
        let record = found
            .record
            .map_err(|detail| self.corrupt(operation.as_str(), key.as_str(), &detail))?;
        Ok(Inspection { now, record })
    }

    /// One page in (operation, key) order after the cursor, at one reading of the clock. A
    /// row this adapter did not write ends the listing with [`AdminError::Corrupt`] naming
    /// it, rather than being passed over unseen. A limit of 0 is read as 1, so that paging
    /// always moves on.
    async fn list(&self, query: &ListQuery) -> Result<ListPage, AdminError> {
        let after = query.after.as_ref().map(Cursor::position).transpose()?;
        let limit = query.limit.max(1);
        let now = host_clock()?;
        let base = query.operation.as_ref().map(Operation::as_str);
        let rows = self
            .within(
                sqlx::query(AssertSqlSafe(self.inner.sql.list.clone()))
                    .bind(millis(now))
                    .bind(
                        after
                            .as_ref()
                            .map(|(operation, _)| bytes(operation.as_str())),
                    )
                    .bind(after.as_ref().map(|(_, key)| bytes(key.as_str())))
                    .bind(base.map(bytes))
                    .bind(base.map(|name| bytes(&format!("{name}~u"))))
                    .bind(base.map(|name| bytes(&format!("{name}{TENANT_SCOPE}"))))
                    .bind(query.filter == ListFilter::All)
                    .bind(i64::from(limit) + 1)
                    .fetch_all(&self.inner.pool),
            )
            .await?;
        let mut scanned = Vec::with_capacity(rows.len());
        for row in &rows {
            scanned.push(self.listed(row)?);
        }
        Ok(ListPage::from_scanned(query, now, scanned))
    }

    /// One `DELETE` under the store's writer lock, judged at the clock read once the lock
    /// is held.
    async fn forget(
        &self,
        operation: &Operation,
        key: &Key,
        owner: OwnerToken,
    ) -> Result<bool, AdminError> {
        let timeout = self.inner.command_timeout;
        let forget = async {
            let _writer = self.inner.writer.lock().await;
            let now = clock().map_err(|_| SqliteError::Clock)?;
            let done = sqlx::query(AssertSqlSafe(self.inner.sql.forget.clone()))
                .bind(bytes(operation.as_str()))
                .bind(bytes(key.as_str()))
                .bind(owner.to_bytes().to_vec())
                .bind(millis(now))
                .execute(&self.inner.pool)
                .await?;
            Ok::<_, SqliteError>(done.rows_affected() > 0)
        };
        tokio::time::timeout(timeout, forget)
            .await
            .map_err(|_| AdminError::Unavailable(Box::new(CommandTimeout(timeout))))?
            .map_err(unavailable)
    }

    async fn stats(&self) -> Result<StoreStats, AdminError> {
        let now = host_clock()?;
        let rows = self
            .within(
                sqlx::query(AssertSqlSafe(self.inner.sql.stats.clone()))
                    .bind(millis(now))
                    .fetch_all(&self.inner.pool),
            )
            .await?;
        let mut stats = StoreStats::default();
        for row in &rows {
            let count = |column: &str| -> Result<u64, AdminError> {
                let value: i64 = row.try_get(column).map_err(unreadable)?;
                Ok(u64::try_from(value).unwrap_or(0))
            };
            let operation: Vec<u8> = row.try_get("operation").map_err(unreadable)?;
            stats.operations.push(OperationStats {
                operation: String::from_utf8_lossy(&operation).into_owned(),
                pending: count("pending")?,
                expired: count("expired")?,
                completed: count("completed")?,
                panicked: count("panicked")?,
                body_bytes: count("body_bytes")?,
                largest_body: count("largest_body")?,
            });
        }
        Ok(stats)
    }

    /// `clock` (the host's, which the store judges by), `journal` (WAL expected),
    /// `synchronous` (FULL or EXTRA; NORMAL a warning, OFF a failure), `layout` (the table
    /// and the fence counter, as `migrate` leaves them) and `pool` (a warning when every
    /// connection is in use).
    async fn health(&self) -> Result<Health, AdminError> {
        // The pool as it was before this check took a connection.
        let pool = pool_check(&self.inner.pool);
        let before = system_now();
        let now = host_clock()?;
        let after = system_now();
        let mut checks = vec![clock_check(before, now, after)];
        let mut conn = self.within(self.inner.pool.acquire()).await?;
        let mode: String = self
            .within(sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut *conn))
            .await?;
        checks.push(if mode.eq_ignore_ascii_case("wal") {
            HealthCheck::new("journal", Status::Ok, "WAL: reads run beside the writer")
        } else {
            HealthCheck::new(
                "journal",
                Status::Warn,
                format!("journal mode {mode}, not WAL: reads wait for every write"),
            )
        });
        let synchronous: i64 = self
            .within(sqlx::query_scalar("PRAGMA synchronous").fetch_one(&mut *conn))
            .await?;
        drop(conn);
        checks.push(match synchronous {
            2 | 3 => HealthCheck::new(
                "synchronous",
                Status::Ok,
                "FULL: a committed record survives a power loss",
            ),
            1 => HealthCheck::new(
                "synchronous",
                Status::Warn,
                "NORMAL: a power loss can lose the last records; use FULL",
            ),
            other => HealthCheck::new(
                "synchronous",
                Status::Fail,
                format!("OFF ({other}): a crash can lose or corrupt records; use FULL"),
            ),
        });
        checks.push(self.layout_check().await?);
        checks.push(pool);
        Ok(Health { checks })
    }

    async fn sweep(&self, batch: u32) -> Result<u64, AdminError> {
        SqliteStore::sweep(self, batch).await.map_err(unavailable)
    }
}

/// The store's clock, or why it cannot judge a deadline.
fn host_clock() -> Result<Timestamp, AdminError> {
    clock().map_err(|error| AdminError::Unavailable(Box::new(error)))
}

/// A timestamp as the table's `INTEGER` milliseconds.
fn millis(at: Timestamp) -> i64 {
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

/// A statement's answer that is not what it selects.
fn unreadable(error: sqlx::Error) -> AdminError {
    AdminError::Unavailable(failed(error))
}

/// The adapter's own error as the operator's.
fn unavailable(error: SqliteError) -> AdminError {
    match error {
        SqliteError::Database(error) => AdminError::Unavailable(failed(error)),
        other => AdminError::Unavailable(Box::new(other)),
    }
}

/// The `pool` check.
fn pool_check(pool: &sqlx::SqlitePool) -> HealthCheck {
    admin::pool_check(
        "pool",
        PoolState {
            open: pool.size(),
            idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
            max: pool.options().get_max_connections(),
            closed: pool.is_closed(),
        },
    )
}
