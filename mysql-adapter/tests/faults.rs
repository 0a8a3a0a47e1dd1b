//! Commands that do not answer in time, on the real MariaDB: the store's own command timeout
//! and the server's `max_statement_time` are `StoreError::Unavailable`, and the retry of an
//! abandoned command is recognised (I11).

mod support;

use std::time::{Duration, Instant};

use idem::{Store, StoreError};
use idem_core::record::{Body, Command, Completion, Record, Reply, StoredResult};
use idem_core::{Fingerprint, Key, Operation, OwnerToken};
use idem_mysql::MySqlStore;
use support::TestDb;

fn names() -> (Operation, Key) {
    (
        Operation::new("payment.charge").unwrap(),
        Key::new("k").unwrap(),
    )
}

fn reserve() -> Command {
    Command::Reserve {
        owner: OwnerToken::from_u128(1),
        fingerprint: Fingerprint::of_bytes(b"charge"),
        lease: Duration::from_secs(30),
    }
}

fn complete() -> Command {
    Command::Complete {
        owner: OwnerToken::from_u128(1),
        fingerprint: Fingerprint::of_bytes(b"charge"),
        result: StoredResult::Value(Body::new(b"\"ch_1\"")),
        retention: Duration::from_secs(60),
    }
}

/// Another session holds the record's row lock until the returned transaction ends.
async fn hold_the_row(db: &TestDb) -> sqlx::Transaction<'static, sqlx::MySql> {
    let pool = db.pool(1).await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT state FROM idem_records WHERE `key` = 'k' FOR UPDATE")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_client_timeout_may_still_land_and_its_retry_is_recognised() {
    let db = TestDb::create().await;
    // On a pool of the test's own: no max_statement_time, so the abandoned statement goes on.
    let store = MySqlStore::builder()
        .command_timeout(Duration::from_millis(200))
        .build(db.pool(4).await);
    store.migrate().await.unwrap();
    let (o, k) = names();
    assert!(matches!(
        store.apply(&o, &k, reserve()).await.unwrap(),
        Reply::Reserved(_)
    ));
    let holder = hold_the_row(&db).await;
    let sent = Instant::now();
    let late = store.apply(&o, &k, complete()).await;
    let took = sent.elapsed();
    assert!(
        matches!(late, Err(StoreError::Unavailable { .. })),
        "{late:?}"
    );
    assert!(took < Duration::from_millis(600), "answered after {took:?}");
    assert_eq!(store.stats().unavailable, 1);
    holder.commit().await.unwrap();
    // The retry, with the same token, is the record machine's answer whether or not the
    // abandoned statement landed: the result is recorded once.
    let retry = store.apply(&o, &k, complete()).await.unwrap();
    assert!(
        matches!(
            retry,
            Reply::Completed(Completion::InTime | Completion::Repeated)
        ),
        "{retry:?}"
    );
    match store.apply(&o, &k, Command::Read).await.unwrap() {
        Reply::Read(Some(Record::Completed { result, .. })) => {
            assert_eq!(result, StoredResult::Value(Body::new(b"\"ch_1\"")));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_past_the_servers_time_limit_is_unavailable_and_changes_nothing() {
    let db = TestDb::create().await;
    // Opened by the builder: its connections carry max_statement_time = 0.3 s, under a
    // client timeout of 5 s, so the server is the one that gives up.
    let store = MySqlStore::builder()
        .command_timeout(Duration::from_secs(5))
        .statement_timeout(Duration::from_millis(300))
        .connect(db.url())
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let (o, k) = names();
    assert!(matches!(
        store.apply(&o, &k, reserve()).await.unwrap(),
        Reply::Reserved(_)
    ));
    let holder = hold_the_row(&db).await;
    let sent = Instant::now();
    let stopped = store.apply(&o, &k, complete()).await;
    let took = sent.elapsed();
    assert!(
        matches!(stopped, Err(StoreError::Unavailable { .. })),
        "{stopped:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "the server stopped it after {took:?}"
    );
    holder.rollback().await.unwrap();
    // Nothing was written: the key is still the caller's reservation.
    match store.apply(&o, &k, Command::Read).await.unwrap() {
        Reply::Read(Some(Record::Pending { owner, .. })) => {
            assert_eq!(owner, OwnerToken::from_u128(1));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.apply(&o, &k, complete()).await.unwrap(),
        Reply::Completed(Completion::InTime)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_answer_is_unavailable_within_the_command_timeout() {
    // Nothing listens on this port: the lazily built store fails each command, in time.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let store = MySqlStore::builder()
        .command_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(200))
        .connect_lazy(&format!("mysql://root@127.0.0.1:{port}/none"))
        .unwrap();
    let (o, k) = names();
    let sent = Instant::now();
    let failed = store.apply(&o, &k, reserve()).await;
    assert!(
        matches!(failed, Err(StoreError::Unavailable { .. })),
        "{failed:?}"
    );
    assert!(sent.elapsed() < Duration::from_secs(2));
    assert!(store.now().await.is_err());
}
