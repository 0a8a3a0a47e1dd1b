//! The operator's tools (`idem::admin::AdminStore`) on a real SQLite file: the scenarios of
//! `idem_tests::admin`, each on a file of its own in a temporary directory.

mod support;

use idem::admin::{AdminStore, Status};
use idem_sqlite::{SqliteStore, Synchronous, TableName};
use support::TempDir;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list() {
    let dir = TempDir::new();
    idem_tests::admin::inspect_and_list(support::store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_and_release() {
    let dir = TempDir::new();
    idem_tests::admin::forget_and_release(support::store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_sweep() {
    let dir = TempDir::new();
    idem_tests::admin::stats_and_sweep(support::store(&dir).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health() {
    let dir = TempDir::new();
    let names = ["journal", "synchronous", "pool"];
    idem_tests::admin::healthy(support::store(&dir).await, "sqlite", &names).await;
    let bare = SqliteStore::builder()
        .table(TableName::new("never_migrated").unwrap())
        .open(dir.db())
        .await
        .unwrap();
    idem_tests::admin::table_missing(bare).await;
}

/// `synchronous = NORMAL` is a warning that says what it costs; the rest stays `ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronous_normal_is_a_warning() {
    let dir = TempDir::new();
    let store = SqliteStore::builder()
        .synchronous(Synchronous::Normal)
        .open(dir.db())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let health = store.health().await.unwrap();
    assert_eq!(health.status(), Status::Warn, "{health:?}");
    for check in &health.checks {
        if check.name == "synchronous" {
            assert_eq!(check.status, Status::Warn, "{check:?}");
            assert!(check.detail.contains("power loss"), "{check:?}");
        } else {
            assert_eq!(check.status, Status::Ok, "{check:?}");
        }
    }
}

/// A table of the store's name that is not idem's fails the layout check, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_not_idems_fails_the_layout() {
    let dir = TempDir::new();
    let store = SqliteStore::builder()
        .table(TableName::new("other_records").unwrap())
        .open(dir.db())
        .await
        .unwrap();
    sqlx::query("CREATE TABLE other_records (id INTEGER PRIMARY KEY, note TEXT)")
        .execute(store.pool())
        .await
        .unwrap();
    let health = store.health().await.unwrap();
    let check = health
        .checks
        .iter()
        .find(|check| check.name == "layout")
        .unwrap();
    assert_eq!(check.status, Status::Fail, "{check:?}");
    assert!(check.detail.contains("not idem's"), "{check:?}");
}

/// A row this adapter did not write is named, never decoded or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_row_is_named() {
    let dir = TempDir::new();
    let store = support::store(&dir).await;
    sqlx::query(
        "INSERT INTO idem_records (operation, key, state, owner, fingerprint, body, expires_at) \
         VALUES (?1, ?2, 9, ?3, ?4, NULL, 4102444800000)",
    )
    .bind(b"admin.bad".to_vec())
    .bind(b"k-bad".to_vec())
    .bind(vec![0u8; 16])
    .bind(vec![0u8; 32])
    .execute(store.pool())
    .await
    .unwrap();
    idem_tests::admin::corrupt_row_is_named(store, "admin.bad", "k-bad").await;
}
