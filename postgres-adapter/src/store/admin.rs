//! [`AdminStore`] for [`PostgresStore`]: what an operator's tool (the `idem` command) asks
//! of the table, answered with the store's own statements, row decoder and server clock.
//!
//! - `inspect` runs the read command's own statement and keeps the row it found even when
//!   the read answers "absent": a pending record whose lease ran out (not yet taken over
//!   or swept) is shown as such, and so is a completed one past its retention.
//! - `list` is one keyset page in (operation, key) order ([`sql::LIST`](crate::sql::LIST)),
//!   `stats` one `GROUP BY` over the table ([`sql::STATS`](crate::sql::STATS)) that never
//!   reads a body, both at one reading of the server's clock.
//! - `forget` is one `DELETE` ([`sql::FORGET`](crate::sql::FORGET)) that checks the owner
//!   and the lease itself, so it never deletes a live pending record.
//! - `health` checks the clock, the server, the table's layout and the pools.
//!
//! Every statement runs within the store's command timeout: a tool that counts a large
//! table gives its store a longer one ([`PostgresStoreBuilder::command_timeout`]).
//!
//! [`PostgresStoreBuilder::command_timeout`]: crate::PostgresStoreBuilder::command_timeout

use std::future::Future;
use std::sync::Arc;

use idem::admin::{
    self, AdminError, AdminStore, Cursor, Health, HealthCheck, Inspection, ListFilter, ListPage,
    ListQuery, Listed, OperationStats, PoolState, Scanned, Status, StoreStats, clock_check,
    system_now,
};
use idem_core::key::TENANT_SCOPE;
use idem_core::{Key, Operation, OwnerToken, Timestamp};
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgConnection, PgPool, Row};

use super::PostgresStore;
use super::upkeep::Layout;
use crate::error::{CommandTimeout, PostgresError, failed};
use crate::row::Found;

/// The oldest PostgreSQL the statements run on (`server_version_num`): their
/// `AS MATERIALIZED` common table expressions are PostgreSQL 12's.
const MIN_SERVER_VERSION: i32 = 120_000;

impl PostgresStore {
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
    fn listed(&self, row: &PgRow) -> Result<Scanned, AdminError> {
        let operation: String = row.try_get("operation").map_err(unreadable)?;
        let key: String = row.try_get("key").map_err(unreadable)?;
        let decoded = (|| {
            let found = Found::from_row(row).map_err(unreadable)?;
            let record = found
                .record()
                .map_err(|detail| self.corrupt(&operation, &key, &detail))?;
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

    /// The `layout` check: the table exists, is this adapter's, and is migrated.
    async fn layout_check(&self, conn: &mut PgConnection) -> Result<HealthCheck, AdminError> {
        let table = &self.inner.table;
        let fail = |detail: String| Ok(HealthCheck::new("layout", Status::Fail, detail));
        let timeout = self.inner.command_timeout;
        let checked = tokio::time::timeout(timeout, async {
            if self.relation_kind(conn).await?.is_none() {
                return Ok(Some(format!("table {table} is missing: run migrate")));
            }
            match self.check_layout(conn, Layout::Current).await {
                Ok(()) => {}
                Err(PostgresError::Layout { detail, .. }) => {
                    let older = self.check_layout(conn, Layout::BeforeMigration).await;
                    return Ok(Some(match older {
                        Ok(()) => format!("table {table} was made by an older idem: run migrate"),
                        Err(_) => format!("table {table} is not idem's: {detail}"),
                    }));
                }
                Err(other) => return Err(other),
            }
            let sequence: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
                .bind(table.quoted_fence_sequence())
                .fetch_one(&mut *conn)
                .await?;
            Ok::<_, PostgresError>((!sequence).then(|| {
                format!(
                    "sequence {} is missing: run migrate",
                    table.quoted_fence_sequence()
                )
            }))
        })
        .await
        .map_err(|_| AdminError::Unavailable(Box::new(CommandTimeout(timeout))))?;
        match checked.map_err(unavailable)? {
            Some(detail) => fail(detail),
            None => Ok(HealthCheck::new(
                "layout",
                Status::Ok,
                format!("table {table} is laid out as this version expects"),
            )),
        }
    }
}

impl AdminStore for PostgresStore {
    fn kind(&self) -> String {
        format!("postgresql, table {}", self.inner.table)
    }

    /// Runs the read command's statement (which waits for a commit in progress on the row)
    /// and returns the row it found, at the clock reading it judged by, even when the read
    /// answers "absent": an expired pending record shows as [`RecordState::Expired`](idem::admin::RecordState::Expired).
    async fn inspect(&self, operation: &Operation, key: &Key) -> Result<Inspection, AdminError> {
        let row = self
            .within(
                sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.read)))
                    .bind(operation.as_str())
                    .bind(key.as_str())
                    .fetch_one(&self.inner.pool),
            )
            .await?;
        let now = clock(&row)?;
        let found = Found::from_row(&row).map_err(unreadable)?;
        let record = match found.state {
            None => None,
            Some(_) => Some(
                found
                    .record()
                    .map_err(|detail| self.corrupt(operation.as_str(), key.as_str(), &detail))?,
            ),
        };
        Ok(Inspection { now, record })
    }

    /// One page in (operation, key) order after the cursor, read with the server's clock in
    /// the same statement. A row this adapter did not write ends the listing with
    /// [`AdminError::Corrupt`] naming it, rather than being passed over unseen. A limit of
    /// 0 is read as 1, so that paging always moves on.
    async fn list(&self, query: &ListQuery) -> Result<ListPage, AdminError> {
        let after = query.after.as_ref().map(Cursor::position).transpose()?;
        let limit = query.limit.max(1);
        let base = query.operation.as_ref().map(Operation::as_str);
        let scoped = base.map(|name| format!("{name}{TENANT_SCOPE}"));
        let rows = self
            .within(
                sqlx::query(AssertSqlSafe(Arc::clone(&self.inner.sql.list)))
                    .bind(after.as_ref().map(|(operation, _)| operation.as_str()))
                    .bind(after.as_ref().map(|(_, key)| key.as_str()))
                    .bind(base)
                    .bind(scoped)
                    .bind(query.filter == ListFilter::InFlight)
                    .bind(i64::from(limit) + 1)
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
            let operation: Option<String> = row.try_get("operation").map_err(unreadable)?;
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
                    .bind(operation.as_str())
                    .bind(key.as_str())
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
            stats.operations.push(OperationStats {
                operation: row.try_get("operation").map_err(unreadable)?,
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

    /// `clock`, `server` (version 12 or later, not a read-only standby), `layout` (the
    /// table and its fence sequence, as `migrate` leaves them), `pool` and `transaction
    /// pool` (a warning when every connection is in use).
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
        let row = self
            .within(
                sqlx::query(
                    "SELECT current_setting('server_version_num')::int AS num, \
                     current_setting('server_version') AS version, \
                     pg_is_in_recovery() AS standby",
                )
                .fetch_one(&mut *conn),
            )
            .await?;
        let num: i32 = row.try_get("num").map_err(unreadable)?;
        let version: String = row.try_get("version").map_err(unreadable)?;
        let standby: bool = row.try_get("standby").map_err(unreadable)?;
        checks.push(if num < MIN_SERVER_VERSION {
            HealthCheck::new(
                "server",
                Status::Fail,
                format!("PostgreSQL {version} is too old: idem needs 12 or later"),
            )
        } else if standby {
            HealthCheck::new(
                "server",
                Status::Fail,
                format!("PostgreSQL {version} is a read-only standby: use the primary"),
            )
        } else {
            HealthCheck::new(
                "server",
                Status::Ok,
                format!("PostgreSQL {version} (12 or later is supported)"),
            )
        });
        checks.push(self.layout_check(&mut conn).await?);
        checks.extend(pools);
        Ok(Health { checks })
    }

    async fn sweep(&self, batch: u32) -> Result<u64, AdminError> {
        PostgresStore::sweep(self, batch).await.map_err(unavailable)
    }
}

/// The server's clock reading a statement returned as `now`.
fn clock(row: &PgRow) -> Result<Timestamp, AdminError> {
    let now: i64 = row.try_get("now").map_err(unreadable)?;
    admin::store_clock(now)
}

/// A statement's answer that is not what it selects.
fn unreadable(error: sqlx::Error) -> AdminError {
    AdminError::Unavailable(failed(error))
}

/// The adapter's own error as the operator's.
fn unavailable(error: PostgresError) -> AdminError {
    match error {
        PostgresError::Database(error) => AdminError::Unavailable(failed(error)),
        other => AdminError::Unavailable(Box::new(other)),
    }
}

/// The `pool` check of one pool.
fn pool_check(name: &str, pool: &PgPool) -> HealthCheck {
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
