//! The PostgreSQL store as the conformance kit's subject (`idem_conformance::Subject`): used
//! by the store's differential test and by the kit's run on every store (`idem-tests`, test
//! `conformance`).

use idem::{BoxError, StoreError};
use idem_conformance::{Subject, Timing};
use idem_core::record::{Command, CommandKind, Reply};
use idem_core::{Key, Operation, Timestamp};
use idem_postgres::PostgresStore;

/// PostgreSQL: every statement says the server instant it judged by, so the kit judges it
/// exactly.
pub struct OnPostgres {
    pub store: PostgresStore,
    pub pool: sqlx::PgPool,
}

impl Subject for OnPostgres {
    type Store = PostgresStore;

    fn store(&self) -> &PostgresStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let millis: i64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
                .fetch_one(&self.pool)
                .await
                .map_err(|error| StoreError::Unavailable {
                    command: CommandKind::Read,
                    source: Box::new(error),
                })?;
        Ok(Timestamp::from_millis(u64::try_from(millis).unwrap_or(0)))
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let (reply, now) = self.store.apply_timed(operation, key, command).await?;
        Ok((reply, Timing::At(now)))
    }

    async fn plant_corrupt(&self, operation: &Operation, key: &Key) -> Result<bool, BoxError> {
        // State 9 is none the store writes.
        sqlx::query(
            "INSERT INTO idem_records (operation, key, state, owner, fingerprint, body, expires_at)
             VALUES ($1, $2, 9, '\\x00'::bytea, '\\x00'::bytea, NULL,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 600000)",
        )
        .bind(operation.as_str())
        .bind(key.as_str())
        .execute(&self.pool)
        .await?;
        Ok(true)
    }
}
