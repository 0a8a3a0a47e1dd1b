//! Test harness: idem-tests's MariaDB harness (a database of each test's own, dropped when the
//! test ends, passed or failed; `idem_tests::mysql`), with a store on a test's database, and
//! the business table of the transactional tests.

#![allow(dead_code, unused_imports)]

pub mod subject;

use std::ops::Deref;

use idem_mysql::MySqlStore;
use sqlx::MySqlConnection;
use sqlx::mysql::MySqlPool;

pub use idem_tests::mysql::{DEFAULT_URL, admin_url};

/// A database of one test's own ([`idem_tests::mysql::TestDb`]), dropped when this drops.
#[derive(Debug)]
pub struct TestDb(idem_tests::mysql::TestDb);

impl Deref for TestDb {
    type Target = idem_tests::mysql::TestDb;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl TestDb {
    /// Creates a database with a unique name.
    pub async fn create() -> Self {
        Self(idem_tests::mysql::TestDb::create().await)
    }

    /// A store on a pool of `size` connections, its table migrated.
    pub async fn store(&self, size: u32) -> MySqlStore {
        let store = MySqlStore::builder().build(self.pool(size).await);
        store.migrate().await.expect("migrate");
        store
    }
}

/// The business table of the transactional tests: one row per effect.
pub async fn create_orders(pool: &MySqlPool) {
    sqlx::query(
        "CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, made_by VARCHAR(64) NOT NULL) \
         ENGINE = InnoDB",
    )
    .execute(pool)
    .await
    .expect("create the orders table");
}

/// Who made each order, in the order they were made.
pub async fn orders(pool: &MySqlPool) -> Vec<String> {
    sqlx::query_scalar("SELECT made_by FROM orders ORDER BY id")
        .fetch_all(pool)
        .await
        .expect("read the orders")
}

/// Inserts an order made by `made_by` in `tx` and returns its id.
pub async fn insert_order(tx: &mut MySqlConnection, made_by: &str) -> Result<u64, sqlx::Error> {
    let done = sqlx::query("INSERT INTO orders (made_by) VALUES (?)")
        .bind(made_by)
        .execute(tx)
        .await?;
    Ok(done.last_insert_id())
}
