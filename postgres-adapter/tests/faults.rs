//! Faults on a real PostgreSQL: statements past their timeout, backends terminated in the
//! middle of a reserve and of a commit, a server restarted under the store, and a store
//! built while the server is down. Every failure is reported as unavailable (its outcome
//! unknown), every command is safe to repeat, and no fault makes a second business row.
//!
//! The tests that restart or reconfigure a server start a private one (`PrivateServer`),
//! never the shared one.

mod support;

use std::time::Duration;

use idem::{
    Coordinator, Error, Fingerprint, Key, Operation, Options, OwnerToken, Provenance, Store,
    StoreError, StoreFailurePolicy,
};
use idem_core::record::{Command, Reply};
use idem_postgres::{PostgresStore, in_transaction, in_transaction_with_provenance};
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use support::{PrivateServer, TestDb, create_orders, insert_order, orders};

fn fingerprint() -> Fingerprint {
    Fingerprint::builder()
        .field("cart", "c-1")
        .finish()
        .unwrap()
}

fn names() -> (Operation, Key) {
    (
        Operation::new("order.create").unwrap(),
        Key::new("k").unwrap(),
    )
}

fn reserve(owner: u128, lease_ms: u64) -> Command {
    Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: fingerprint(),
        lease: Duration::from_millis(lease_ms),
    }
}

/// Locks the record's row in a transaction of `conn`'s own (`mode`: `UPDATE`, `SHARE`),
/// as a caller's transaction in the middle of a complete would.
async fn lock_record(conn: &mut PgConnection, store: &PostgresStore, mode: &str) {
    let (operation, key) = names();
    sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
    let locked = sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM {} WHERE operation = $1 AND key = $2 FOR {mode}",
        store.table().quoted()
    )))
    .bind(operation.as_str())
    .bind(key.as_str())
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    assert_eq!(locked.len(), 1, "the record's row is there to lock");
}

/// The pids of the backends of database `db` waiting on `event` (`Lock`, `SyncRep`),
/// once there is one.
async fn waiting(pool: &PgPool, db: &str, event: &str) -> Vec<i32> {
    for _ in 0..200 {
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = $1 AND (wait_event_type = $2 OR wait_event = $2)",
        )
        .bind(db)
        .bind(event)
        .fetch_all(pool)
        .await
        .unwrap();
        if !pids.is_empty() {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no backend of {db} is waiting on {event}");
}

async fn terminate(pool: &PgPool, pids: &[i32]) {
    for pid in pids {
        let done: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(pool)
            .await
            .unwrap();
        assert!(done, "backend {pid} terminated");
    }
}

async fn row_text(store: &PostgresStore) -> Option<String> {
    let (operation, key) = names();
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT row_to_json(r)::text FROM {} AS r WHERE operation = $1 AND key = $2",
        store.table().quoted()
    )))
    .bind(operation.as_str())
    .bind(key.as_str())
    .fetch_optional(store.pool())
    .await
    .unwrap()
}

/// A takeover that waits for a row lock longer than the server's `statement_timeout` is
/// cancelled by the server: unavailable, and nothing changed. So is a complete.
#[tokio::test]
async fn a_statement_past_its_server_timeout_is_unavailable_and_changes_nothing() {
    let db = TestDb::create().await;
    let setup = db.store(2).await;
    let store = PostgresStore::builder()
        .statement_timeout(Duration::from_millis(200))
        .command_timeout(Duration::from_secs(5))
        .connect(&db.url())
        .await
        .unwrap();
    let (operation, key) = names();
    setup.apply(&operation, &key, reserve(1, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let before = row_text(&store).await;
    let mut holder = db.conn().await;
    lock_record(&mut holder, &store, "UPDATE").await;
    let started = std::time::Instant::now();
    let error = store
        .apply(&operation, &key, reserve(2, 30_000))
        .await
        .unwrap_err();
    assert!(error.is_outcome_unknown(), "{error}");
    assert!(error.to_string().contains("statement_timeout"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let complete = Command::Complete {
        owner: OwnerToken::from_u128(1),
        fingerprint: fingerprint(),
        result: idem::record::StoredResult::NotStored,
        retention: Duration::from_secs(60),
    };
    let error = store.apply(&operation, &key, complete).await.unwrap_err();
    assert!(error.is_outcome_unknown(), "{error}");
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    assert_eq!(row_text(&store).await, before, "nothing changed");
    assert_eq!(store.stats().unavailable, 2);
    // The store goes on once the lock is gone.
    let reply = store
        .apply(&operation, &key, reserve(2, 30_000))
        .await
        .unwrap();
    assert!(matches!(reply, Reply::Reserved(_)), "{reply:?}");
}

/// A store with a 200 ms command timeout, whose record of `names()` holds an expired
/// reservation that the returned connection's open transaction has locked.
async fn locked_under_a_short_command_timeout(db: &TestDb) -> (PostgresStore, PgConnection) {
    let store = PostgresStore::builder()
        .command_timeout(Duration::from_millis(200))
        .build(db.pool(4).await);
    store.migrate().await.unwrap();
    let (operation, key) = names();
    store.apply(&operation, &key, reserve(1, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut holder = db.conn().await;
    lock_record(&mut holder, &store, "UPDATE").await;
    (store, holder)
}

/// A command that outlives the store's own (client-side) timeout is given up and its
/// connection closed; the statement may still run on the server, as this one does once the
/// lock is released. The attempt's retry with the same token is then recognised (I11).
#[tokio::test]
async fn a_command_past_its_client_timeout_may_still_land_and_its_retry_is_recognised() {
    let db = TestDb::create().await;
    let (store, mut holder) = locked_under_a_short_command_timeout(&db).await;
    let (operation, key) = names();
    let error = store
        .apply(&operation, &key, reserve(2, 30_000))
        .await
        .unwrap_err();
    assert!(error.is_outcome_unknown(), "{error}");
    assert!(error.to_string().contains("no reply within"), "{error}");
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    // The abandoned statement takes the key over once it gets the lock.
    let mut landed = false;
    for _ in 0..100 {
        if let Ok(Reply::Read(Some(record))) = store.apply(&operation, &key, Command::Read).await
            && record.owner() == OwnerToken::from_u128(2)
        {
            landed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(landed, "the timed-out reserve still ran on the server");
    let retry = store
        .apply(&operation, &key, reserve(2, 30_000))
        .await
        .unwrap();
    assert!(
        matches!(retry, Reply::Reserved(r) if r.owner == OwnerToken::from_u128(2)),
        "{retry:?}"
    );
}

/// A command sent with `Store::apply_bounded` arms no timer of the store's: its caller bounds
/// it (the driver drops it at the attempt's reply deadline). On a locked row it waits as long
/// as its caller lets it, where `apply` gives up at the command timeout (the test above).
#[tokio::test]
async fn a_command_its_caller_bounds_has_no_timeout_of_the_stores() {
    let db = TestDb::create().await;
    let (store, mut holder) = locked_under_a_short_command_timeout(&db).await;
    let (operation, key) = names();
    let bounded = tokio::time::timeout(
        Duration::from_millis(800),
        store.apply_bounded(&operation, &key, reserve(2, 30_000)),
    )
    .await;
    assert!(bounded.is_err(), "{bounded:?}");
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    // The dropped command's connection was closed, not handed out again mid-statement: the
    // store answers on.
    let read = store.apply(&operation, &key, Command::Read).await;
    assert!(matches!(read, Ok(Reply::Read(_))), "{read:?}");
}

/// The backend running a reserve is terminated while the reserve waits: unavailable; the
/// retry with the same token reserves, on a new connection of the same pool.
#[tokio::test]
async fn a_backend_terminated_mid_reserve_is_unavailable_and_the_retry_reserves() {
    let db = TestDb::create().await;
    let store = PostgresStore::builder()
        .command_timeout(Duration::from_secs(10))
        .build(db.pool(4).await);
    store.migrate().await.unwrap();
    let admin = db.pool(2).await;
    let (operation, key) = names();
    store.apply(&operation, &key, reserve(1, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut holder = db.conn().await;
    lock_record(&mut holder, &store, "UPDATE").await;
    let reserving = {
        let (store, operation, key) = (store.clone(), operation.clone(), key.clone());
        tokio::spawn(async move { store.apply(&operation, &key, reserve(2, 30_000)).await })
    };
    let pids = waiting(&admin, &db.name, "Lock").await;
    terminate(&admin, &pids).await;
    let error = reserving.await.unwrap().unwrap_err();
    assert!(error.is_outcome_unknown(), "{error}");
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    let retry = store
        .apply(&operation, &key, reserve(2, 30_000))
        .await
        .unwrap();
    assert!(
        matches!(retry, Reply::Reserved(r) if r.owner == OwnerToken::from_u128(2)),
        "{retry:?}"
    );
    assert_eq!(store.stats().unavailable, 1);
}

/// Options for the commit tests: a reply deadline long enough that the fault, not the
/// deadline, ends the complete.
fn patient() -> Options {
    Options::builder()
        .lease(Duration::from_secs(30))
        .reply_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// The backend of an action's transaction is terminated while the complete inside it waits
/// for the record's row: nothing is committed, the call ends `RolledBack` (the attempt
/// reads the record, finds its own reservation and gives it back), and the client's retry
/// writes the one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_terminated_mid_complete_commits_nothing_and_the_retry_writes_once() {
    let db = TestDb::create().await;
    let store = PostgresStore::builder()
        .command_timeout(Duration::from_secs(10))
        .build(db.pool(8).await);
    store.migrate().await.unwrap();
    create_orders(store.pool()).await;
    let admin = db.pool(2).await;
    let coordinator = Coordinator::new(store.clone(), patient());
    let handle = coordinator
        .operation::<String, sqlx::Error>("order.create")
        .unwrap();
    let (inserted_tx, inserted_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let call = {
        let handle = handle.clone();
        tokio::spawn(async move {
            in_transaction(
                &handle,
                "k",
                fingerprint(),
                move |_claim, mut tx| async move {
                    insert_order(&mut tx, "first").await?;
                    let _ = inserted_tx.send(());
                    let _ = go_rx.await;
                    Ok(("first".to_owned(), tx))
                },
            )
            .await
        })
    };
    inserted_rx.await.unwrap();
    let mut holder = db.conn().await;
    lock_record(&mut holder, &store, "SHARE").await;
    go_tx.send(()).unwrap();
    let pids = waiting(&admin, &db.name, "Lock").await;
    terminate(&admin, &pids).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    let answer = call.await.unwrap();
    assert!(matches!(answer, Err(Error::RolledBack)), "{answer:?}");
    assert_eq!(
        store.stats().unavailable,
        1,
        "the complete failed, its outcome unknown"
    );
    assert!(orders(store.pool()).await.is_empty(), "nothing committed");
    let retry = in_transaction(&handle, "k", fingerprint(), |_claim, mut tx| async move {
        insert_order(&mut tx, "retry").await?;
        Ok(("retry".to_owned(), tx))
    })
    .await;
    assert_eq!(retry.unwrap(), "retry");
    assert_eq!(orders(store.pool()).await, ["retry"]);
}

/// The backend is terminated while its COMMIT waits (for a synchronous standby that never
/// answers): the transaction has committed locally, the commit's reply is lost, and the
/// attempt learns by reading the record that it committed: `Executed`, one order, and the
/// retry replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_terminated_while_its_commit_waits_is_settled_by_reading_the_record() {
    let server = PrivateServer::start(&[
        "synchronous_standby_names = 'nobody'",
        "synchronous_commit = local",
    ]);
    let url = server.url("postgres");
    let store = PostgresStore::builder()
        .command_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    create_orders(store.pool()).await;
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let coordinator = Coordinator::new(store.clone(), patient());
    let handle = coordinator
        .operation::<String, sqlx::Error>("order.create")
        .unwrap();
    let call = {
        let handle = handle.clone();
        tokio::spawn(async move {
            in_transaction_with_provenance(&handle, "k", fingerprint(), |_claim, mut tx| {
                async move {
                    // This transaction's commit waits for the standby.
                    sqlx::query("SET LOCAL synchronous_commit = on")
                        .execute(&mut *tx)
                        .await?;
                    insert_order(&mut tx, "first").await?;
                    Ok(("first".to_owned(), tx))
                }
            })
            .await
        })
    };
    let pids = waiting(&admin, "postgres", "SyncRep").await;
    terminate(&admin, &pids).await;
    let answer = call.await.unwrap().unwrap();
    assert_eq!(answer.value, "first");
    assert!(
        matches!(answer.provenance, Provenance::Executed { .. }),
        "{:?}",
        answer.provenance
    );
    assert_eq!(
        store.stats().unavailable,
        1,
        "the commit's reply was lost, and reading the record settled it"
    );
    assert_eq!(orders(store.pool()).await, ["first"]);
    let retry = in_transaction(&handle, "k", fingerprint(), |_claim, mut tx| async move {
        insert_order(&mut tx, "retry").await?;
        Ok(("retry".to_owned(), tx))
    })
    .await;
    assert_eq!(retry.unwrap(), "first", "replayed");
    assert_eq!(orders(store.pool()).await, ["first"]);
}

/// A restarted server keeps its records (PostgreSQL persists them; Redis without
/// persistence would not), and the same store reaches it again; while it is down, calls
/// fail closed as configured and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_keeps_its_records_and_is_reached_again() {
    let server = PrivateServer::start(&[]);
    let store = PostgresStore::builder()
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(300))
        .connect_lazy(&server.url("postgres"))
        .unwrap();
    store.migrate().await.unwrap();
    let options = Options::builder()
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap();
    let coordinator = Coordinator::new(store.clone(), options);
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let charge = |key: &'static str| {
        let (coordinator, runs) = (coordinator.clone(), runs.clone());
        async move {
            coordinator
                .execute(
                    "payment.charge",
                    key,
                    fingerprint(),
                    move |_claim| async move {
                        let n = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        Ok::<_, std::convert::Infallible>(format!("ch_{n}"))
                    },
                )
                .await
        }
    };
    assert_eq!(charge("before").await.unwrap(), "ch_1");
    server.stop();
    for key in ["before", "during"] {
        let refused = charge(key).await;
        assert!(
            matches!(refused, Err(Error::StoreUnavailable(_))),
            "{refused:?}"
        );
    }
    server.start_again();
    assert_eq!(
        charge("before").await.unwrap(),
        "ch_1",
        "the record survived"
    );
    assert_eq!(charge("during").await.unwrap(), "ch_2");
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert!(store.stats().unavailable > 0);
}

/// A store built while the server is down: calls fail open or closed as configured, and
/// a store error is never mistaken for a corrupt record.
#[tokio::test]
async fn a_store_built_while_the_server_is_down_fails_open_or_closed() {
    let port = support::free_port();
    let store = PostgresStore::builder()
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(100))
        .connect_lazy(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
        .unwrap();
    let (operation, key) = names();
    let error = store
        .apply(&operation, &key, reserve(1, 1_000))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    for (policy, runs) in [
        (StoreFailurePolicy::FailOpen, 1),
        (StoreFailurePolicy::FailClosed, 0),
    ] {
        let options = Options::builder().on_store_failure(policy).build().unwrap();
        let coordinator = Coordinator::new(store.clone(), options);
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = ran.clone();
        let answer = coordinator
            .execute(
                "payment.charge",
                "k",
                fingerprint(),
                move |_claim| async move {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>("ch_1".to_owned())
                },
            )
            .await;
        assert_eq!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            runs,
            "{policy:?}"
        );
        match policy {
            StoreFailurePolicy::FailOpen => assert_eq!(answer.unwrap(), "ch_1"),
            _ => assert!(
                matches!(answer, Err(Error::StoreUnavailable(_))),
                "{answer:?}"
            ),
        }
    }
}
