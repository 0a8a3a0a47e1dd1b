//! The store's commands on the real MariaDB: a key through its life, one winner among
//! concurrent reserves, the owner checks, rows it did not write, bodies at the server's
//! limit, the clock read after a lock, fences, the sweeper and the migration.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use idem::{Store, StoreError};
use idem_core::record::{Body, Command, Completion, Record, Refusal, Reply, StoredResult};
use idem_core::{Fingerprint, Key, Operation, OwnerToken};
use idem_mysql::{MySqlError, MySqlStore, TableName};
use support::TestDb;

/// A whole row: operation, key, state, owner, fingerprint, body, expires_at, fence.
type Row = (
    Vec<u8>,
    Vec<u8>,
    i16,
    Vec<u8>,
    Vec<u8>,
    Option<Vec<u8>>,
    i64,
    Option<i64>,
);

fn op(name: &str) -> Operation {
    Operation::new(name).unwrap()
}

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::of_bytes(&[n])
}

fn owner(n: u128) -> OwnerToken {
    OwnerToken::from_u128(n)
}

fn reserve(n: u128, print: u8, lease_ms: u64) -> Command {
    Command::Reserve {
        owner: owner(n),
        fingerprint: fp(print),
        lease: Duration::from_millis(lease_ms),
    }
}

fn complete(n: u128, print: u8, body: &[u8]) -> Command {
    Command::Complete {
        owner: owner(n),
        fingerprint: fp(print),
        result: StoredResult::Value(Body::new(body)),
        retention: Duration::from_secs(60),
    }
}

/// The raw row, as the table holds it.
async fn raw(db: &TestDb, name: &str) -> Option<(i16, Vec<u8>, Option<Vec<u8>>, i64)> {
    let pool = db.pool(1).await;
    sqlx::query_as("SELECT state, owner, body, expires_at FROM idem_records WHERE `key` = ?")
        .bind(name.as_bytes())
        .fetch_optional(&pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_through_its_life() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    let (o, k) = (op("payment.charge"), key("life"));
    let before = store.now().await.unwrap();
    let (reply, at) = store
        .apply_timed(&o, &k, reserve(1, 1, 30_000))
        .await
        .unwrap();
    let after = store.now().await.unwrap();
    assert!(before <= at && at <= after, "{before:?} {at:?} {after:?}");
    let Reply::Reserved(grant) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(grant.owner, owner(1));
    assert_eq!(
        grant.lease_until,
        Some(at.saturating_add(Duration::from_secs(30)))
    );
    assert!(grant.fence.is_some());
    // The owner's retry gets its reservation back; an identical request is in flight; another
    // request is key reuse.
    assert_eq!(
        store.apply(&o, &k, reserve(1, 1, 30_000)).await.unwrap(),
        Reply::Reserved(grant)
    );
    assert!(matches!(
        store.apply(&o, &k, reserve(2, 1, 30_000)).await.unwrap(),
        Reply::InFlight {
            lease_until: Some(_)
        }
    ));
    assert_eq!(
        store.apply(&o, &k, reserve(2, 9, 30_000)).await.unwrap(),
        Reply::KeyReuse { stored: fp(1) }
    );
    // The same key under another operation is another record (rule 8).
    assert!(matches!(
        store
            .apply(&op("order.cancel"), &k, reserve(3, 7, 30_000))
            .await
            .unwrap(),
        Reply::Reserved(_)
    ));
    assert_eq!(
        store
            .apply(&o, &k, complete(1, 1, b"\"ch_1\""))
            .await
            .unwrap(),
        Reply::Completed(Completion::InTime)
    );
    assert_eq!(
        store
            .apply(&o, &k, complete(1, 1, b"\"other\""))
            .await
            .unwrap(),
        Reply::Completed(Completion::Repeated)
    );
    match store.apply(&o, &k, reserve(4, 1, 30_000)).await.unwrap() {
        Reply::Replay {
            result: StoredResult::Value(body),
            remaining: Some(left),
        } => {
            assert_eq!(body.as_bytes(), b"\"ch_1\"");
            assert!(left > Duration::from_secs(50) && left <= Duration::from_secs(60));
        }
        other => panic!("{other:?}"),
    }
    let stats = store.stats();
    assert_eq!(stats.unavailable + stats.corrupt, 0, "{stats:?}");
    assert!(
        stats.fast >= 5,
        "the common cases took their one statement: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_many_concurrent_reserves_on_one_key_exactly_one_is_granted() {
    let db = TestDb::create().await;
    let store = Arc::new(db.store(16).await);
    let (o, k) = (op("payment.charge"), key("contended"));
    for round in 0..4_u128 {
        let k = Key::new(format!("contended-{round}")).unwrap();
        let mut tasks = Vec::new();
        for n in 0..32_u128 {
            let (store, o, k) = (Arc::clone(&store), o.clone(), k.clone());
            tasks.push(tokio::spawn(async move {
                store
                    .apply(&o, &k, reserve(round * 100 + n + 1, 1, 30_000))
                    .await
            }));
        }
        let mut granted = HashSet::new();
        for task in tasks {
            match task.await.unwrap().unwrap() {
                Reply::Reserved(grant) => {
                    granted.insert(grant.owner);
                }
                Reply::InFlight { .. } => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(granted.len(), 1, "round {round}: {granted:?}");
    }
    // An expired key taken over by many at once: one winner too, fenced above the first.
    let (first, _) = store.apply_timed(&o, &k, reserve(1, 1, 50)).await.unwrap();
    let Reply::Reserved(first) = first else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(80)).await;
    let mut tasks = Vec::new();
    for n in 0..32_u128 {
        let (store, o, k) = (Arc::clone(&store), o.clone(), k.clone());
        tasks.push(tokio::spawn(async move {
            store.apply(&o, &k, reserve(1_000 + n, 1, 30_000)).await
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        if let Reply::Reserved(grant) = task.await.unwrap().unwrap() {
            winners.push(grant);
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert!(
        winners[0].fence > first.fence,
        "{winners:?} after {first:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_completes_renews_or_releases() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    let (o, k) = (op("payment.charge"), key("owned"));
    assert!(matches!(
        store.apply(&o, &k, reserve(1, 1, 30_000)).await.unwrap(),
        Reply::Reserved(_)
    ));
    let before = raw(&db, "owned").await;
    let stranger = [
        complete(2, 1, b"x"),
        Command::Renew {
            owner: owner(2),
            lease: Duration::from_secs(60),
        },
        Command::Release { owner: owner(2) },
    ];
    for command in stranger {
        assert_eq!(
            store.apply(&o, &k, command.clone()).await.unwrap(),
            Reply::Refused(Refusal::NotOwner),
            "{command:?}"
        );
    }
    assert_eq!(
        raw(&db, "owned").await,
        before,
        "a stranger changed nothing"
    );
    // The owner renews (the lease only grows, I10) and releases; then the lease is lost.
    let renewed = store
        .apply(
            &o,
            &k,
            Command::Renew {
                owner: owner(1),
                lease: Duration::from_secs(1),
            },
        )
        .await
        .unwrap();
    let Reply::Renewed(renewal) = renewed else {
        panic!("{renewed:?}")
    };
    assert_eq!(
        renewal.lease_until.map(|t| t.as_millis() as i64),
        before.as_ref().map(|row| row.3),
        "a shorter renewal keeps the longer lease"
    );
    assert_eq!(
        store
            .apply(&o, &k, Command::Release { owner: owner(1) })
            .await
            .unwrap(),
        Reply::Released
    );
    assert_eq!(
        store
            .apply(&o, &k, Command::Release { owner: owner(1) })
            .await
            .unwrap(),
        Reply::Refused(Refusal::LeaseLost)
    );
    assert_eq!(
        store.apply(&o, &k, Command::Read).await.unwrap(),
        Reply::Read(None)
    );
    // Released, the key is free again, and its next grant is fenced above the first.
    assert!(matches!(
        store.apply(&o, &k, reserve(3, 1, 30_000)).await.unwrap(),
        Reply::Reserved(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_it_did_not_write_are_corrupt_for_every_command_and_never_touched() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    let pool = db.pool(1).await;
    let o = op("payment.charge");
    let far = "UNIX_TIMESTAMP() * 1000 + 600000";
    let plants = [
        (
            "state",
            format!("9, REPEAT('o', 16), REPEAT('f', 32), NULL, {far}, 1"),
        ),
        (
            "owner",
            format!("1, 'short', REPEAT('f', 32), NULL, {far}, 1"),
        ),
        (
            "print",
            format!("1, REPEAT('o', 16), 'short', NULL, {far}, 1"),
        ),
        (
            "nobody",
            format!("2, REPEAT('o', 16), REPEAT('f', 32), NULL, {far}, 1"),
        ),
        (
            "abody",
            format!("1, REPEAT('o', 16), REPEAT('f', 32), 'x', {far}, 1"),
        ),
        (
            "deadline",
            "1, REPEAT('o', 16), REPEAT('f', 32), NULL, -5, 1".to_owned(),
        ),
        (
            "fence",
            format!("1, REPEAT('o', 16), REPEAT('f', 32), NULL, {far}, 0"),
        ),
    ];
    for (name, values) in &plants {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO idem_records VALUES ('payment.charge', '{name}', {values})"
        )))
        .execute(&pool)
        .await
        .unwrap();
    }
    let table: Vec<Row> = sqlx::query_as("SELECT * FROM idem_records ORDER BY `key`")
        .fetch_all(&pool)
        .await
        .unwrap();
    let stranger = OwnerToken::from_bytes([b'o'; 16]);
    for (name, _) in &plants {
        let k = key(name);
        let commands = [
            reserve(1, 1, 30_000),
            Command::Complete {
                owner: stranger,
                fingerprint: fp(1),
                result: StoredResult::NotStored,
                retention: Duration::from_secs(60),
            },
            Command::Renew {
                owner: stranger,
                lease: Duration::from_secs(60),
            },
            Command::Release { owner: stranger },
            Command::Read,
        ];
        for command in commands {
            match store.apply(&o, &k, command.clone()).await {
                Err(StoreError::Corrupt { key, detail }) => {
                    assert!(key.contains(name), "{key}");
                    assert!(!detail.is_empty());
                }
                other => panic!("{name}: {command:?} answered {other:?}"),
            }
        }
    }
    assert_eq!(
        store.sweep(100).await.unwrap(),
        0,
        "the sweeper skips them too"
    );
    let after: Vec<Row> = sqlx::query_as("SELECT * FROM idem_records ORDER BY `key`")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(after, table, "no row was changed");
    assert_eq!(store.stats().corrupt, 5 * plants.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_round_trips_and_one_over_the_servers_packet_limit_is_unavailable() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let (o, k) = (op("payment.charge"), key("large"));
    let max_packet: u64 = sqlx::query_scalar("SELECT @@max_allowed_packet")
        .fetch_one(store.pool())
        .await
        .unwrap();
    // 8 MiB of every byte value: stored and replayed byte for byte.
    let body: Vec<u8> = (0..8 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    assert!(matches!(
        store.apply(&o, &k, reserve(1, 1, 30_000)).await.unwrap(),
        Reply::Reserved(_)
    ));
    assert_eq!(
        store.apply(&o, &k, complete(1, 1, &body)).await.unwrap(),
        Reply::Completed(Completion::InTime)
    );
    match store.apply(&o, &k, reserve(2, 1, 30_000)).await.unwrap() {
        Reply::Replay {
            result: StoredResult::Value(got),
            ..
        } => assert!(got.as_bytes() == body),
        other => panic!("{other:?}"),
    }
    // Over max_allowed_packet: the complete fails as unavailable, and the key stays held.
    let k = key("too-large");
    let huge = vec![b'x'; usize::try_from(max_packet).unwrap() + 1];
    assert!(matches!(
        store.apply(&o, &k, reserve(1, 1, 30_000)).await.unwrap(),
        Reply::Reserved(_)
    ));
    let failed = store.apply(&o, &k, complete(1, 1, &huge)).await;
    assert!(
        matches!(failed, Err(StoreError::Unavailable { .. })),
        "{failed:?}"
    );
    match store.apply(&o, &k, Command::Read).await.unwrap() {
        Reply::Read(Some(Record::Pending { owner: held, .. })) => assert_eq!(held, owner(1)),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_waits_for_a_lock_judges_time_after_the_wait() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    let (o, k) = (op("payment.charge"), key("waits"));
    assert!(matches!(
        store.apply(&o, &k, reserve(1, 1, 300)).await.unwrap(),
        Reply::Reserved(_)
    ));
    // Another session holds the row's lock past the lease's end.
    let pool = db.pool(1).await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT state FROM idem_records WHERE `key` = 'waits' FOR UPDATE")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let renew = {
        let (store, o, k) = (store.clone(), o.clone(), k.clone());
        tokio::spawn(async move {
            store
                .apply_timed(
                    &o,
                    &k,
                    Command::Renew {
                        owner: owner(1),
                        lease: Duration::from_secs(30),
                    },
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    tx.commit().await.unwrap();
    let (reply, at) = renew.await.unwrap().unwrap();
    // Sent while the lease was live, but judged after the lock: the lease had run out.
    assert_eq!(
        reply,
        Reply::Refused(Refusal::LeaseLost),
        "judged at {at:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_grant_of_a_key_is_fenced_above_the_ones_before_even_after_a_sweep() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let (o, k) = (op("payment.charge"), key("fenced"));
    let mut last = None;
    for n in 0..6_u128 {
        // Leases long enough for the renewal to land on a loaded machine, short enough to
        // run out before the next grant.
        let Reply::Reserved(grant) = store.apply(&o, &k, reserve(n + 1, 1, 300)).await.unwrap()
        else {
            panic!()
        };
        assert!(grant.fence > last, "{grant:?} after {last:?}");
        last = grant.fence;
        // A renewal and the owner's retry keep the grant's fence.
        let Reply::Renewed(renewal) = store
            .apply(
                &o,
                &k,
                Command::Renew {
                    owner: owner(n + 1),
                    lease: Duration::from_millis(300),
                },
            )
            .await
            .unwrap()
        else {
            panic!("the renewal of a live lease is refused")
        };
        assert_eq!(renewal.fence, grant.fence);
        tokio::time::sleep(Duration::from_millis(350)).await;
        if n == 3 {
            assert_eq!(
                store.sweep(10).await.unwrap(),
                1,
                "the expired row is swept"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_removes_expired_records_in_batches_and_nothing_else() {
    let db = TestDb::create().await;
    let store = db.store(4).await;
    let o = op("payment.charge");
    for n in 0..5 {
        store
            .apply(
                &o,
                &Key::new(format!("short-{n}")).unwrap(),
                reserve(1, 1, 10),
            )
            .await
            .unwrap();
    }
    store
        .apply(&o, &key("live"), reserve(1, 1, 60_000))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(store.sweep(3).await.unwrap(), 3);
    assert_eq!(store.sweep(3).await.unwrap(), 2);
    assert_eq!(store.sweep(3).await.unwrap(), 0);
    assert_eq!(store.stats().swept, 5);
    assert!(raw(&db, "live").await.is_some(), "a live record is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_repeatable_and_a_table_that_is_not_ours_is_left_alone() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    store.migrate().await.unwrap();
    let pool = db.pool(1).await;
    sqlx::query("CREATE TABLE theirs (operation VARCHAR(10) PRIMARY KEY) ENGINE = InnoDB")
        .execute(&pool)
        .await
        .unwrap();
    let theirs = MySqlStore::builder()
        .table(TableName::new("theirs").unwrap())
        .build(pool.clone());
    assert!(matches!(
        theirs.migrate().await,
        Err(MySqlError::Layout { .. })
    ));
    let columns: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'theirs'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(columns, 1, "their table is unchanged");
    // A table in another database, named `database.table`.
    let qualified = MySqlStore::builder()
        .table(TableName::new(&format!("{}.other_records", db.name())).unwrap())
        .build(pool);
    qualified.migrate().await.unwrap();
    assert!(matches!(
        qualified
            .apply(&op("a"), &key("b"), reserve(1, 1, 1_000))
            .await
            .unwrap(),
        Reply::Reserved(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_operations_at_their_limits_are_stored_verbatim() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let visible: String = (0x21_u8..=0x7e).map(char::from).collect();
    let long_key = visible.repeat(3)[..255].to_owned();
    let o = Operation::new("o".repeat(100)).unwrap();
    let upper = key("CaseKey");
    let lower = key("casekey");
    for k in [key(&long_key), upper.clone(), lower.clone()] {
        assert!(
            matches!(
                store.apply(&o, &k, reserve(1, 1, 30_000)).await.unwrap(),
                Reply::Reserved(_)
            ),
            "{k}"
        );
    }
    let keys: Vec<Vec<u8>> = sqlx::query_scalar("SELECT `key` FROM idem_records ORDER BY `key`")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert!(keys.contains(&long_key.as_bytes().to_vec()));
    assert_eq!(keys.len(), 3, "keys differing in case only are two records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_leases_are_capped_and_stay_readable() {
    let db = TestDb::create().await;
    let store = db.store(2).await;
    let (o, k) = (op("payment.charge"), key("forever"));
    let forever = Duration::from_secs(u64::MAX / 2);
    let cap = Duration::from_millis(idem_mysql::MAX_DURATION_MS);
    let (reply, at) = store
        .apply_timed(
            &o,
            &k,
            Command::Reserve {
                owner: owner(1),
                fingerprint: fp(1),
                lease: forever,
            },
        )
        .await
        .unwrap();
    let Reply::Reserved(grant) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(grant.lease_until, Some(at.saturating_add(cap)));
    // The locked way (a renew) caps the same way.
    let (reply, at) = store
        .apply_timed(
            &o,
            &k,
            Command::Renew {
                owner: owner(1),
                lease: forever,
            },
        )
        .await
        .unwrap();
    let Reply::Renewed(renewal) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(renewal.lease_until, Some(at.saturating_add(cap)));
    match store.apply(&o, &k, Command::Read).await.unwrap() {
        Reply::Read(Some(Record::Pending { lease_until, .. })) => {
            assert_eq!(Some(lease_until), renewal.lease_until);
        }
        other => panic!("{other:?}"),
    }
}
