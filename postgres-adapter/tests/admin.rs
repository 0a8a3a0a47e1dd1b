//! The operator's tools (`idem::admin::AdminStore`) on a real PostgreSQL: the scenarios of
//! `idem_tests::admin`, each on a database of its own.

mod support;

use idem_postgres::{PostgresStore, TableName};
use support::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list() {
    let db = TestDb::create().await;
    idem_tests::admin::inspect_and_list(db.store(4).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_and_release() {
    let db = TestDb::create().await;
    idem_tests::admin::forget_and_release(db.store(4).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_sweep() {
    let db = TestDb::create().await;
    idem_tests::admin::stats_and_sweep(db.store(4).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health() {
    let db = TestDb::create().await;
    let names = ["server", "pool", "transaction pool"];
    idem_tests::admin::healthy(db.store(4).await, "postgresql", &names).await;
    // A store built on a pool of the service's: one pool serves both.
    let bare = PostgresStore::builder()
        .table(TableName::new("never_migrated").unwrap())
        .build(db.pool(2).await);
    idem_tests::admin::table_missing(bare).await;
}

/// A table made before fences (the layout `migrate` brings up to date) fails the layout
/// check, saying to migrate; a table of the same name that is not idem's fails it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_names_what_to_do() {
    use idem::admin::{AdminStore, Status};
    let db = TestDb::create().await;
    let pool = db.pool(2).await;
    sqlx::raw_sql(
        "CREATE TABLE old_records (operation text COLLATE \"C\" NOT NULL, \
         key text COLLATE \"C\" NOT NULL, state smallint NOT NULL, owner bytea NOT NULL, \
         fingerprint bytea NOT NULL, body bytea, expires_at bigint NOT NULL, \
         PRIMARY KEY (operation, key)); \
         CREATE TABLE other_records (id int PRIMARY KEY)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let layout = |store: PostgresStore| async move {
        let health = store.health().await.unwrap();
        health
            .checks
            .into_iter()
            .find(|check| check.name == "layout")
            .unwrap()
    };
    let old = PostgresStore::builder()
        .table(TableName::new("old_records").unwrap())
        .build(pool.clone());
    let check = layout(old.clone()).await;
    assert_eq!(check.status, Status::Fail, "{check:?}");
    assert!(check.detail.contains("run migrate"), "{check:?}");
    old.migrate().await.unwrap();
    assert_eq!(layout(old).await.status, Status::Ok);

    let other = PostgresStore::builder()
        .table(TableName::new("other_records").unwrap())
        .build(pool);
    let check = layout(other).await;
    assert_eq!(check.status, Status::Fail, "{check:?}");
    assert!(check.detail.contains("not idem's"), "{check:?}");
}

/// A pool whose every connection is taken is a warning, naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_is_a_warning() {
    use idem::admin::{AdminStore, Status};
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let statements = db.pool(2).await;
    let store = PostgresStore::builder()
        .transaction_pool(statements.clone())
        .build(store.pool().clone());
    let held = [
        statements.acquire().await.unwrap(),
        statements.acquire().await.unwrap(),
    ];
    let health = store.health().await.unwrap();
    let check = health
        .checks
        .iter()
        .find(|check| check.name == "transaction pool")
        .unwrap();
    assert_eq!(check.status, Status::Warn, "{check:?}");
    assert!(
        check.detail.contains("all 2 connections in use"),
        "{check:?}"
    );
    drop(held);
}

/// A row this adapter did not write is named, never decoded or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_row_is_named() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    sqlx::query(
        "INSERT INTO idem_records (operation, key, state, owner, fingerprint, body, expires_at) \
         VALUES ('admin.bad', 'k-bad', 9, $1, $2, NULL, 4102444800000)",
    )
    .bind(vec![0u8; 16])
    .bind(vec![0u8; 32])
    .execute(store.pool())
    .await
    .unwrap();
    idem_tests::admin::corrupt_row_is_named(store, "admin.bad", "k-bad").await;
}
