//! The store on a real PostgreSQL: a key through its life, time judged by the statement's
//! own clock, values the adapter did not write, keys at their limits, the migration and
//! the sweeper.

mod support;

use std::time::Duration;

use idem::{Store, StoreError};
use idem_core::record::{Command, Completion, Record, Refusal, Reply, StoredResult};
use idem_core::{Body, Fence, Fingerprint, Key, Operation, OwnerToken, Timestamp};
use idem_postgres::{MAX_DURATION_MS, PostgresError, PostgresStore, TableName};
use sqlx::{AssertSqlSafe, Row};
use support::TestDb;

/// `reply` with a replay's remaining time taken out, once checked: the statement reads the
/// server's clock, so it says how long the record has left, within its `retention`.
fn said(reply: Reply, retention: Duration) -> Reply {
    match reply {
        Reply::Replay { result, remaining } => {
            let left = remaining.expect("a replay says how long its record has left");
            assert!(
                !left.is_zero() && left <= retention,
                "a replay with {left:?} left"
            );
            Reply::Replay {
                result,
                remaining: None,
            }
        }
        other => other,
    }
}
fn op(name: &str) -> Operation {
    Operation::new(name).unwrap()
}

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

fn owner(n: u128) -> OwnerToken {
    OwnerToken::from_u128(n)
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[n])
}

fn reserve(n: u128, f: u8, lease_ms: u64) -> Command {
    Command::Reserve {
        owner: owner(n),
        fingerprint: fp(f),
        lease: Duration::from_millis(lease_ms),
    }
}

fn complete(n: u128, f: u8, body: &str, retention_ms: u64) -> Command {
    Command::Complete {
        owner: owner(n),
        fingerprint: fp(f),
        result: StoredResult::Value(Body::new(body)),
        retention: Duration::from_millis(retention_ms),
    }
}

#[tokio::test]
async fn a_key_through_its_life() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let (o, k) = (op("payment.charge"), key("k-1"));
    let apply = |command| store.apply(&o, &k, command);

    let Reply::Reserved(granted) = apply(reserve(1, 1, 30_000)).await.unwrap() else {
        panic!("a free key is reserved");
    };
    assert_eq!(granted.owner, owner(1));
    let lease_until = granted.lease_until.unwrap();
    // The holder's retry gets the same reservation back (I11); another caller is told the
    // request is in flight; another request is key reuse (I4).
    assert_eq!(
        apply(reserve(1, 1, 30_000)).await.unwrap(),
        Reply::Reserved(granted)
    );
    assert_eq!(
        apply(reserve(2, 1, 30_000)).await.unwrap(),
        Reply::InFlight {
            lease_until: Some(lease_until)
        }
    );
    assert_eq!(
        apply(reserve(2, 2, 30_000)).await.unwrap(),
        Reply::KeyReuse { stored: fp(1) }
    );
    // Only the owner renews, completes or releases (I2).
    assert_eq!(
        apply(Command::Renew {
            owner: owner(2),
            lease: Duration::from_secs(60)
        })
        .await
        .unwrap(),
        Reply::Refused(Refusal::NotOwner)
    );
    assert_eq!(
        apply(complete(2, 1, "other", 60_000)).await.unwrap(),
        Reply::Refused(Refusal::NotOwner)
    );
    assert_eq!(
        apply(Command::Release { owner: owner(2) }).await.unwrap(),
        Reply::Refused(Refusal::NotOwner)
    );
    let Reply::Renewed(renewed) = apply(Command::Renew {
        owner: owner(1),
        lease: Duration::from_secs(60),
    })
    .await
    .unwrap() else {
        panic!("the owner renews");
    };
    assert!(renewed.lease_until.unwrap() > lease_until, "I10");
    // The owner completes; a retried complete is recognised (I3); identical requests
    // replay the body byte for byte (I8).
    assert_eq!(
        apply(complete(1, 1, "ch_1", 60_000)).await.unwrap(),
        Reply::Completed(Completion::InTime)
    );
    assert_eq!(
        apply(complete(1, 1, "ch_1", 60_000)).await.unwrap(),
        Reply::Completed(Completion::Repeated)
    );
    assert_eq!(
        said(
            apply(reserve(3, 1, 30_000)).await.unwrap(),
            Duration::from_secs(60)
        ),
        Reply::Replay {
            result: StoredResult::Value(Body::new("ch_1")),
            remaining: None,
        }
    );
    assert_eq!(
        apply(Command::Release { owner: owner(1) }).await.unwrap(),
        Reply::Refused(Refusal::AlreadyCompleted)
    );
    let Reply::Read(Some(Record::Completed { owner: by, .. })) =
        apply(Command::Read).await.unwrap()
    else {
        panic!("the record reads back");
    };
    assert_eq!(by, owner(1));
    // The same key under another operation is another record (rule 8).
    assert!(matches!(
        store
            .apply(&op("order.cancel"), &k, reserve(4, 2, 30_000))
            .await
            .unwrap(),
        Reply::Reserved(_)
    ));
    // A release frees the key; releasing twice is refused, never an error.
    let k2 = key("k-2");
    store.apply(&o, &k2, reserve(5, 1, 30_000)).await.unwrap();
    assert_eq!(
        store
            .apply(&o, &k2, Command::Release { owner: owner(5) })
            .await
            .unwrap(),
        Reply::Released
    );
    assert_eq!(
        store
            .apply(&o, &k2, Command::Release { owner: owner(5) })
            .await
            .unwrap(),
        Reply::Refused(Refusal::LeaseLost)
    );
    assert_eq!(
        store.apply(&o, &k2, Command::Read).await.unwrap(),
        Reply::Read(None)
    );
    let stats = store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0, "{stats:?}");
}

/// The server's clock judges leases, and it is the statement's own reading
/// (`clock_timestamp()`): a complete run inside a transaction that began before the lease
/// ran out still sees that it ran out.
#[tokio::test]
async fn time_is_the_statements_own_server_clock() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let (o, k) = (op("order.create"), key("late"));
    store.apply(&o, &k, reserve(1, 1, 300)).await.unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    // The transaction's start time, before the lease ends.
    let began: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000)::bigint")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reply = Transaction::complete(
        store.transaction(tx),
        o.clone(),
        k.clone(),
        complete(1, 1, "late", 60_000),
    )
    .await
    .unwrap();
    assert_eq!(reply, Reply::Completed(Completion::AfterLeaseExpiry));
    // The record machine at the transaction's start would have said "in time": a
    // statement judged by now() is caught.
    let stale = judged_by_transaction_start(&db, &store, began).await;
    assert_eq!(stale, "in_time", "the broken statement answers as at now()");
}

use idem::Transaction;

/// Broken on purpose: the complete statement with the transaction's start time (`now()`)
/// as its clock, run in a transaction that began before the lease ran out.
async fn judged_by_transaction_start(db: &TestDb, store: &PostgresStore, began: i64) -> String {
    let (o, k) = (op("order.create"), key("late-2"));
    store.apply(&o, &k, reserve(1, 1, 300)).await.unwrap();
    let mut conn = db.conn().await;
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    let start: i64 = sqlx::query_scalar("SELECT (extract(epoch FROM now()) * 1000)::bigint")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(start >= began);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sql = idem_postgres::sql::expand(idem_postgres::sql::COMPLETE, store.table()).replace(
        idem_postgres::sql::NOW,
        "floor(extract(epoch FROM now()) * 1000)::bigint",
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(o.as_str())
        .bind(k.as_str())
        .bind(owner(1).to_bytes().to_vec())
        .bind(fp(1).to_bytes().to_vec())
        .bind(2_i16)
        .bind(Some(b"late".to_vec()))
        .bind(60_000_i64)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    sqlx::query("ROLLBACK").execute(&mut conn).await.unwrap();
    row.get("reply")
}

/// A row as it is stored, every column as text: for "left byte for byte" checks.
async fn row_text(store: &PostgresStore, operation: &str, key: &str) -> Option<String> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT row_to_json(r)::text FROM {} AS r WHERE operation = $1 AND key = $2",
        store.table().quoted()
    )))
    .bind(operation)
    .bind(key)
    .fetch_optional(store.pool())
    .await
    .unwrap()
}

/// A row this adapter never writes: key, state, owner, fingerprint, body, deadline, and
/// what the store must say is wrong with it.
type ForeignRow = (
    &'static str,
    i16,
    Vec<u8>,
    Vec<u8>,
    Option<Vec<u8>>,
    i64,
    &'static str,
);

#[tokio::test]
async fn foreign_rows_are_reported_and_never_touched() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let table = store.table().quoted();
    let o = "payment.charge";
    // Rows this adapter never writes: (key, state, owner, fingerprint, body, expires_at).
    let owner16 = vec![7_u8; 16];
    let fp32 = fp(1).to_bytes().to_vec();
    let far = 4_000_000_000_000_i64;
    let foreign: Vec<ForeignRow> = vec![
        (
            "state-9",
            9,
            owner16.clone(),
            fp32.clone(),
            None,
            far,
            "unknown state 9",
        ),
        (
            "state-0",
            0,
            owner16.clone(),
            fp32.clone(),
            None,
            far,
            "unknown state 0",
        ),
        (
            "short-owner",
            1,
            vec![1; 15],
            fp32.clone(),
            None,
            far,
            "owner of 15 bytes",
        ),
        (
            "long-fp",
            2,
            owner16.clone(),
            vec![1; 33],
            Some(b"x".to_vec()),
            far,
            "fingerprint of 33 bytes",
        ),
        (
            "pending-body",
            1,
            owner16.clone(),
            fp32.clone(),
            Some(b"x".to_vec()),
            far,
            "pending record with a body",
        ),
        (
            "value-no-body",
            2,
            owner16.clone(),
            fp32.clone(),
            None,
            far,
            "completed value without a body",
        ),
        (
            "panic-body",
            4,
            owner16.clone(),
            fp32.clone(),
            Some(vec![]),
            far,
            "state 4 with a body",
        ),
        (
            "negative-deadline",
            1,
            owner16.clone(),
            fp32.clone(),
            None,
            -5,
            "deadline of -5 ms",
        ),
        // A pending row with a fence no sequence of ours hands out (set below): live, and
        // expired (which a reserve would otherwise take over).
        (
            "fence-0",
            1,
            owner16.clone(),
            fp32.clone(),
            None,
            far,
            "a fence of 0",
        ),
        (
            "expired-fence-0",
            1,
            owner16.clone(),
            fp32.clone(),
            None,
            1,
            "a fence of 0",
        ),
        // Expired on any clock, and still not ours: never taken over, never swept.
        (
            "expired-foreign",
            7,
            owner16.clone(),
            fp32.clone(),
            None,
            1,
            "unknown state 7",
        ),
    ];
    for (key, state, owner_bytes, fingerprint, body, expires_at, _) in &foreign {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} VALUES ($1, $2, $3, $4, $5, $6, $7)"
        )))
        .bind(o)
        .bind(key)
        .bind(state)
        .bind(owner_bytes)
        .bind(fingerprint)
        .bind(body)
        .bind(expires_at)
        .execute(store.pool())
        .await
        .unwrap();
    }
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {table} SET fence = 0 WHERE operation = $1 AND key LIKE '%fence-0'"
    )))
    .bind(o)
    .execute(store.pool())
    .await
    .unwrap();
    let commands = [
        reserve(1, 1, 30_000),
        complete(1, 1, "x", 60_000),
        Command::Renew {
            owner: OwnerToken::from_bytes([7; 16]),
            lease: Duration::from_secs(30),
        },
        Command::Release {
            owner: OwnerToken::from_bytes([7; 16]),
        },
        Command::Read,
    ];
    for (name, .., detail) in &foreign {
        let before = row_text(&store, o, name).await.unwrap();
        for command in commands.clone() {
            let kind = command.kind();
            match store.apply(&op(o), &key(name), command).await {
                Err(StoreError::Corrupt { key, detail: said }) => {
                    assert!(key.contains(name), "{key}");
                    assert!(said.contains(detail), "{name} {kind}: {said}");
                }
                other => panic!("{name} {kind}: {other:?}"),
            }
        }
        // A transactional complete meets it too, and commits nothing.
        let tx = store.pool().begin().await.unwrap();
        let joined = Transaction::complete(
            store.transaction(tx),
            op(o),
            key(name),
            complete(1, 1, "x", 60_000),
        )
        .await;
        assert!(
            matches!(joined, Err(StoreError::Corrupt { .. })),
            "{joined:?}"
        );
        assert_eq!(row_text(&store, o, name).await.unwrap(), before, "{name}");
    }
    assert_eq!(
        store.sweep(100).await.unwrap(),
        0,
        "foreign rows are never swept"
    );
    assert!(row_text(&store, o, "expired-foreign").await.is_some());
    let stats = store.stats();
    assert_eq!(stats.corrupt, 6 * foreign.len() as u64, "{stats:?}");
    assert_eq!(stats.unavailable, 0, "{stats:?}");
}

#[tokio::test]
async fn keys_and_operations_at_their_limits_are_stored_verbatim() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let visible: String = (0x21_u8..=0x7e).map(char::from).collect();
    let long_key: String = visible.chars().cycle().take(255).collect();
    let long_op: String = "a.b_c-D9".chars().cycle().take(100).collect();
    let (o, k) = (op(&long_op), key(&long_key));
    let body = vec![0xa5_u8; 1 << 20];
    store.apply(&o, &k, reserve(1, 1, 30_000)).await.unwrap();
    let done = store
        .apply(
            &o,
            &k,
            Command::Complete {
                owner: owner(1),
                fingerprint: fp(1),
                result: StoredResult::Value(Body::new(&body)),
                retention: Duration::from_secs(60),
            },
        )
        .await
        .unwrap();
    assert_eq!(done, Reply::Completed(Completion::InTime));
    assert_eq!(
        said(
            store.apply(&o, &k, reserve(2, 1, 30_000)).await.unwrap(),
            Duration::from_secs(60)
        ),
        Reply::Replay {
            result: StoredResult::Value(Body::new(body)),
            remaining: None,
        }
    );
    let stored: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT operation, key FROM {}",
        store.table().quoted()
    )))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(stored, [(long_op, long_key)], "I12: byte for byte");
    // Keys that differ only in case are two records.
    let (lower, upper) = (key("case-k"), key("case-K"));
    store
        .apply(&o, &lower, reserve(3, 1, 30_000))
        .await
        .unwrap();
    assert!(matches!(
        store
            .apply(&o, &upper, reserve(4, 2, 30_000))
            .await
            .unwrap(),
        Reply::Reserved(_)
    ));
}

#[tokio::test]
async fn the_longest_leases_are_capped_and_stay_readable() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let (o, k) = (op("payment.charge"), key("forever"));
    let (reply, now) = store
        .apply_timed(
            &o,
            &k,
            Command::Reserve {
                owner: owner(1),
                fingerprint: fp(1),
                lease: Duration::MAX,
            },
        )
        .await
        .unwrap();
    let Reply::Reserved(granted) = reply else {
        panic!("{reply:?}");
    };
    assert_eq!(
        granted.lease_until,
        Some(Timestamp::from_millis(now.as_millis() + MAX_DURATION_MS))
    );
    let renewed = store
        .apply(
            &o,
            &k,
            Command::Renew {
                owner: owner(1),
                lease: Duration::MAX,
            },
        )
        .await
        .unwrap();
    assert!(matches!(renewed, Reply::Renewed(_)), "{renewed:?}");
    let done = store
        .apply(
            &o,
            &k,
            Command::Complete {
                owner: owner(1),
                fingerprint: fp(1),
                result: StoredResult::Panicked,
                retention: Duration::MAX,
            },
        )
        .await
        .unwrap();
    assert_eq!(done, Reply::Completed(Completion::InTime));
    assert_eq!(
        said(
            store.apply(&o, &k, reserve(2, 1, 10)).await.unwrap(),
            Duration::from_millis(MAX_DURATION_MS)
        ),
        Reply::Replay {
            result: StoredResult::Panicked,
            remaining: None,
        }
    );
}

#[tokio::test]
async fn the_migration_is_idempotent_concurrent_and_schema_qualified() {
    let db = TestDb::create().await;
    let pool = db.pool(8).await;
    sqlx::query("CREATE SCHEMA billing")
        .execute(&pool)
        .await
        .unwrap();
    let table = TableName::new("billing.Records").unwrap();
    let store = PostgresStore::builder().table(table).build(pool.clone());
    // Eight migrations at once, then once more: one table, one index, one fence sequence,
    // nothing else.
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.migrate().await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    store.migrate().await.unwrap();
    let objects: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname IN ('billing', 'public') AND c.relkind IN ('r', 'i', 'S', 'v', 'm') \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        objects,
        ["Records", "Records_expiry", "Records_fence", "Records_pkey"]
    );
    let reply = store
        .apply(&op("o"), &key("k"), reserve(1, 1, 1_000))
        .await
        .unwrap();
    assert!(matches!(reply, Reply::Reserved(_)));
    // A schema that does not exist is an error, not created.
    let missing = PostgresStore::builder()
        .table(TableName::new("nowhere.idem_records").unwrap())
        .build(pool.clone());
    assert!(matches!(
        missing.migrate().await,
        Err(PostgresError::Database(_))
    ));
}

#[tokio::test]
async fn a_table_of_the_same_name_that_is_not_ours_is_left_alone() {
    let db = TestDb::create().await;
    let pool = db.pool(2).await;
    sqlx::query("CREATE TABLE idem_records (id serial PRIMARY KEY, note text)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO idem_records (note) VALUES ('theirs')")
        .execute(&pool)
        .await
        .unwrap();
    let store = PostgresStore::builder().build(pool.clone());
    match store.migrate().await {
        Err(PostgresError::Layout { table, detail }) => {
            assert_eq!(table, "idem_records");
            assert!(detail.contains("columns"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let indexes: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_indexes WHERE tablename = 'idem_records'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(indexes, 1, "no index was added to their table");
    let notes: Vec<String> = sqlx::query_scalar("SELECT note FROM idem_records")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(notes, ["theirs"]);
    // Before a migration, a command fails as unavailable, saying why.
    let other = PostgresStore::builder()
        .table(TableName::new("not_migrated").unwrap())
        .build(pool);
    let error = other
        .apply(&op("o"), &key("k"), reserve(1, 1, 1_000))
        .await
        .unwrap_err();
    assert!(error.is_outcome_unknown());
    assert!(error.to_string().contains("migrate"), "{error}");
}

#[tokio::test]
async fn the_sweeper_removes_expired_records_in_batches_and_nothing_else() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    let o = op("payment.charge");
    for i in 0..25 {
        store
            .apply(&o, &key(&format!("short-{i}")), reserve(1, 1, 1))
            .await
            .unwrap();
    }
    for i in 0..5 {
        let k = key(&format!("done-{i}"));
        store.apply(&o, &k, reserve(1, 1, 30_000)).await.unwrap();
        store
            .apply(&o, &k, complete(1, 1, "v", 60_000))
            .await
            .unwrap();
    }
    store
        .apply(&o, &key("live"), reserve(2, 1, 30_000))
        .await
        .unwrap();
    // One expired record locked by a caller's transaction (a complete in progress).
    let locked = key("locked");
    store.apply(&o, &locked, reserve(3, 1, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut holder = store.pool().begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM {} WHERE operation = $1 AND key = $2 FOR UPDATE",
        store.table().quoted()
    )))
    .bind(o.as_str())
    .bind(locked.as_str())
    .execute(&mut *holder)
    .await
    .unwrap();
    assert_eq!(store.sweep(10).await.unwrap(), 10);
    assert_eq!(store.sweep(10).await.unwrap(), 10);
    assert_eq!(
        store.sweep(10).await.unwrap(),
        5,
        "the locked one is skipped"
    );
    assert_eq!(store.sweep(10).await.unwrap(), 0);
    holder.rollback().await.unwrap();
    assert_eq!(store.sweep(10).await.unwrap(), 1);
    assert_eq!(store.stats().swept, 26);
    let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {}",
        store.table().quoted()
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(left, 6, "the live and completed records stay");
    // A swept key is free, as its expired record already read.
    assert!(matches!(
        store
            .apply(&o, &key("short-3"), reserve(9, 2, 1_000))
            .await
            .unwrap(),
        Reply::Reserved(_)
    ));
}

/// The fence of a grant, or a panic naming the reply.
fn fence_of(reply: &Reply) -> Fence {
    match reply {
        Reply::Reserved(grant) | Reply::Renewed(grant) => grant.fence.expect("a fenced grant"),
        other => panic!("not a grant: {other:?}"),
    }
}

#[tokio::test]
async fn every_grant_is_fenced_above_the_ones_before() {
    // MODEL.md F1 on PostgreSQL: a first grant, the holder's renewal and repeated reserve,
    // a release and a new grant, a takeover after the lease ran out, a takeover of a
    // completed record whose retention ran out.
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let (o, k) = (op("payment.charge"), key("fenced"));
    let first = store.apply(&o, &k, reserve(1, 1, 60_000)).await.unwrap();
    let f1 = fence_of(&first);
    let renewed = store
        .apply(
            &o,
            &k,
            Command::Renew {
                owner: owner(1),
                lease: Duration::from_secs(60),
            },
        )
        .await
        .unwrap();
    assert_eq!(fence_of(&renewed), f1, "a renewal keeps the holder's fence");
    let again = store.apply(&o, &k, reserve(1, 1, 60_000)).await.unwrap();
    assert_eq!(
        fence_of(&again),
        f1,
        "so does the holder's repeated reserve"
    );
    let Reply::Read(Some(Record::Pending { fence, .. })) =
        store.apply(&o, &k, Command::Read).await.unwrap()
    else {
        panic!("a pending record")
    };
    assert_eq!(fence, Some(f1), "and the record");

    let released = store
        .apply(&o, &k, Command::Release { owner: owner(1) })
        .await
        .unwrap();
    assert_eq!(released, Reply::Released);
    let f2 = fence_of(&store.apply(&o, &k, reserve(2, 1, 30)).await.unwrap());
    assert!(f2 > f1, "{f2:?} after a release, {f1:?} before");

    tokio::time::sleep(Duration::from_millis(60)).await;
    let f3 = fence_of(&store.apply(&o, &k, reserve(3, 1, 60_000)).await.unwrap());
    assert!(
        f3 > f2,
        "a takeover after the lease ran out: {f3:?} after {f2:?}"
    );
    let done = store.apply(&o, &k, complete(3, 1, "ok", 30)).await.unwrap();
    assert_eq!(done, Reply::Completed(Completion::InTime));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let f4 = fence_of(&store.apply(&o, &k, reserve(4, 1, 60_000)).await.unwrap());
    assert!(
        f4 > f3,
        "a grant after the result expired: {f4:?} after {f3:?}"
    );
}

#[tokio::test]
async fn a_table_made_before_fences_is_migrated_in_place() {
    let db = TestDb::create().await;
    let pool = db.pool(2).await;
    // The table as the adapter made it before fences, holding a live reservation.
    sqlx::raw_sql(
        "CREATE TABLE idem_records (
            operation text COLLATE \"C\" NOT NULL, key text COLLATE \"C\" NOT NULL,
            state smallint NOT NULL, owner bytea NOT NULL, fingerprint bytea NOT NULL,
            body bytea, expires_at bigint NOT NULL, PRIMARY KEY (operation, key));
         CREATE INDEX idem_records_expiry ON idem_records (expires_at);",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO idem_records VALUES ('payment.charge', 'old', 1, $1, $2, NULL, \
         floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 50)",
    )
    .bind(owner(1).to_bytes().to_vec())
    .bind(fp(1).to_bytes().to_vec())
    .execute(&pool)
    .await
    .unwrap();
    let store = PostgresStore::builder().build(pool.clone());
    store.migrate().await.unwrap();
    let (o, k) = (op("payment.charge"), key("old"));
    // The reservation made before holds on, without a fence...
    let held = store.apply(&o, &k, reserve(1, 1, 60_000)).await.unwrap();
    assert!(
        matches!(held, Reply::Reserved(grant) if grant.fence.is_none()),
        "{held:?}"
    );
    // ...and the takeover once it runs out is fenced.
    tokio::time::sleep(Duration::from_millis(80)).await;
    let taken = fence_of(&store.apply(&o, &k, reserve(2, 1, 60_000)).await.unwrap());
    let Reply::Read(Some(Record::Pending {
        owner: holder,
        fence,
        ..
    })) = store.apply(&o, &k, Command::Read).await.unwrap()
    else {
        panic!("a pending record")
    };
    assert_eq!(
        (holder, fence),
        (owner(2), Some(taken)),
        "the row keeps its fence"
    );
}
