//! The operator's reads and writes on a real Redis, standalone and Cluster
//! (`idem::admin::AdminStore`): listings page through every record exactly once (over
//! every master), filter by operation and state, report values the store did not write;
//! `forget` never deletes a live lease or another owner's record; `stats` counts by state.

use std::collections::BTreeSet;
use std::time::Duration;

use idem::admin::{AdminStore, ListFilter, ListQuery, RecordState};
use idem::{Store, StoreError};
use idem_core::record::{Command, Reply, StoredResult};
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken};
use idem_redis::RedisStore;
use idem_tests::redis::{RedisCluster, RedisServer, raw_command};

const LONG: Duration = Duration::from_secs(600);

async fn reserve(store: &RedisStore, operation: &Operation, key: &str, owner: u128) {
    let command = Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(key.as_bytes()),
        lease: LONG,
    };
    let reply = store
        .apply(operation, &Key::new(key).unwrap(), command)
        .await;
    assert!(matches!(reply, Ok(Reply::Reserved(_))), "{reply:?}");
}

async fn complete(store: &RedisStore, operation: &Operation, key: &str, owner: u128, body: &[u8]) {
    reserve(store, operation, key, owner).await;
    let command = Command::Complete {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(key.as_bytes()),
        result: StoredResult::Value(Body::new(body)),
        retention: LONG,
    };
    let reply = store
        .apply(operation, &Key::new(key).unwrap(), command)
        .await;
    assert!(matches!(reply, Ok(Reply::Completed(_))), "{reply:?}");
}

/// Eleven records: pending and completed under two operations and a tenant's scope.
async fn fill(store: &RedisStore) -> (Operation, Operation, Operation) {
    let charge = Operation::new("payment.charge").unwrap();
    let refund = Operation::new("payment.refund").unwrap();
    let scoped = charge.for_tenant("acct-1").unwrap();
    for n in 0..4 {
        reserve(store, &charge, &format!("pending-{n}"), 100 + n).await;
        complete(store, &charge, &format!("done-{n}"), 200 + n, &[b'x'; 10]).await;
    }
    reserve(store, &refund, "pending-r", 300).await;
    complete(store, &refund, "done-r", 301, b"").await;
    reserve(store, &scoped, "pending-t", 400).await;
    (charge, refund, scoped)
}

/// Every page of `query`, limit 2: each record's (operation, key) once, and the pages seen.
async fn walk(store: &RedisStore, mut query: ListQuery) -> (Vec<(String, String)>, usize) {
    query.limit = 2;
    let (mut seen, mut pages) = (Vec::new(), 0);
    loop {
        let page = store.list(&query).await.unwrap();
        pages += 1;
        for listed in &page.records {
            seen.push((listed.operation.to_string(), listed.key.to_string()));
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => return (seen, pages),
        }
    }
}

async fn listings(store: &RedisStore) {
    let (charge, refund, scoped) = fill(store).await;
    let all = ListQuery {
        filter: ListFilter::All,
        ..ListQuery::in_flight()
    };
    let (seen, pages) = walk(store, all.clone()).await;
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(seen.len(), 11, "every record once: {seen:?}");
    assert_eq!(unique.len(), 11, "no record twice: {seen:?}");
    assert!(pages >= 2, "pages of at most about 2: {pages}");

    let (in_flight, _) = walk(store, ListQuery::in_flight()).await;
    let keys: BTreeSet<&str> = in_flight.iter().map(|(_, key)| key.as_str()).collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "pending-0",
            "pending-1",
            "pending-2",
            "pending-3",
            "pending-r",
            "pending-t"
        ])
    );
    // A base name lists its tenants' records too; another operation's never.
    let (charges, _) = walk(
        store,
        ListQuery {
            operation: Some(charge.clone()),
            ..ListQuery::in_flight()
        },
    )
    .await;
    assert_eq!(charges.len(), 5, "{charges:?}");
    assert!(charges.iter().any(|(op, _)| *op == scoped.to_string()));
    let (refunds, _) = walk(
        store,
        ListQuery {
            operation: Some(refund.clone()),
            filter: ListFilter::All,
            ..ListQuery::in_flight()
        },
    )
    .await;
    assert_eq!(refunds.len(), 2, "{refunds:?}");

    // Inspect: state, owner, time left by the store's clock, the body.
    let done = store
        .inspect(&charge, &Key::new("done-1").unwrap())
        .await
        .unwrap();
    assert_eq!(done.state(), RecordState::Completed);
    assert_eq!(
        done.record.as_ref().unwrap().owner(),
        OwnerToken::from_u128(201)
    );
    let left = done.time_left().unwrap();
    assert!(
        left <= LONG && left > LONG - Duration::from_secs(30),
        "{left:?}"
    );

    // Forget: never a live lease, never another owner's record; a completed one, once.
    let pending = Key::new("pending-0").unwrap();
    let forgot = store
        .forget(&charge, &pending, OwnerToken::from_u128(100))
        .await;
    assert!(!forgot.unwrap(), "a live lease is never forgotten");
    let done_key = Key::new("done-1").unwrap();
    let other = store
        .forget(&charge, &done_key, OwnerToken::from_u128(999))
        .await;
    assert!(!other.unwrap(), "another owner's record is kept");
    assert!(
        store
            .forget(&charge, &done_key, OwnerToken::from_u128(201))
            .await
            .unwrap()
    );
    assert_eq!(
        store.inspect(&charge, &done_key).await.unwrap().record,
        None
    );
    assert!(
        !store
            .forget(&charge, &done_key, OwnerToken::from_u128(201))
            .await
            .unwrap()
    );

    // Stats by operation and state (the tenant's records under their scoped name).
    let stats = AdminStore::stats(store).await.unwrap();
    let by_name = |name: &str| {
        stats
            .operations
            .iter()
            .find(|op| op.operation == name)
            .unwrap_or_else(|| panic!("{name} in {stats:?}"))
    };
    let charged = by_name("payment.charge");
    assert_eq!((charged.pending, charged.completed), (4, 3));
    assert_eq!((charged.body_bytes, charged.largest_body), (30, 10));
    assert_eq!(by_name(scoped.as_str()).pending, 1);
    assert_eq!(by_name("payment.refund").completed, 1);
    assert_eq!(stats.corrupt, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_listing_pages_filters_and_reports_foreign_values() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    listings(&store).await;

    // A value the store did not write under a record key: listed as corrupt, left alone.
    raw_command(server.port, "SET idem:{}payment.charge:planted garbage").unwrap();
    let page = store
        .list(&ListQuery {
            filter: ListFilter::All,
            limit: 100,
            ..ListQuery::in_flight()
        })
        .await
        .unwrap();
    assert_eq!(
        page.corrupt,
        vec!["idem:{}payment.charge:planted".to_owned()]
    );
    assert_eq!(AdminStore::stats(&store).await.unwrap().corrupt, 1);
    let planted = Key::new("planted").unwrap();
    let charge = Operation::new("payment.charge").unwrap();
    assert!(matches!(
        store.inspect(&charge, &planted).await,
        Err(idem::admin::AdminError::Store(StoreError::Corrupt { .. }))
    ));
    assert!(
        store
            .forget(&charge, &planted, OwnerToken::from_u128(1))
            .await
            .is_err()
    );
    assert!(
        raw_command(server.port, "GET idem:{}payment.charge:planted")
            .unwrap()
            .contains("garbage")
    );
    // Keys of another prefix are not the store's: never listed.
    raw_command(server.port, "SET other:{}payment.charge:x y").unwrap();
    let (seen, _) = walk(
        &store,
        ListQuery {
            filter: ListFilter::All,
            ..ListQuery::in_flight()
        },
    )
    .await;
    assert!(seen.iter().all(|(_, key)| key != "x"), "{seen:?}");

    // A cursor the store did not make is refused, not followed.
    let bad = store
        .list(&ListQuery {
            after: Some(idem::admin::Cursor("nonsense".to_owned())),
            ..ListQuery::in_flight()
        })
        .await;
    assert!(bad.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_listing_walks_every_master() {
    let cluster = RedisCluster::start();
    let store = RedisStore::builder()
        .connect_cluster(cluster.urls())
        .await
        .unwrap();
    listings(&store).await;
    // The records are spread: more than one master holds some.
    let holding = cluster
        .nodes
        .iter()
        .filter(|node| {
            raw_command(node.port, "DBSIZE")
                .map(|size| !size.trim().ends_with(":0") && size.trim() != "0")
                .unwrap_or(false)
        })
        .count();
    assert!(holding >= 2, "records on {holding} master(s)");
    let health = AdminStore::health(&store).await.unwrap();
    assert_eq!(health.status(), idem::admin::Status::Ok, "{health:?}");
}
