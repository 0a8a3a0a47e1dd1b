//! Effects that commit with the record, on SQLite (MODEL.md, "SQLite (idem-sqlite)", rule
//! T1): the action's writes and the record's complete in one `BEGIN IMMEDIATE`
//! transaction, committed only if the record is still the call's reservation.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use idem::{Coordinator, Error, Fingerprint, Key, Operation, Options, Provenance, Transaction};
use idem_core::record::{Command, Completion, Refusal, Reply, StoredResult};
use idem_core::{Body, OwnerToken};
use idem_sqlite::{SqliteStore, in_transaction, in_transaction_with_provenance};
use support::{TempDir, store};

async fn create_orders(store: &SqliteStore) {
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, cart TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
}

async fn orders(store: &SqliteStore) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

fn fingerprint() -> Fingerprint {
    Fingerprint::builder()
        .field("cart", "c-1")
        .finish()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writes_commit_with_the_record_and_replay_without_running() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    create_orders(&store).await;
    let orders_op = Coordinator::new(store.clone(), Options::default())
        .operation::<i64, sqlx::Error>("order.create")
        .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let mut provenances = Vec::new();
    for _ in 0..3 {
        let runs = runs.clone();
        let answer = in_transaction_with_provenance(
            &orders_op,
            "k-1",
            fingerprint(),
            |_claim, mut tx| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let id: i64 =
                    sqlx::query_scalar("INSERT INTO orders (cart) VALUES ('c-1') RETURNING id")
                        .fetch_one(&mut *tx)
                        .await?;
                Ok((id, tx))
            },
        )
        .await
        .unwrap();
        assert_eq!(answer.value, 1);
        provenances.push(answer.provenance);
    }
    assert!(matches!(provenances[0], Provenance::Executed { .. }));
    assert!(provenances[1..].iter().all(|p| *p == Provenance::Replayed));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(orders(&store).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_action_writes_nothing_and_gives_the_key_back() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    create_orders(&store).await;
    let orders_op = Coordinator::new(store.clone(), Options::default())
        .operation::<i64, sqlx::Error>("order.create")
        .unwrap();
    let failed = in_transaction(
        &orders_op,
        "k-1",
        fingerprint(),
        |_claim, mut tx| async move {
            sqlx::query("INSERT INTO orders (cart) VALUES ('c-1')")
                .execute(&mut *tx)
                .await?;
            // A statement that fails: the action fails after its first write.
            sqlx::query("INSERT INTO no_such_table VALUES (1)")
                .execute(&mut *tx)
                .await?;
            Ok((0, tx))
        },
    )
    .await;
    assert!(matches!(failed, Err(Error::Action(_))), "{failed:?}");
    assert_eq!(orders(&store).await, 0);
    // The key was given back: a retry runs, and commits.
    let id = in_transaction(
        &orders_op,
        "k-1",
        fingerprint(),
        |_claim, mut tx| async move {
            let id: i64 =
                sqlx::query_scalar("INSERT INTO orders (cart) VALUES ('c-1') RETURNING id")
                    .fetch_one(&mut *tx)
                    .await?;
            Ok((id, tx))
        },
    )
    .await
    .unwrap();
    assert!(id >= 1);
    assert_eq!(orders(&store).await, 1);
}

/// At the store: a complete inside the transaction for a key that is not the caller's
/// (another owner holds it) is refused, and the transaction's writes roll back with it; for
/// the caller's own reservation, both commit.
#[tokio::test]
async fn the_transaction_commits_only_if_the_record_is_the_callers() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    create_orders(&store).await;
    let (operation, key) = (
        Operation::new("order.create").unwrap(),
        Key::new("k-1").unwrap(),
    );
    let reserve = |owner| Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: fingerprint(),
        lease: Duration::from_secs(30),
    };
    let complete = |owner| Command::Complete {
        owner: OwnerToken::from_u128(owner),
        fingerprint: fingerprint(),
        result: StoredResult::Value(Body::new(b"1")),
        retention: Duration::from_secs(60),
    };
    let reply = store
        .apply_timed(&operation, &key, reserve(1))
        .await
        .unwrap();
    assert!(matches!(reply.0, Reply::Reserved(_)));

    let mut tx = store.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (cart) VALUES ('stale')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let refused = tx
        .complete(operation.clone(), key.clone(), complete(2))
        .await
        .unwrap();
    assert_eq!(refused, Reply::Refused(Refusal::NotOwner));
    assert_eq!(orders(&store).await, 0);

    let mut tx = store.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (cart) VALUES ('ours')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let done = tx
        .complete(operation.clone(), key.clone(), complete(1))
        .await
        .unwrap();
    assert_eq!(done, Reply::Completed(Completion::InTime));
    assert_eq!(orders(&store).await, 1);
    let replay = store
        .apply_timed(&operation, &key, reserve(3))
        .await
        .unwrap();
    assert!(matches!(replay.0, Reply::Replay { .. }), "{replay:?}");
}

/// While a transaction is open, it holds the file's one write lock: another write waits
/// for it (up to the command timeout), while a replay, a plain read under WAL, is answered
/// at once. Dropped, the transaction rolls back and frees the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_holds_writers_but_not_replays() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    create_orders(&store).await;
    let operation = Operation::new("order.create").unwrap();
    let reserve = |owner, fp: &[u8]| Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(fp),
        lease: Duration::from_secs(30),
    };
    let done = Key::new("done").unwrap();
    store
        .apply_timed(&operation, &done, reserve(1, b"a"))
        .await
        .unwrap();
    store
        .apply_timed(
            &operation,
            &done,
            Command::Complete {
                owner: OwnerToken::from_u128(1),
                fingerprint: Fingerprint::of_bytes(b"a"),
                result: StoredResult::NotStored,
                retention: Duration::from_secs(60),
            },
        )
        .await
        .unwrap();

    let mut tx = store.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (cart) VALUES ('open')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let started = Instant::now();
    let replay = store
        .apply_timed(&operation, &done, reserve(2, b"a"))
        .await
        .unwrap();
    assert!(matches!(replay.0, Reply::Replay { .. }), "{replay:?}");
    assert!(started.elapsed() < Duration::from_millis(500));

    let writer = {
        let (store, operation) = (store.clone(), operation.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let reply = store
                .apply_timed(&operation, &Key::new("free").unwrap(), reserve(3, b"b"))
                .await;
            (reply, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(tx);
    let (reply, waited) = writer.await.unwrap();
    assert!(matches!(reply.unwrap().0, Reply::Reserved(_)));
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert_eq!(orders(&store).await, 0);
}

/// A read waits for a transaction in progress and sees its outcome: how the attempt settles
/// a complete whose commit reply was lost (MODEL.md, "Effects that commit with the
/// record"). Read before the commit, it would find the call's own reservation and take it
/// for "not committed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_for_a_commit_in_progress_and_sees_it() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    create_orders(&store).await;
    let (operation, key) = (
        Operation::new("order.create").unwrap(),
        Key::new("k-1").unwrap(),
    );
    let owner = OwnerToken::from_u128(1);
    store
        .apply_timed(
            &operation,
            &key,
            Command::Reserve {
                owner,
                fingerprint: fingerprint(),
                lease: Duration::from_secs(30),
            },
        )
        .await
        .unwrap();
    let mut tx = store.begin().await.unwrap();
    sqlx::query("INSERT INTO orders (cart) VALUES ('c-1')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let read = {
        let (store, operation, key) = (store.clone(), operation.clone(), key.clone());
        tokio::spawn(async move { store.apply_timed(&operation, &key, Command::Read).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !read.is_finished(),
        "the read did not wait for the open transaction"
    );
    let done = tx
        .complete(
            operation.clone(),
            key.clone(),
            Command::Complete {
                owner,
                fingerprint: fingerprint(),
                result: StoredResult::NotStored,
                retention: Duration::from_secs(60),
            },
        )
        .await
        .unwrap();
    assert_eq!(done, Reply::Completed(Completion::InTime));
    match read.await.unwrap().unwrap().0 {
        Reply::Read(Some(idem_core::record::Record::Completed { owner: got, .. })) => {
            assert_eq!(got, owner)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(orders(&store).await, 1);
}

/// An action that holds its transaction past its lease: its own renewals wait for the
/// write lock it holds and fail, yet nobody can take the key over (every takeover writes),
/// so its complete finds the record still its own and commits (`AfterLeaseExpiry`). The
/// writes and the record commit once; a retry replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_held_past_its_lease_still_commits_once() {
    let dir = TempDir::new();
    let store = SqliteStore::builder()
        .command_timeout(Duration::from_millis(300))
        .open(dir.db())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    create_orders(&store).await;
    let options = Options::builder()
        .lease(Duration::from_secs(1))
        .build()
        .unwrap();
    let orders_op = Coordinator::new(store.clone(), options)
        .operation::<i64, sqlx::Error>("order.create")
        .unwrap();
    let lapsed = Arc::new(AtomicU32::new(0));
    let (seen, clock) = (lapsed.clone(), store.clone());
    let answer = in_transaction_with_provenance(
        &orders_op,
        "k-1",
        fingerprint(),
        move |_claim, mut tx| async move {
            let id: i64 =
                sqlx::query_scalar("INSERT INTO orders (cart) VALUES ('c-1') RETURNING id")
                    .fetch_one(&mut *tx)
                    .await?;
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            // The reservation as the file holds it: no renewal could land.
            let lease_until: i64 =
                sqlx::query_scalar("SELECT expires_at FROM idem_records WHERE key = X'6B2D31'")
                    .fetch_one(&mut *tx)
                    .await?;
            if u64::try_from(lease_until).unwrap_or(u64::MAX) < clock.now().as_millis() {
                seen.store(1, Ordering::SeqCst);
            }
            Ok((id, tx))
        },
    )
    .await
    .unwrap();
    assert_eq!(lapsed.load(Ordering::SeqCst), 1, "the lease had not lapsed");
    // Committed with the record: nobody else can have committed an effect under the key, so
    // the call does not report a lost lease (MODEL.md T1).
    assert!(
        matches!(
            answer.provenance,
            Provenance::Executed {
                lease_lost: false,
                recording: idem::Recording::Stored,
            }
        ),
        "{:?}",
        answer.provenance
    );
    assert_eq!(orders(&store).await, 1);
    let replayed = in_transaction(&orders_op, "k-1", fingerprint(), |_claim, tx| async move {
        Ok((-1, tx))
    })
    .await
    .unwrap();
    assert_eq!(replayed, answer.value);
    assert_eq!(orders(&store).await, 1);
}
