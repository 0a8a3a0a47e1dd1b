//! A provider you own in PostgreSQL that honours fences (MODEL.md `F1`): the [`FenceGuard`].
//!
//! A holder paused past its lease keeps running after another caller took its key over, and
//! its writes can land after the new holder's. A table of your own can refuse them: keep, per
//! guarded resource (an account, an order, the call's downstream key), the highest fence a
//! write was admitted under, and admit a write only under a fence not below it. The guard is
//! that check, as one row per resource in a table of its own, taken in the caller's
//! transaction before its writes: admitted, the row stays locked until the transaction ends,
//! so a holder with a lower fence waits and is then refused; refused, the caller rolls back.
//!
//! The same fence is admitted again (it is the same holder's grant: its retried or second
//! write), a higher one replaces it, a lower one is refused. A fence orders holders; it does
//! not deduplicate: a stale holder whose write is admitted *before* its successor's made a
//! write all the same, which the successor's then follows. Pass the downstream key (`D1`) for
//! that.

use std::sync::Arc;

use idem_core::Fence;
use sqlx::{AssertSqlSafe, PgConnection, PgExecutor, Row};

use crate::error::PostgresError;
use crate::table::TableName;

/// The table the guard keeps when none is named.
pub const DEFAULT_FENCE_TABLE: &str = "idem_fences";

/// What [`FenceGuard::admit`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a stale write must be rolled back, not committed"]
pub enum Admission {
    /// The fence is the highest the resource has seen: write, and commit.
    Admitted,
    /// A holder granted after this one has been admitted: roll back, and make no write.
    Stale {
        /// The fence that was admitted for the resource.
        highest: Fence,
    },
}

/// The fence check of a provider you own in PostgreSQL (MODEL.md `F1`).
///
/// Per guarded resource (an account, an order, the call's downstream key), one row in a table
/// of its own keeps the highest fence a write was admitted under; [`admit`](Self::admit), in
/// the caller's transaction and before its writes, admits a fence not below it and keeps the
/// row locked until the transaction ends, so a holder with a lower fence waits and is then
/// refused. The same fence is admitted again (the same holder's retried or second write). A
/// fence orders holders and deduplicates nothing: a stale holder admitted *before* its
/// successor wrote all the same; pass the downstream key (`D1`) for that.
///
/// ```no_run
/// # async fn demo(
/// #     guard: idem_postgres::FenceGuard,
/// #     mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
/// #     claim: idem::Claim,
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// use idem_postgres::Admission;
///
/// let fence = claim.fence().ok_or("this store hands out no fences")?;
/// match guard.admit(&mut tx, "account-17", fence).await? {
///     Admission::Admitted => {
///         sqlx::query("UPDATE accounts SET balance = balance - 100 WHERE id = 17")
///             .execute(&mut *tx)
///             .await?;
///         tx.commit().await?;
///     }
///     // A newer holder of the key has written: this one's write would be stale.
///     Admission::Stale { .. } => tx.rollback().await?,
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FenceGuard {
    table: TableName,
    migrate: Arc<str>,
    admit: Arc<str>,
    highest: Arc<str>,
}

impl Default for FenceGuard {
    fn default() -> Self {
        // The default name is a valid table name.
        Self::new(TableName::new(DEFAULT_FENCE_TABLE).unwrap_or_else(|_| unreachable!()))
    }
}

impl FenceGuard {
    /// A guard keeping its fences in `table`.
    pub fn new(table: TableName) -> Self {
        let quoted = table.quoted();
        Self {
            migrate: format!(
                "CREATE TABLE IF NOT EXISTS {quoted} (\
                 resource text COLLATE \"C\" PRIMARY KEY, fence bigint NOT NULL)"
            )
            .into(),
            admit: format!(
                "INSERT INTO {quoted} AS g (resource, fence) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence \
                 WHERE g.fence <= excluded.fence \
                 RETURNING g.fence"
            )
            .into(),
            highest: format!("SELECT fence FROM {quoted} WHERE resource = $1").into(),
            table,
        }
    }

    /// The table the fences are kept in.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// Creates the guard's table if it does not exist. Safe to run again.
    pub async fn migrate(&self, executor: impl PgExecutor<'_>) -> Result<(), PostgresError> {
        sqlx::query(AssertSqlSafe(Arc::clone(&self.migrate)))
            .execute(executor)
            .await?;
        Ok(())
    }

    /// Admits a write to `resource` under `fence` in the caller's transaction `conn`, or says
    /// it is stale. Admitted, the resource's row holds `fence` and stays locked until the
    /// transaction ends; the caller writes, then commits (and a rollback gives the fence back
    /// with its writes). Run it before the writes it guards, in the same transaction.
    pub async fn admit(
        &self,
        conn: &mut PgConnection,
        resource: &str,
        fence: Fence,
    ) -> Result<Admission, PostgresError> {
        let admitted = sqlx::query(AssertSqlSafe(Arc::clone(&self.admit)))
            .bind(resource)
            .bind(i64::from(fence))
            .fetch_optional(&mut *conn)
            .await?;
        if admitted.is_some() {
            return Ok(Admission::Admitted);
        }
        // Refused: the row holds a higher fence, locked by the upsert; read it to say which.
        // It is above `fence`, so a fence itself.
        let highest: i64 = sqlx::query(AssertSqlSafe(Arc::clone(&self.highest)))
            .bind(resource)
            .fetch_one(&mut *conn)
            .await?
            .try_get(0)?;
        Ok(Admission::Stale {
            highest: Fence::try_from(highest).unwrap_or(fence),
        })
    }
}
