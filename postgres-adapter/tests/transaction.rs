//! Effects that commit with the record, on PostgreSQL (MODEL.md, "PostgreSQL"): the
//! action's writes and the record's complete in one transaction, committed only if the
//! record is still the call's reservation.

mod support;

use std::sync::Arc;
use std::time::Duration;

use idem::{
    Coordinator, Error, Fingerprint, Key, Operation, Options, Provenance, Store, StoreError,
    Transaction, TransactionalStore,
};
use idem_core::record::{Command, Record, Reply};
use idem_postgres::{
    PostgresStore, RecordTransaction, in_transaction, in_transaction_with_provenance,
};
use support::{TestDb, create_orders, insert_order, orders};

fn fingerprint() -> Fingerprint {
    Fingerprint::builder()
        .field("cart", "c-1")
        .finish()
        .unwrap()
}

/// Every renewal fails: the holder's lease runs out while it works, as it would for a
/// process paused past its lease.
#[derive(Debug)]
struct NoRenewals(PostgresStore);

impl Store for NoRenewals {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        if let Command::Renew { .. } = command {
            return Err(StoreError::unavailable(&command, "renewals are cut off"));
        }
        self.0.apply(operation, key, command).await
    }
}

/// Broken on purpose: the complete is sent as if by whoever holds the key now, so the
/// record's owner check never refuses it and the transaction commits whatever happened.
#[derive(Debug)]
struct Unfenced(RecordTransaction, PostgresStore);

impl Transaction for Unfenced {
    async fn complete(
        self,
        operation: Operation,
        key: Key,
        mut command: Command,
    ) -> Result<Reply, StoreError> {
        if let Ok(Reply::Read(Some(record))) = self.1.apply(&operation, &key, Command::Read).await
            && let Command::Complete { owner, .. } = &mut command
        {
            *owner = record.owner();
        }
        self.0.complete(operation, key, command).await
    }
}

fn short_lease() -> Options {
    Options::builder()
        .lease(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// A holder makes its order, then pauses past its lease (1 s, renewals failing) while a
/// second caller takes the key over and commits its own; returns both answers. The second
/// caller comes at 1.2 s; should the holder's lease still be live then (a slow machine),
/// it waits at most one backoff step (0.5 s) and takes over well before the holder wakes at
/// 2.5 s.
async fn paused_holder_and_taker(
    db: &TestDb,
    broken: bool,
) -> (
    Result<String, Error<sqlx::Error>>,
    Result<String, Error<sqlx::Error>>,
) {
    let store = db.store(8).await;
    create_orders(store.pool()).await;
    let coordinator = Coordinator::new(NoRenewals(store.clone()), short_lease());
    let paused = spawn_one(
        &coordinator,
        &store,
        "paused",
        Duration::from_millis(2_500),
        broken,
    );
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let taker = spawn_one(
        &coordinator,
        &store,
        "taker",
        Duration::from_millis(10),
        broken,
    );
    let taker = taker.await.unwrap();
    let paused = paused.await.unwrap();
    (paused, taker)
}

fn spawn_one(
    coordinator: &Coordinator<NoRenewals>,
    store: &PostgresStore,
    made_by: &'static str,
    pause: Duration,
    broken: bool,
) -> tokio::task::JoinHandle<Result<String, Error<sqlx::Error>>> {
    let (coordinator, store) = (coordinator.clone(), store.clone());
    tokio::spawn(async move {
        let action = move |store: PostgresStore| async move {
            let mut tx = store.pool().begin_with(idem_postgres::BEGIN).await?;
            insert_order(&mut tx, made_by).await?;
            tokio::time::sleep(pause).await;
            Ok::<_, sqlx::Error>((made_by.to_owned(), store.transaction(tx)))
        };
        let answer = if broken {
            coordinator
                .execute_in_transaction(
                    "order.create",
                    "k",
                    fingerprint(),
                    move |_claim| async move {
                        let (value, joined) = action(store.clone()).await?;
                        Ok((value, Unfenced(joined, store)))
                    },
                )
                .await
        } else {
            coordinator
                .execute_in_transaction("order.create", "k", fingerprint(), move |_claim| {
                    action(store)
                })
                .await
        };
        answer.map(|answer| answer.value)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_lease_commits_nothing() {
    let db = TestDb::create().await;
    let (paused, taker) = paused_holder_and_taker(&db, false).await;
    assert_eq!(taker.unwrap(), "taker");
    let paused = paused.unwrap_err();
    assert!(matches!(paused, Error::RolledBack), "{paused:?}");
    assert!(paused.is_retryable());
    let pool = db.pool(2).await;
    assert_eq!(orders(&pool).await, ["taker"], "one order, the taker's");
    // The client's retry replays the taker's order.
    let store = PostgresStore::builder().build(pool.clone());
    let coordinator = Coordinator::new(store, short_lease());
    let handle = coordinator
        .operation::<String, sqlx::Error>("order.create")
        .unwrap();
    let retry = in_transaction(&handle, "k", fingerprint(), |_claim, mut tx| async move {
        insert_order(&mut tx, "retry").await?;
        Ok(("retry".to_owned(), tx))
    })
    .await;
    assert_eq!(retry.unwrap(), "taker");
    assert_eq!(orders(&pool).await, ["taker"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_without_the_owner_check_is_caught_writing_twice() {
    let db = TestDb::create().await;
    let (paused, taker) = paused_holder_and_taker(&db, true).await;
    assert_eq!(taker.unwrap(), "taker");
    let _ = paused;
    let pool = db.pool(2).await;
    assert_eq!(
        orders(&pool).await.len(),
        2,
        "the broken commit writes a second order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_one_key_write_one_row_and_get_one_answer() {
    let db = TestDb::create().await;
    let store = db.store(16).await;
    create_orders(store.pool()).await;
    let coordinator = Coordinator::new(store.clone(), Options::default());
    let handle = coordinator
        .operation::<i64, sqlx::Error>("order.create")
        .unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let handle = handle.clone();
            tokio::spawn(async move {
                in_transaction_with_provenance(
                    &handle,
                    "k",
                    fingerprint(),
                    move |_claim, mut tx| async move {
                        let id = insert_order(&mut tx, &format!("task-{i}")).await?;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok((id, tx))
                    },
                )
                .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    let mut executed = 0;
    for task in tasks {
        let answer = task.await.unwrap().unwrap();
        if matches!(answer.provenance, Provenance::Executed { .. }) {
            executed += 1;
        }
        answers.push(answer.value);
    }
    assert_eq!(executed, 1);
    assert!(answers.iter().all(|id| *id == answers[0]), "{answers:?}");
    let made = orders(store.pool()).await;
    assert_eq!(made.len(), 1, "{made:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_or_a_panic_rolls_back_and_the_retry_writes_once() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    create_orders(store.pool()).await;
    let coordinator = Coordinator::new(store.clone(), Options::default());
    let handle = coordinator
        .operation::<String, sqlx::Error>("order.create")
        .unwrap();
    let failed = in_transaction(&handle, "k", fingerprint(), |_claim, mut tx| async move {
        insert_order(&mut tx, "failed").await?;
        Err::<(String, _), _>(sqlx::Error::Protocol("the provider said no".into()))
    })
    .await;
    assert!(matches!(failed, Err(Error::Action(_))), "{failed:?}");
    let panicked = {
        let handle = handle.clone();
        tokio::spawn(async move {
            in_transaction(&handle, "k", fingerprint(), |_claim, mut tx| async move {
                insert_order(&mut tx, "panicked").await?;
                if std::hint::black_box(true) {
                    panic!("in the middle of the writes");
                }
                Ok(("never".to_owned(), tx))
            })
            .await
        })
    };
    assert!(panicked.await.unwrap_err().is_panic());
    assert_eq!(
        store
            .apply(
                &Operation::new("order.create").unwrap(),
                &Key::new("k").unwrap(),
                Command::Read
            )
            .await
            .unwrap(),
        Reply::Read(None),
        "the key was given back each time"
    );
    let made = in_transaction(&handle, "k", fingerprint(), |_claim, mut tx| async move {
        insert_order(&mut tx, "third").await?;
        Ok(("third".to_owned(), tx))
    })
    .await;
    assert_eq!(made.unwrap(), "third");
    assert_eq!(orders(store.pool()).await, ["third"]);
}

/// The transaction the store begins (as code generic over the store begins it, through
/// `TransactionalStore`) is READ COMMITTED, takes writes through `&mut *tx` as a `sqlx`
/// executor, and commits them with the record only: a failed action's writes roll back,
/// and the retry after a commit replays without writing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_the_store_begins_commits_its_writes_with_the_record_only() {
    async fn order<S: TransactionalStore<Transaction = RecordTransaction>>(
        handle: &idem::OperationHandle<S, i64, sqlx::Error>,
        store: S,
        made_by: &'static str,
        fail: bool,
    ) -> Result<idem::Answer<i64>, Error<sqlx::Error>> {
        handle
            .execute_in_transaction("k", fingerprint(), move |_claim| async move {
                let mut tx = store
                    .begin()
                    .await
                    .map_err(|error| sqlx::Error::Protocol(error.to_string()))?;
                let level: String = sqlx::query_scalar("SHOW transaction_isolation")
                    .fetch_one(&mut *tx)
                    .await?;
                assert_eq!(level, "read committed");
                let id = insert_order(&mut tx, made_by).await?;
                if fail {
                    return Err(sqlx::Error::Protocol("the provider said no".into()));
                }
                Ok((id, tx))
            })
            .await
    }
    let db = TestDb::create().await;
    let store = db.store(4).await;
    create_orders(store.pool()).await;
    // A server whose default is stricter: the store's transactions are still READ COMMITTED.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" SET default_transaction_isolation = 'serializable'",
        db.name
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let store = db.store(4).await;
    let coordinator = Coordinator::new(store.clone(), Options::default());
    let handle = coordinator
        .operation::<i64, sqlx::Error>("order.create")
        .unwrap();
    let failed = order(&handle, store.clone(), "failed", true).await;
    assert!(matches!(failed, Err(Error::Action(_))), "{failed:?}");
    assert!(orders(store.pool()).await.is_empty(), "rolled back");
    let made = order(&handle, store.clone(), "made", false).await.unwrap();
    assert!(matches!(made.provenance, Provenance::Executed { .. }));
    let retry = order(&handle, store.clone(), "retry", false).await.unwrap();
    assert_eq!(retry.provenance, Provenance::Replayed);
    assert_eq!(retry.value, made.value);
    assert_eq!(orders(store.pool()).await, ["made"]);
}

/// A lease that ran out while nobody took the key still commits: the late complete records
/// the result, and nobody else can have committed an effect under the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_complete_nobody_overtook_still_commits() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    create_orders(store.pool()).await;
    let coordinator = Coordinator::new(NoRenewals(store.clone()), short_lease());
    let made = spawn_one(
        &coordinator,
        &store,
        "late",
        Duration::from_millis(1_500),
        false,
    )
    .await
    .unwrap();
    assert_eq!(made.unwrap(), "late");
    assert_eq!(orders(store.pool()).await, ["late"]);
    let read = store
        .apply(
            &Operation::new("order.create").unwrap(),
            &Key::new("k").unwrap(),
            Command::Read,
        )
        .await
        .unwrap();
    assert!(
        matches!(read, Reply::Read(Some(Record::Completed { .. }))),
        "{read:?}"
    );
}

/// The complete holds the record's row lock until its transaction ends: a takeover that
/// comes meanwhile waits for the commit, then finds the record completed and replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_waits_for_a_commit_in_progress_and_replays_it() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    let (o, k) = (
        Operation::new("order.create").unwrap(),
        Key::new("k").unwrap(),
    );
    let owner = idem::OwnerToken::from_u128(1);
    store
        .apply(
            &o,
            &k,
            Command::Reserve {
                owner,
                fingerprint: fingerprint(),
                lease: Duration::from_millis(200),
            },
        )
        .await
        .unwrap();
    // The holder's complete runs in its transaction; the commit is held back.
    let mut tx = store.pool().begin_with(idem_postgres::BEGIN).await.unwrap();
    let sql = idem_postgres::sql::expand(idem_postgres::sql::COMPLETE, store.table());
    let reply: String = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(o.as_str())
        .bind(k.as_str())
        .bind(owner.to_bytes().to_vec())
        .bind(fingerprint().to_bytes().to_vec())
        .bind(2_i16)
        .bind(Some(b"\"mine\"".to_vec()))
        .bind(60_000_i64)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(reply, "in_time");
    // The lease runs out while the commit is held back; a second caller comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taker = {
        let (store, o, k) = (store.clone(), o.clone(), k.clone());
        tokio::spawn(async move {
            store
                .apply(
                    &o,
                    &k,
                    Command::Reserve {
                        owner: idem::OwnerToken::from_u128(2),
                        fingerprint: fingerprint(),
                        lease: Duration::from_secs(1),
                    },
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!taker.is_finished(), "the takeover waits for the row lock");
    tx.commit().await.unwrap();
    let answer = taker.await.unwrap().unwrap();
    let Reply::Replay { result, remaining } = answer else {
        panic!("the takeover replays: {answer:?}");
    };
    assert!(
        remaining.is_some(),
        "the statement says how long the record has left"
    );
    let answer = Reply::Replay {
        result,
        remaining: None,
    };
    assert_eq!(
        answer,
        Reply::Replay {
            result: idem::record::StoredResult::Value(idem::record::Body::new("\"mine\"")),
            remaining: None,
        }
    );
    assert!(store.stats().raced >= 1, "{:?}", store.stats());
}

/// The record's complete is one statement added to the caller's transaction; the reserve
/// before it runs on its own (its read-first step, then the reserve statement).
#[tokio::test]
async fn the_transactional_complete_is_one_statement_in_the_callers_transaction() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    create_orders(store.pool()).await;
    let coordinator = Coordinator::from_shared(Arc::new(store.clone()), Options::default());
    let handle = coordinator
        .operation::<String, sqlx::Error>("order.create")
        .unwrap();
    let before = store.stats();
    let counter = store.clone();
    let made = in_transaction(
        &handle,
        "k",
        fingerprint(),
        move |_claim, mut tx| async move {
            insert_order(&mut tx, "one").await?;
            Ok((counter.stats().statements.to_string(), tx))
        },
    )
    .await;
    let after = store.stats();
    let at_action_end: u64 = made.unwrap().parse().unwrap();
    assert_eq!(at_action_end - before.statements, 2, "peek and reserve");
    assert_eq!(
        after.statements - at_action_end,
        1,
        "the complete, in the transaction"
    );
    assert_eq!(
        after.commands - before.commands,
        1,
        "the reserve through the store"
    );
    assert_eq!(orders(store.pool()).await, ["one"]);
}
