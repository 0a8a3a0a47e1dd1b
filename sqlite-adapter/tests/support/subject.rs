//! The SQLite store as the conformance kit's subject (`idem_conformance::Subject`): used by
//! the store's differential test and by the kit's run on every store (`idem-tests`, test
//! `conformance`).

use idem::{BoxError, StoreError};
use idem_conformance::{Subject, Timing};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation, Timestamp};
use idem_sqlite::SqliteStore;
use sqlx::AssertSqlSafe;

/// Every command says the instant (the host's clock, read in its write transaction) it judged
/// by, so the kit judges it exactly.
pub struct OnSqlite(pub SqliteStore);

impl Subject for OnSqlite {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        Ok(self.0.now())
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
        // State 9 is none the store writes; the names are the BLOBs of their bytes, as the
        // store keys its rows.
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} VALUES (?, ?, 9, zeroblob(16), zeroblob(32), NULL, ?, 1)",
            self.0.table().quoted()
        )))
        .bind(operation.as_str().as_bytes().to_vec())
        .bind(key.as_str().as_bytes().to_vec())
        .bind(i64::try_from(self.0.now().as_millis())? + 600_000)
        .execute(self.0.pool())
        .await?;
        Ok(true)
    }
}
