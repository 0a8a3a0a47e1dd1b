//! A MariaDB (or MySQL) database of each test's own, for every crate whose tests need one
//! (idem-mysql's, the conformance kit's run on every store): created with a unique name on
//! the server at [`admin_url`] and dropped when the handle drops, also when the test fails.
//!
//! If no server answers, the tests fail saying so: CI starts one, and a silent skip would
//! hide a suite that never ran.

use std::time::Duration;

use sqlx::AssertSqlSafe;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

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
        let name = crate::net::unique_name("idem_test");
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
