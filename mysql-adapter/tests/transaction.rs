//! The transactional mode on the real MariaDB (MODEL.md `T1`): the action's writes and the
//! record of its result commit in one InnoDB transaction, or not at all.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idem::{
    Coordinator, Error, Fingerprint, InFlightPolicy, Options, Provenance, Store, StoreError,
    StoreFailurePolicy, Transaction,
};
use idem_core::record::{Command, Completion, Record, Refusal, Reply, StoredResult};
use idem_core::{Key, Operation, OwnerToken};
use idem_mysql::{in_transaction, in_transaction_with_provenance};
use support::{TestDb, create_orders, insert_order, orders};

fn options() -> Options {
    Options::builder()
        .lease(Duration::from_secs(2))
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap()
}

fn request() -> Fingerprint {
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

fn complete(owner: u128) -> Command {
    Command::Complete {
        owner: OwnerToken::from_u128(owner),
        fingerprint: request(),
        result: StoredResult::NotStored,
        retention: Duration::from_secs(60),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writes_commit_with_the_record_and_a_retry_replays_them() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    create_orders(store.pool()).await;
    let orders_op = Coordinator::new(store.clone(), options())
        .operation::<u64, sqlx::Error>("order.create")
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    for attempt in 0..3 {
        let runs = Arc::clone(&runs);
        let answer = in_transaction_with_provenance(
            &orders_op,
            "k",
            request(),
            move |_claim, mut tx| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let id = insert_order(&mut tx, "first").await?;
                Ok((id, tx))
            },
        )
        .await
        .unwrap();
        if attempt == 0 {
            assert!(matches!(
                answer.provenance,
                Provenance::Executed {
                    lease_lost: false,
                    ..
                }
            ));
        } else {
            assert_eq!(answer.provenance, Provenance::Replayed);
        }
        assert_eq!(answer.value, 1);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(orders(store.pool()).await, ["first"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_action_rolls_back_and_the_retry_writes_once() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    create_orders(store.pool()).await;
    let orders_op = Coordinator::new(store.clone(), options())
        .operation::<u64, sqlx::Error>("order.create")
        .unwrap();
    let failed = in_transaction(&orders_op, "k", request(), |_claim, mut tx| async move {
        insert_order(&mut tx, "failed").await?;
        Err::<(u64, _), _>(sqlx::Error::Protocol("the provider said no".into()))
    })
    .await;
    assert!(matches!(failed, Err(Error::Action(_))), "{failed:?}");
    assert!(
        orders(store.pool()).await.is_empty(),
        "the failure's write rolled back"
    );
    let id = in_transaction(&orders_op, "k", request(), |_claim, mut tx| async move {
        let id = insert_order(&mut tx, "retry").await?;
        Ok((id, tx))
    })
    .await
    .unwrap();
    assert!(id > 0);
    assert_eq!(orders(store.pool()).await, ["retry"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_taken_over_after_its_lease_commits_nothing() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    create_orders(store.pool()).await;
    let (o, k) = names();
    let reserve = |owner: u128, lease: u64| Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: request(),
        lease: Duration::from_millis(lease),
    };
    assert!(matches!(
        store.apply(&o, &k, reserve(1, 300)).await.unwrap(),
        Reply::Reserved(_)
    ));
    let mut tx = store.begin().await.unwrap();
    insert_order(&mut tx, "stale holder").await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(matches!(
        store.apply(&o, &k, reserve(2, 30_000)).await.unwrap(),
        Reply::Reserved(_)
    ));
    let reply = tx
        .complete(o.clone(), k.clone(), complete(1))
        .await
        .unwrap();
    assert_eq!(reply, Reply::Refused(Refusal::NotOwner));
    assert!(orders(store.pool()).await.is_empty(), "nothing committed");
    // The taker's own transaction commits its write with its record.
    let mut tx = store.begin().await.unwrap();
    insert_order(&mut tx, "taker").await.unwrap();
    let reply = tx
        .complete(o.clone(), k.clone(), complete(2))
        .await
        .unwrap();
    assert_eq!(reply, Reply::Completed(Completion::InTime));
    assert_eq!(orders(store.pool()).await, ["taker"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_complete_nobody_overtook_still_commits() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    create_orders(store.pool()).await;
    let (o, k) = names();
    let reserve = Command::Reserve {
        owner: OwnerToken::from_u128(1),
        fingerprint: request(),
        lease: Duration::from_millis(100),
    };
    assert!(matches!(
        store.apply(&o, &k, reserve).await.unwrap(),
        Reply::Reserved(_)
    ));
    let mut tx = store.begin().await.unwrap();
    insert_order(&mut tx, "late").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // And the row swept meanwhile: the complete inserts it inside the transaction.
    assert_eq!(store.sweep(10).await.unwrap(), 1);
    let reply = tx
        .complete(o.clone(), k.clone(), complete(1))
        .await
        .unwrap();
    assert_eq!(reply, Reply::Completed(Completion::AfterLeaseExpiry));
    assert_eq!(orders(store.pool()).await, ["late"]);
    assert!(matches!(
        store.apply(&o, &k, Command::Read).await.unwrap(),
        Reply::Read(Some(Record::Completed { .. }))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_not_at_read_committed_is_refused_before_anything_is_written() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    create_orders(store.pool()).await;
    let (o, k) = names();
    let reserve = Command::Reserve {
        owner: OwnerToken::from_u128(1),
        fingerprint: request(),
        lease: Duration::from_secs(30),
    };
    assert!(matches!(
        store.apply(&o, &k, reserve).await.unwrap(),
        Reply::Reserved(_)
    ));
    // A transaction begun elsewhere, at the server's default REPEATABLE READ.
    let pool = db.pool(1).await;
    let mut tx = pool.begin().await.unwrap();
    insert_order(&mut tx, "wrong level").await.unwrap();
    let refused = store
        .transaction(tx)
        .complete(o.clone(), k.clone(), complete(1))
        .await;
    match refused {
        Err(StoreError::Unavailable { source, .. }) => {
            assert!(source.to_string().contains("READ-COMMITTED"), "{source}");
        }
        other => panic!("{other:?}"),
    }
    assert!(orders(store.pool()).await.is_empty(), "rolled back");
    assert!(
        matches!(
            store.apply(&o, &k, Command::Read).await.unwrap(),
            Reply::Read(Some(Record::Pending { .. }))
        ),
        "the reservation is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_for_a_commit_in_progress_and_sees_its_outcome() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    let (o, k) = names();
    let reserve = Command::Reserve {
        owner: OwnerToken::from_u128(1),
        fingerprint: request(),
        lease: Duration::from_secs(30),
    };
    assert!(matches!(
        store.apply(&o, &k, reserve).await.unwrap(),
        Reply::Reserved(_)
    ));
    // A complete in a transaction that has not committed yet (as the transactional
    // complete leaves the row, locked, until its commit lands).
    let pool = db.pool(1).await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "UPDATE idem_records SET state = 3, expires_at = expires_at + 60000 WHERE `key` = 'k'",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    let read = {
        let (store, o, k) = (store.clone(), o.clone(), k.clone());
        tokio::spawn(async move { store.apply(&o, &k, Command::Read).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!read.is_finished(), "the read waits for the row's lock");
    tx.commit().await.unwrap();
    match read.await.unwrap().unwrap() {
        Reply::Read(Some(Record::Completed { result, .. })) => {
            assert_eq!(result, StoredResult::NotStored);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_one_key_write_one_row_and_get_one_answer() {
    let db = TestDb::create().await;
    let store = db.store(16).await;
    create_orders(store.pool()).await;
    let options = Options::builder()
        .lease(Duration::from_secs(2))
        .in_flight(InFlightPolicy::Wait)
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap();
    let orders_op = Coordinator::new(store.clone(), options)
        .operation::<u64, sqlx::Error>("order.create")
        .unwrap();
    let mut tasks = Vec::new();
    for n in 0..16 {
        let orders_op = orders_op.clone();
        tasks.push(tokio::spawn(async move {
            in_transaction(
                &orders_op,
                "k",
                request(),
                move |_claim, mut tx| async move {
                    let id = insert_order(&mut tx, &format!("task {n}")).await?;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok((id, tx))
                },
            )
            .await
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap().unwrap());
    }
    answers.dedup();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(orders(store.pool()).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_for_a_record_inserted_by_a_commit_in_progress() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    let (o, k) = names();
    // A complete that inserts the record (the lease ran out and the row was swept), its
    // transaction not committed yet.
    let pool = db.pool(1).await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO idem_records VALUES ('order.create', 'k', 3, ?, ?, NULL, \
         UNIX_TIMESTAMP() * 1000 + 60000, NULL)",
    )
    .bind(OwnerToken::from_u128(1).to_bytes().to_vec())
    .bind(request().to_bytes().to_vec())
    .execute(&mut *tx)
    .await
    .unwrap();
    let read = {
        let (store, o, k) = (store.clone(), o.clone(), k.clone());
        tokio::spawn(async move { store.apply(&o, &k, Command::Read).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !read.is_finished(),
        "the read waits for the inserting transaction"
    );
    tx.commit().await.unwrap();
    match read.await.unwrap().unwrap() {
        Reply::Read(Some(Record::Completed { owner, .. })) => {
            assert_eq!(owner, OwnerToken::from_u128(1));
        }
        other => panic!("{other:?}"),
    }
}
