//! Test harness: idem-tests's PostgreSQL harness (a database of its own for each test, a
//! private server to stop and start; `idem_tests::postgres`), with a store on a test's
//! database, and the business table of the transactional tests.

#![allow(dead_code, unused_imports)]

pub mod subject;

use std::ops::Deref;

use idem_postgres::PostgresStore;
use sqlx::{PgConnection, PgPool};

pub use idem_tests::postgres::{DEFAULT_URL, PrivateServer, admin_url, free_port};

/// A database of one test's own ([`idem_tests::postgres::TestDb`]), dropped when this drops.
#[derive(Debug)]
pub struct TestDb(idem_tests::postgres::TestDb);

impl Deref for TestDb {
    type Target = idem_tests::postgres::TestDb;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl TestDb {
    /// Creates a database with a unique name on the server at [`admin_url`].
    pub async fn create() -> Self {
        Self(idem_tests::postgres::TestDb::create().await)
    }

    /// Creates a database with a unique name on the server at `admin`.
    pub async fn create_on(admin: &str) -> Self {
        Self(idem_tests::postgres::TestDb::create_on(admin).await)
    }

    /// A store on a pool of `size` connections, its table migrated.
    pub async fn store(&self, size: u32) -> PostgresStore {
        let store = PostgresStore::builder().build(self.pool(size).await);
        store.migrate().await.expect("migrate");
        store
    }
}

/// The business table of the transactional tests: one row per effect.
pub async fn create_orders(pool: &PgPool) {
    sqlx::query("CREATE TABLE orders (id bigserial PRIMARY KEY, made_by text NOT NULL)")
        .execute(pool)
        .await
        .expect("create the orders table");
}

/// Who made each order, in the order they were made.
pub async fn orders(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar("SELECT made_by FROM orders ORDER BY id")
        .fetch_all(pool)
        .await
        .expect("read the orders")
}

/// Inserts an order made by `made_by` in `tx` and returns its id.
pub async fn insert_order(tx: &mut PgConnection, made_by: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("INSERT INTO orders (made_by) VALUES ($1) RETURNING id")
        .bind(made_by)
        .fetch_one(tx)
        .await
}

/// An order made by `made_by` for `resource`, guarded by `guard` under `fence` (MODEL.md
/// `F1`): in one transaction, the guard's admission, then the order only if admitted.
pub async fn fenced_order(
    pool: &PgPool,
    guard: &idem_postgres::FenceGuard,
    resource: &str,
    fence: idem::Fence,
    made_by: &str,
) -> Result<idem_postgres::Admission, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let admission = guard
        .admit(&mut tx, resource, fence)
        .await
        .map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
    if admission == idem_postgres::Admission::Admitted {
        insert_order(&mut tx, made_by).await?;
        tx.commit().await?;
    }
    Ok(admission)
}
