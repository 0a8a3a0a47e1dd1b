//! The operator's tools (`idem::admin::AdminStore`) on a real MariaDB: the scenarios of
//! `idem_tests::admin`, each on a database of its own.

mod support;

use idem::admin::{AdminStore, Status};
use idem_mysql::{MySqlStore, TableName};
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
    idem_tests::admin::healthy(db.store(4).await, "mariadb", &names).await;
    let bare = MySqlStore::builder()
        .table(TableName::new("never_migrated").unwrap())
        .build(db.pool(2).await);
    idem_tests::admin::table_missing(bare).await;
}

/// A table of the store's name that is not idem's fails the layout check, saying so; so
/// does a table whose fence sequence was dropped, saying to migrate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_names_what_to_do() {
    let db = TestDb::create().await;
    let pool = db.pool(2).await;
    sqlx::query("CREATE TABLE other_records (id INT PRIMARY KEY) ENGINE = InnoDB")
        .execute(&pool)
        .await
        .unwrap();
    let layout = |store: MySqlStore| async move {
        let health = store.health().await.unwrap();
        health
            .checks
            .into_iter()
            .find(|check| check.name == "layout")
            .unwrap()
    };
    let other = MySqlStore::builder()
        .table(TableName::new("other_records").unwrap())
        .build(pool.clone());
    let check = layout(other).await;
    assert_eq!(check.status, Status::Fail, "{check:?}");
    assert!(check.detail.contains("not idem's"), "{check:?}");

    let store = db.store(2).await;
    assert_eq!(layout(store.clone()).await.status, Status::Ok);
    sqlx::query("DROP SEQUENCE idem_records_fence")
        .execute(&pool)
        .await
        .unwrap();
    let check = layout(store.clone()).await;
    assert_eq!(check.status, Status::Fail, "{check:?}");
    assert!(check.detail.contains("run migrate"), "{check:?}");
    store.migrate().await.unwrap();
    assert_eq!(layout(store).await.status, Status::Ok);
}

/// A pool whose every connection is taken is a warning, naming the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_is_a_warning() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let transactions = db.pool(2).await;
    let store = MySqlStore::builder()
        .transaction_pool(transactions.clone())
        .build(store.pool().clone());
    let held = [
        transactions.acquire().await.unwrap(),
        transactions.acquire().await.unwrap(),
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
        "INSERT INTO idem_records (operation, `key`, state, owner, fingerprint, body, expires_at) \
         VALUES ('admin.bad', 'k-bad', 9, ?, ?, NULL, 4102444800000)",
    )
    .bind(vec![0u8; 16])
    .bind(vec![0u8; 32])
    .execute(store.pool())
    .await
    .unwrap();
    idem_tests::admin::corrupt_row_is_named(store, "admin.bad", "k-bad").await;
}
