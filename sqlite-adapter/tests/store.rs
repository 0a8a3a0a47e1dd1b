//! The store's commands on a real SQLite file: one grant among concurrent reserves (from one
//! store, and from two stores on one file, as two processes would be), the owner checks,
//! rows the adapter did not write, bodies of megabytes, fences, the sweep, and calls
//! through the coordinator.

mod support;

use std::sync::Arc;
use std::time::Duration;

use idem::{Coordinator, Error, Fingerprint, Options, StoreError};
use idem_core::record::{Command, Completion, Record, Refusal, Reply, StoredResult};
use idem_core::{Body, Key, Operation, OwnerToken};
use idem_sqlite::{SqliteStore, TableName};
use sqlx::Row;
use support::{TempDir, store};

fn op(name: &str) -> Operation {
    Operation::new(name).unwrap()
}

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

fn reserve(owner: u128, lease_ms: u64) -> Command {
    Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(b"charge 100"),
        lease: Duration::from_millis(lease_ms),
    }
}

fn complete(owner: u128, body: &[u8]) -> Command {
    Command::Complete {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(b"charge 100"),
        result: StoredResult::Value(Body::new(body)),
        retention: Duration::from_secs(60),
    }
}

async fn concurrent_reserves(stores: &[SqliteStore], callers: u128) -> Vec<Reply> {
    let (operation, key) = (op("payment.charge"), key("k-1"));
    let calls: Vec<_> = (1..=callers)
        .map(|owner| {
            let store = stores[(owner as usize) % stores.len()].clone();
            let (operation, key) = (operation.clone(), key.clone());
            tokio::spawn(async move {
                store
                    .apply_timed(&operation, &key, reserve(owner, 30_000))
                    .await
                    .unwrap()
                    .0
            })
        })
        .collect();
    let mut replies = Vec::new();
    for call in calls {
        replies.push(call.await.unwrap());
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reserves_on_one_key_grant_it_once() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    let replies = concurrent_reserves(std::slice::from_ref(&store), 32).await;
    let granted = replies
        .iter()
        .filter(|reply| matches!(reply, Reply::Reserved(_)))
        .count();
    let in_flight = replies
        .iter()
        .filter(|reply| matches!(reply, Reply::InFlight { .. }))
        .count();
    assert_eq!((granted, in_flight), (1, 31), "{replies:?}");
}

/// Two stores on one file, each with its own pool and its own writer lock, as two processes
/// sharing the file: SQLite's file lock alone serializes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_grant_a_key_once() {
    let dir = TempDir::new();
    let first = store(&dir).await;
    let second = SqliteStore::open(dir.db()).await.unwrap();
    for round in 0..10 {
        let replies = concurrent_reserves(&[first.clone(), second.clone()], 16).await;
        let granted = replies
            .iter()
            .filter(|reply| matches!(reply, Reply::Reserved(_)))
            .count();
        assert_eq!(granted, 1, "round {round}: {replies:?}");
        // Free the key for the next round.
        let holder = match first
            .apply_timed(&op("payment.charge"), &key("k-1"), Command::Read)
            .await
            .unwrap()
            .0
        {
            Reply::Read(Some(record)) => record.owner(),
            other => panic!("{other:?}"),
        };
        let released = second
            .apply_timed(
                &op("payment.charge"),
                &key("k-1"),
                Command::Release { owner: holder },
            )
            .await
            .unwrap()
            .0;
        assert_eq!(released, Reply::Released);
    }
}

#[tokio::test]
async fn only_the_owner_completes_renews_or_releases() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    let (operation, key) = (op("payment.charge"), key("k-1"));
    let apply = |command| {
        let (store, operation, key) = (store.clone(), operation.clone(), key.clone());
        async move {
            store
                .apply_timed(&operation, &key, command)
                .await
                .unwrap()
                .0
        }
    };
    assert!(matches!(
        apply(reserve(1, 30_000)).await,
        Reply::Reserved(_)
    ));
    let before = apply(Command::Read).await;
    let not_owner = Reply::Refused(Refusal::NotOwner);
    assert_eq!(apply(complete(2, b"theirs")).await, not_owner);
    assert_eq!(
        apply(Command::Renew {
            owner: OwnerToken::from_u128(2),
            lease: Duration::from_secs(60),
        })
        .await,
        not_owner
    );
    assert_eq!(
        apply(Command::Release {
            owner: OwnerToken::from_u128(2)
        })
        .await,
        not_owner
    );
    // Nothing changed.
    assert_eq!(apply(Command::Read).await, before);
    assert_eq!(
        apply(complete(1, b"ours")).await,
        Reply::Completed(Completion::InTime)
    );
    assert_eq!(
        apply(Command::Release {
            owner: OwnerToken::from_u128(1)
        })
        .await,
        Reply::Refused(Refusal::AlreadyCompleted)
    );
    match apply(reserve(3, 30_000)).await {
        Reply::Replay {
            result: StoredResult::Value(body),
            ..
        } => assert_eq!(body.as_bytes(), b"ours"),
        other => panic!("{other:?}"),
    }
}

/// The raw columns of a row, to see that a command changed nothing.
async fn raw(store: &SqliteStore, table: &str, key: &str) -> Vec<String> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT quote(state), quote(owner), quote(fingerprint), quote(body), quote(expires_at), \
         quote(fence) FROM \"{table}\" WHERE key = ?1"
    )))
    .bind(key.as_bytes().to_vec())
    .fetch_one(store.pool())
    .await
    .unwrap();
    (0..6).map(|i| row.get::<String, _>(i)).collect()
}

fn every_command() -> Vec<Command> {
    vec![
        reserve(1, 30_000),
        complete(1, b"x"),
        Command::Renew {
            owner: OwnerToken::from_u128(1),
            lease: Duration::from_secs(30),
        },
        Command::Release {
            owner: OwnerToken::from_u128(1),
        },
        Command::Read,
    ]
}

/// A planted row: key, state, owner, fingerprint, body, expires_at, and what the error must
/// name.
type Planted = (
    &'static str,
    i64,
    Vec<u8>,
    Vec<u8>,
    Option<Vec<u8>>,
    i64,
    &'static str,
);

/// Rows the adapter did not write, planted with plain SQL: every command answers
/// `Corrupt`, naming what is wrong, and the row is left byte for byte as it was (the sweep
/// too leaves it, although it has expired).
#[tokio::test]
async fn rows_the_store_did_not_write_are_corrupt_and_never_changed() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    let owner = vec![7_u8; 16];
    let fp = vec![1_u8; 32];
    // (key, state, owner, fingerprint, body, expires_at, what the error names)
    let planted: Vec<Planted> = vec![
        (
            "state",
            9,
            owner.clone(),
            fp.clone(),
            None,
            i64::MAX,
            "unknown state 9",
        ),
        (
            "owner",
            1,
            vec![7; 3],
            fp.clone(),
            None,
            i64::MAX,
            "owner of 3 bytes",
        ),
        (
            "fp",
            2,
            owner.clone(),
            vec![1; 31],
            Some(vec![1]),
            i64::MAX,
            "fingerprint of 31",
        ),
        (
            "body",
            1,
            owner.clone(),
            fp.clone(),
            Some(vec![1]),
            i64::MAX,
            "pending record with a body",
        ),
        (
            "nobody",
            2,
            owner.clone(),
            fp.clone(),
            None,
            i64::MAX,
            "without a body",
        ),
        (
            "past",
            9,
            owner.clone(),
            fp.clone(),
            None,
            5,
            "unknown state",
        ),
        (
            "negative",
            1,
            owner.clone(),
            fp.clone(),
            None,
            -5,
            "before 1970",
        ),
    ];
    for (k, state, owner, fp, body, expires_at, _) in &planted {
        sqlx::query(
            "INSERT INTO idem_records (operation, key, state, owner, fingerprint, body, expires_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .bind(b"op".to_vec())
        .bind(k.as_bytes().to_vec())
        .bind(state)
        .bind(owner.clone())
        .bind(fp.clone())
        .bind(body.clone())
        .bind(expires_at)
        .execute(store.pool())
        .await
        .unwrap();
    }
    for (k, .., detail) in &planted {
        let before = raw(&store, "idem_records", k).await;
        for command in every_command() {
            match store.apply_timed(&op("op"), &key(k), command.clone()).await {
                Err(StoreError::Corrupt { detail: got, .. }) => {
                    assert!(got.contains(detail), "{k}: {got}")
                }
                other => panic!("{k}: {command:?}: {other:?}"),
            }
        }
        assert_eq!(raw(&store, "idem_records", k).await, before, "{k}");
    }
    assert_eq!(store.sweep(100).await.unwrap(), 0);
    assert_eq!(store.stats().corrupt, 35);
    assert_eq!(store.stats().unavailable, 0);
}

/// A table someone else created without STRICT can hold a value of another type: it is
/// reported as such, never decoded into something it is not.
#[tokio::test]
async fn a_value_of_another_type_is_corrupt() {
    let dir = TempDir::new();
    let plain = SqliteStore::open(dir.db()).await.unwrap();
    sqlx::query(
        "CREATE TABLE loose (operation BLOB NOT NULL, key BLOB NOT NULL, state INTEGER NOT NULL, \
         owner BLOB NOT NULL, fingerprint BLOB NOT NULL, body BLOB, expires_at INTEGER NOT NULL, \
         fence INTEGER, PRIMARY KEY (operation, key))",
    )
    .execute(plain.pool())
    .await
    .unwrap();
    let store = SqliteStore::builder()
        .table(TableName::new("loose").unwrap())
        .open(dir.db())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    sqlx::query(
        "INSERT INTO loose VALUES (X'6F70', X'6B', 1, 'sixteen chars!!!', ?1, NULL, 9e18, NULL)",
    )
    .bind(vec![1_u8; 32])
    .execute(store.pool())
    .await
    .unwrap();
    let before = raw(&store, "loose", "k").await;
    for command in every_command() {
        match store.apply_timed(&op("op"), &key("k"), command).await {
            Err(StoreError::Corrupt { detail, .. }) => {
                assert!(detail.contains("owner is text"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(raw(&store, "loose", "k").await, before);
}

/// A body of 8 MiB is stored and replayed byte for byte.
#[tokio::test]
async fn a_large_body_round_trips() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    let (operation, key) = (op("report.build"), key("k-big"));
    let body: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 251) as u8).collect();
    assert!(matches!(
        store
            .apply_timed(&operation, &key, reserve(1, 30_000))
            .await
            .unwrap()
            .0,
        Reply::Reserved(_)
    ));
    assert_eq!(
        store
            .apply_timed(&operation, &key, complete(1, &body))
            .await
            .unwrap()
            .0,
        Reply::Completed(Completion::InTime)
    );
    match store
        .apply_timed(&operation, &key, reserve(2, 30_000))
        .await
        .unwrap()
        .0
    {
        Reply::Replay {
            result: StoredResult::Value(got),
            ..
        } => assert!(got.as_bytes() == body.as_slice()),
        other => panic!("{other:?}"),
    }
}

/// Through the coordinator: a result over `max_body_bytes` is returned to its caller and
/// recorded without its body, so a retry gets `ResultNotStored`, never a second run.
#[tokio::test]
async fn an_oversized_result_is_recorded_without_its_body() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    let options = Options::builder().max_body_bytes(64).build().unwrap();
    let coordinator = Coordinator::new(store, options);
    let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let call = || {
        let runs = runs.clone();
        coordinator.execute(
            "report.build",
            "k-1",
            Fingerprint::of_bytes(b"report"),
            move |_claim| async move {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok::<_, std::io::Error>("x".repeat(1000))
            },
        )
    };
    assert_eq!(call().await.unwrap().len(), 1000);
    assert!(matches!(call().await, Err(Error::ResultNotStored)));
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// F1: every grant of a key is fenced above every earlier grant of it, across a release,
/// an expiry, and a reopening of the file.
#[tokio::test]
async fn fences_rise_across_release_expiry_and_reopening() {
    let dir = TempDir::new();
    let (operation, key) = (op("payment.charge"), key("k-1"));
    let mut fences = Vec::new();
    for round in 0..3 {
        let store = store(&dir).await;
        for owner in 1..=3 {
            let owner = owner + round * 10;
            let Reply::Reserved(grant) = store
                .apply_timed(&operation, &key, reserve(owner, 300))
                .await
                .unwrap()
                .0
            else {
                panic!("not granted");
            };
            fences.push(grant.fence.expect("every grant is fenced"));
            // The holder's renewal and repeated reserve carry its fence unchanged.
            let Reply::Renewed(renewal) = store
                .apply_timed(
                    &operation,
                    &key,
                    Command::Renew {
                        owner: OwnerToken::from_u128(owner),
                        lease: Duration::from_millis(300),
                    },
                )
                .await
                .unwrap()
                .0
            else {
                panic!("not renewed");
            };
            assert_eq!(renewal.fence, grant.fence);
            if owner % 2 == 0 {
                store
                    .apply_timed(
                        &operation,
                        &key,
                        Command::Release {
                            owner: OwnerToken::from_u128(owner),
                        },
                    )
                    .await
                    .unwrap();
            } else {
                // Leases long enough for the renewal to land on a loaded machine.
                tokio::time::sleep(Duration::from_millis(350)).await;
            }
        }
        store.pool().close().await;
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[tokio::test]
async fn the_sweep_removes_expired_records_only() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    let operation = op("payment.charge");
    for i in 0..10 {
        let lease = if i < 6 { 1 } else { 60_000 };
        store
            .apply_timed(&operation, &key(&format!("k-{i}")), reserve(1, lease))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(store.sweep(4).await.unwrap(), 4);
    assert_eq!(store.sweep(100).await.unwrap(), 2);
    assert_eq!(store.sweep(100).await.unwrap(), 0);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM idem_records")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(left, 4);
    assert_eq!(store.stats().swept, 6);
}

/// Keys and operations are compared byte for byte: case and a trailing dot make other
/// records, and one key under two operations is two records (rule 8).
#[tokio::test]
async fn names_are_byte_exact_and_scoped_by_operation() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    for (operation, k) in [
        ("payment.charge", "Key"),
        ("payment.charge", "key"),
        ("payment.charge", "key."),
        ("order.cancel", "key"),
    ] {
        let reply = store
            .apply_timed(&op(operation), &key(k), reserve(1, 30_000))
            .await
            .unwrap()
            .0;
        assert!(
            matches!(reply, Reply::Reserved(_)),
            "{operation} {k:?}: {reply:?}"
        );
    }
    let Reply::Read(Some(Record::Pending { .. })) = store
        .apply_timed(&op("payment.charge"), &key("key."), Command::Read)
        .await
        .unwrap()
        .0
    else {
        panic!("the record of \"key.\"");
    };
}

/// A store whose table is missing answers unavailable (the table is created by
/// `migrate`), never corrupt, and never panics.
#[tokio::test]
async fn a_missing_table_is_unavailable() {
    let dir = TempDir::new();
    let store = SqliteStore::open(dir.db()).await.unwrap();
    match store
        .apply_timed(&op("op"), &key("k"), reserve(1, 1000))
        .await
    {
        Err(error @ StoreError::Unavailable { .. }) => {
            assert!(
                error.to_string().contains("migrate")
                    || format!("{error:?}").contains("no such table"),
                "{error:?}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// Through the coordinator: the action runs once, the second call replays its value.
#[tokio::test]
async fn a_call_runs_once_and_replays() {
    let dir = TempDir::new();
    let store = store(&dir).await;
    let coordinator = Coordinator::new(store.clone(), Options::default());
    let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
    for _ in 0..3 {
        let runs = runs.clone();
        let charge = coordinator
            .execute(
                "payment.charge",
                "k-1",
                Fingerprint::of_bytes(b"100"),
                move |claim| async move {
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, std::io::Error>(format!("ch_{}", claim.key()))
                },
            )
            .await
            .unwrap();
        assert_eq!(charge, "ch_k-1");
    }
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(store.stats().unavailable + store.stats().corrupt, 0);
}

/// Group commit: commands queued together share one write transaction, and each is still
/// decided alone, in order, on the state the ones before it left: 8 keys, 8 callers each,
/// one grant per key, in fewer transactions than commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_committed_together_are_each_decided_alone() {
    let dir = TempDir::new();
    // Every reserve to the writer, none answered from a plain read.
    let store = SqliteStore::builder()
        .read_first(false)
        .open(dir.db())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let operation = op("payment.charge");
    let calls: Vec<_> = (0..64_u128)
        .map(|i| {
            let (store, operation) = (store.clone(), operation.clone());
            tokio::spawn(async move {
                let key = key(&format!("k-{}", i % 8));
                let reply = store
                    .apply_timed(&operation, &key, reserve(i + 1, 30_000))
                    .await
                    .unwrap()
                    .0;
                (i % 8, reply)
            })
        })
        .collect();
    let mut granted = [0; 8];
    for call in calls {
        let (k, reply) = call.await.unwrap();
        match reply {
            Reply::Reserved(_) => granted[k as usize] += 1,
            Reply::InFlight { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(granted, [1; 8]);
    let stats = store.stats();
    // Every reserve was decided in a write transaction; some shared one.
    assert_eq!(stats.write_transactions, 64, "{stats:?}");
    assert!(stats.batches < stats.write_transactions, "{stats:?}");
}

/// Another process's writer holding the file's lock past the busy timeout and the command
/// timeout: the command is unavailable (its outcome unknown to the caller), nothing was
/// written, and once the lock is free the same command goes through. Both with group commit
/// and without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_elsewhere_past_the_timeouts_is_unavailable() {
    use sqlx::Connection;
    for group_commit in [true, false] {
        let dir = TempDir::new();
        let store = SqliteStore::builder()
            .command_timeout(Duration::from_millis(300))
            .busy_timeout(Duration::from_millis(100))
            .group_commit(group_commit)
            .open(dir.db())
            .await
            .unwrap();
        store.migrate().await.unwrap();
        // A connection of its own, as another process's would be.
        let mut other =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}", dir.db().display()))
                .await
                .unwrap();
        let lock = other.begin_with("BEGIN IMMEDIATE").await.unwrap();
        let (operation, key) = (op("payment.charge"), key("k-1"));
        match store
            .apply_timed(&operation, &key, reserve(1, 30_000))
            .await
        {
            Err(error @ StoreError::Unavailable { .. }) => assert!(error.is_outcome_unknown()),
            other => panic!("group commit {group_commit}: {other:?}"),
        }
        lock.rollback().await.unwrap();
        let (read, _) = store
            .apply_timed(&operation, &key, Command::Read)
            .await
            .unwrap();
        assert_eq!(read, Reply::Read(None), "group commit {group_commit}");
        let (granted, _) = store
            .apply_timed(&operation, &key, reserve(1, 30_000))
            .await
            .unwrap();
        assert!(matches!(granted, Reply::Reserved(_)), "{granted:?}");
        assert_eq!(store.stats().unavailable, 1);
    }
}
