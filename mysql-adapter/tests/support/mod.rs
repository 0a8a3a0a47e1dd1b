//! Test harness: a database of each test's own on the MariaDB at [`admin_url`] (a random
//! name, dropped when the test ends, passed or failed), a store on it, and the business
//! table of the transactional tests.

#![allow(dead_code, unused_imports)]

pub mod differential;

use std::time::Duration;

use idem_mysql::MySqlStore;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, MySqlConnection};

/// The server the tests use when `IDEM_MYSQL_URL` does not name another.
pub const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306";

/// The server's URL, without a database.
pub fn admin_url() -> String {
    std::env::var("IDEM_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// A database of one test's own, dropped when this drops.
#[derive(Debug)]
pub struct TestDb {
    name: String,
    url: String,
}

impl TestDb {
    /// Creates a database with a random name.
    pub async fn create() -> Self {
        let name = format!("idem_test_{:016x}", rand::random::<u64>());
        let admin = admin_url();
        let pool = MySqlPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&admin)
            .await
            .expect("MariaDB answers at IDEM_MYSQL_URL (default mysql://root@127.0.0.1:3306)");
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .execute(&pool)
            .await
            .expect("create the test database");
        pool.close().await;
        let url = format!("{}/{name}", admin.trim_end_matches('/'));
        Self { name, url }
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A pool of `size` connections on the database.
    pub async fn pool(&self, size: u32) -> MySqlPool {
        MySqlPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&self.url)
            .await
            .expect("connect to the test database")
    }

    /// A store on a pool of `size` connections, its table migrated.
    pub async fn store(&self, size: u32) -> MySqlStore {
        let store = MySqlStore::builder().build(self.pool(size).await);
        store.migrate().await.expect("migrate");
        store
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Dropped from inside a runtime: the drop runs on a thread of its own.
        let name = self.name.clone();
        let admin = admin_url();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                if let Ok(pool) = MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(&admin)
                    .await
                {
                    let _ = sqlx::query(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
                        .execute(&pool)
                        .await;
                    pool.close().await;
                }
            });
        });
        let _ = dropped.join();
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
