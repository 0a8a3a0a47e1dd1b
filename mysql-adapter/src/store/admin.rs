//! [`AdminStore`] for [`MySqlStore`]: what an operator's tool (the `idem` command) asks of
//! the table, answered with the store's own statements, row decoder and server clock.
//!
//! - `inspect` runs the read command's locked read ([`sql::SHARED`](crate::sql::SHARED),
//!   which waits for a commit in progress on the row) and keeps the row it found at the
//!   clock read after its lock: a pending record whose lease ran out (not yet taken over
//!   or swept) is shown as such, and so is a completed one past its retention.
//! - `list` is one keyset page in (operation, key) order ([`sql::LIST`](crate::sql::LIST)),
//!   `stats` one `GROUP BY` over the table ([`sql::STATS`](crate::sql::STATS)) that never
//!   reads a body, both at one reading of the server's clock.
//! - `forget` is one `DELETE` ([`sql::FORGET`](crate::sql::FORGET)) that checks the owner
//!   and the lease itself, so it never deletes a live pending record.
//! - `health` checks the clock, the server, the table's layout and the pools.
//!
//! Every statement runs within the store's command timeout: a tool that counts a large
//! table gives its store a longer one ([`MySqlStoreBuilder::command_timeout`]).
//!
//! [`MySqlStoreBuilder::command_timeout`]: crate::MySqlStoreBuilder::command_timeout

use std::future::Future;
use std::sync::Arc;

use idem::admin::{
    self, AdminError, AdminStore, Cursor, Health, HealthCheck, Inspection, ListFilter, ListPage,
    ListQuery, Listed, OperationStats, PoolState, Scanned, Status, StoreStats, clock_check,
    system_now,
};
use idem_core::key::TENANT_SCOPE;
use idem_core::{Key, Operation, OwnerToken, Timestamp};
use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, MySqlConnection, MySqlPool, Row};

use super::MySqlStore;
use super::upkeep::check_server;
use crate::error::{CommandTimeout, MySqlError, failed};
use crate::row::{Found, Unreadable, record_in};

impl MySqlStore {
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

    /// A decoding failure of the row of (`operation`, `key`) as the operator's error.
    fn unreadable_row(&self, operation: &str, key: &str, error: Unreadable) -> AdminError {
        match error {
            Unreadable::Corrupt(detail) => self.corrupt(operation, key, &detail),
            Unreadable::Unexpected(error) => unreadable(error),
        }
    }

    /// The record a listing's row holds, under the names it is stored with.
    fn listed(&self, row: &MySqlRow) -> Result<Scanned, AdminError> {
        let operation: Vec<u8> = row.try_get("operation").map_err(unreadable)?;
        let key: Vec<u8> = row.try_get("key").map_err(unreadable)?;
        let (operation, key) = (
            String::from_utf8_lossy(&operation).into_owned(),
            String::from_utf8_lossy(&key).into_owned(),
        );
        let decoded = (|| {
            let record = record_in(row)
                .map_err(|error| self.unreadable_row(&operation, &key, error))?
                .ok_or_else(|| self.corrupt(&operation, &key, "no state"))?;
            let name = Operation::from_stored(&operation)
                .map_err(|error| self.corrupt(&operation, &key, &error.to_string()))?;
            let key_name = Key::new(&key)
                .map_err(|error| self.corrupt(&operation, &key, &error.to_string()))?;
            Ok(Listed {
                operation: name,
                key: key_name,
                record,
            })
        })();
        Scanned::from_decoded(operation, key, decoded)
    }

    /// The `server` check: MariaDB 10.5 or later, and writable.
    async fn server_check(&self, conn: &mut MySqlConnection) -> Result<HealthCheck, AdminError> {
        let timeout = self.inner.command_timeout;
        let checked = tokio::time::timeout(timeout, async {
            let version = match check_server(conn).await {
                Ok(version) => version,
                Err(MySqlError::Unsupported { version, detail }) => {
                    return Ok((Status::Fail, format!("{version}: {detail}")));
                }
                Err(other) => return Err(other),
            };
            let read_only: i64 = sqlx::query_scalar("SELECT CAST(@@read_only AS SIGNED)")
                .fetch_one(&mut *conn)
                .await?;
            Ok(if read_only != 0 {
                (
                    Status::Fail,
                    format!("{version} is read-only: point the store at the primary"),
                )
            } else {
                (
                    Status::Ok,
                    format!("{version} (MariaDB 10.5 or later is supported)"),
                )
            })
        })
        .await
        .map_err(|_| AdminError::Unavailable(Box::new(CommandTimeout(timeout))))?;
        let (status, detail) = checked.map_err(unavailable)?;
        Ok(HealthCheck::new("server", status, detail))
    }

    /// The `layout` check: the table exists, is this adapter's, and has its fence sequence.
    async fn layout_check(&self, conn: &mut MySqlConnection) -> Result<HealthCheck, AdminError> {
        let table = &self.inner.table;
        let timeout = self.inner.command_timeout;
        let checked = tokio::time::timeout(timeout, async {
            if !self.table_exists(conn).await? {
                return Ok(Some(format!("table {table} is missing: run migrate")));
            }
            match self.check_layout(conn).await {
                Ok(()) => {}
                Err(MySqlError::Layout { detail, .. }) => {
                    return Ok(Some(format!("table {table} is not idem's: {detail}")));
                }
                Err(other) => return Err(other),
            }
            let sequences: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM information_schema.TABLES \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                   AND TABLE_TYPE = 'SEQUENCE'",
            )
            .bind(table.database())
            .bind(format!("{}_fence", table.table()))
            .fetch_one(&mut *conn)
            .await?;
            Ok::<_, MySqlError>((sequences == 0).then(|| {
                format!(
                    "sequence {} is missing: run migrate",
                    table.quoted_fence_sequence()
                )
            }))
        })
        .await
        .map_err(|_| AdminError::Unavailable(Box::new(CommandTimeout(timeout))))?;
        Ok(match checked.map_err(unavailable)? {
            Some(detail) => HealthCheck::new("layout", Status::Fail, detail),
            None => HealthCheck::new(
                "layout",
                Status::Ok,
                format!("table {table} is laid out as this version expects"),
            ),
        })
    }
}

impl AdminStore for MySqlStore {
    fn kind(&self) -> String {
        format!("mariadb, table {}", self.inner.table)
    }

    /// Runs the read command's locked read and returns the row it found, at the clock read
    /// after its lock, even when a read would answer "absent": an expired pending record
    /// shows as [`RecordState::Expired`](idem::admin::RecordState::Expired).
    async fn inspect(&self, operation: &Operation, key: &Key) -> Result<Inspection, AdminError> {
        let row = self
            .within(
                sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.shared)))
                    .bind(operation.as_str().as_bytes())
                    .bind(key.as_str().as_bytes())
                    .fetch_one(&self.inner.pool),
            )
            .await?;
        let found = Found::from_row(&row)
            .map_err(|error| self.unreadable_row(operation.as_str(), key.as_str(), error))?;
        Ok(Inspection {
            now: found.now,
            record: found.record,
        })
    }

    /// One page in (operation, key) order after the cursor, read with the server's clock in
    /// the same statement. A row this adapter did not write ends the listing with
    /// [`AdminError::Corrupt`] naming it, rather than being passed over unseen. A limit of
    /// 0 is read as 1, so that paging always moves on.
    async fn list(&self, query: &ListQuery) -> Result<ListPage, AdminError> {
        let after = query.after.as_ref().map(Cursor::position).transpose()?;
        let limit = query.limit.max(1);
        let after_operation = after.as_ref().map(|(operation, _)| operation.as_str());
        let after_key = after.as_ref().map(|(_, key)| key.as_str());
        let base = query.operation.as_ref().map(Operation::as_str);
        let scoped = base.map(|name| format!("{name}{TENANT_SCOPE}"));
        let bytes = |name: Option<&str>| name.map(|name| name.as_bytes().to_vec());
        let rows = self
            .within(
                sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.list)))
                    .bind(bytes(after_operation))
                    .bind(bytes(after_operation))
                    .bind(bytes(after_operation))
                    .bind(bytes(after_key))
                    .bind(bytes(base))
                    .bind(bytes(base))
                    .bind(bytes(base))
                    .bind(bytes(base))
                    .bind(bytes(scoped.as_deref()))
                    .bind(bytes(scoped.as_deref()))
                    .bind(query.filter == ListFilter::All)
                    .bind(u64::from(limit) + 1)
                    .fetch_all(&self.inner.pool),
            )
            .await?;
        let now = match rows.first() {
            Some(row) => clock(row)?,
            None => {
                return Err(AdminError::Unavailable(
                    "the listing returned no row".into(),
                ));
            }
        };
        let mut scanned = Vec::with_capacity(rows.len());
        for row in &rows {
            let operation: Option<Vec<u8>> = row.try_get("operation").map_err(unreadable)?;
            if operation.is_some() {
                scanned.push(self.listed(row)?);
            }
        }
        Ok(ListPage::from_scanned(query, now, scanned))
    }

    async fn forget(
        &self,
        operation: &Operation,
        key: &Key,
        owner: OwnerToken,
    ) -> Result<bool, AdminError> {
        let done = self
            .within(
                sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.forget)))
                    .bind(operation.as_str().as_bytes())
                    .bind(key.as_str().as_bytes())
                    .bind(owner.to_bytes().to_vec())
                    .execute(&self.inner.pool),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn stats(&self) -> Result<StoreStats, AdminError> {
        let rows = self
            .within(
                sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.stats)))
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

    /// `clock`, `server` (MariaDB 10.5 or later, writable), `layout` (the table and its
    /// fence sequence, as `migrate` leaves them), `pool` and `transaction pool` (a warning
    /// when every connection is in use).
    async fn health(&self) -> Result<Health, AdminError> {
        // The pools as they were before this check took a connection of its own.
        let pools = [
            pool_check("pool", &self.inner.pool),
            pool_check("transaction pool", &self.inner.transactions),
        ];
        let mut conn = self.within(self.inner.pool.acquire()).await?;
        let before = system_now();
        let row = self
            .within(
                sqlx::query(AssertSqlSafe(format!("SELECT {} AS now", crate::sql::NOW)))
                    .fetch_one(&mut *conn),
            )
            .await?;
        let after = system_now();
        let mut checks = vec![clock_check(before, clock(&row)?, after)];
        checks.push(self.server_check(&mut conn).await?);
        checks.push(self.layout_check(&mut conn).await?);
        checks.extend(pools);
        Ok(Health { checks })
    }

    async fn sweep(&self, batch: u32) -> Result<u64, AdminError> {
        MySqlStore::sweep(self, batch).await.map_err(unavailable)
    }
}

/// The server's clock reading a statement returned as `now`.
fn clock(row: &MySqlRow) -> Result<Timestamp, AdminError> {
    let now: i64 = row.try_get("now").map_err(unreadable)?;
    admin::store_clock(now)
}

/// A statement's answer that is not what it selects.
fn unreadable(error: sqlx::Error) -> AdminError {
    AdminError::Unavailable(failed(error))
}

/// The adapter's own error as the operator's.
fn unavailable(error: MySqlError) -> AdminError {
    match error {
        MySqlError::Database(error) => AdminError::Unavailable(failed(error)),
        other => AdminError::Unavailable(Box::new(other)),
    }
}

/// The `pool` check of one pool.
fn pool_check(name: &str, pool: &MySqlPool) -> HealthCheck {
    admin::pool_check(
        name,
        PoolState {
            open: pool.size(),
            idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
            max: pool.options().get_max_connections(),
            closed: pool.is_closed(),
        },
    )
}
