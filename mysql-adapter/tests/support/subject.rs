//! The MariaDB store as the conformance kit's subject (`idem_conformance::Subject`): used by
//! the store's differential test and by the kit's run on every store (`idem-tests`, test
//! `conformance`).

use idem::{BoxError, StoreError};
use idem_conformance::{Subject, Timing};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation, Timestamp};
use idem_mysql::MySqlStore;
use sqlx::AssertSqlSafe;

/// Every command says the server instant it judged by, so the kit judges it exactly.
pub struct OnMySql(pub MySqlStore);

impl Subject for OnMySql {
    type Store = MySqlStore;

    fn store(&self) -> &MySqlStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.0.now().await
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let (reply, now) = self.0.apply_timed(operation, key, command).await?;
        Ok((reply, Timing::At(now)))
    }

    async fn plant_corrupt(&self, operation: &Operation, key: &Key) -> Result<bool, BoxError> {
        // State 9 is none the store writes.
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} VALUES (?, ?, 9, REPEAT('o', 16), REPEAT('f', 32), NULL, \
             UNIX_TIMESTAMP() * 1000 + 600000, 1)",
            self.0.table().quoted()
        )))
        .bind(operation.as_str())
        .bind(key.as_str())
        .execute(self.0.pool())
        .await?;
        Ok(true)
    }
}
