//! What every store's [`AdminStore`] must answer, written once and run by each store
//! crate's `tests/admin.rs` on a real store (the `admin` feature).
//!
//! Each scenario makes its records through the store's own commands ([`Store::apply`]) or
//! a real [`Coordinator`], lets short leases and retentions run out on the store's clock,
//! then checks what the operator's tool would be told: `inspect`'s states, time left,
//! owners, fences and bodies; `list`'s pages (every record exactly once, in order, the
//! operation filter with tenant-scoped names and a name that only shares a prefix);
//! `forget` and `release` (never a live lease, never another owner's record); `stats`;
//! `sweep`; `health`. A store that answers otherwise fails with the record named.

use std::collections::BTreeSet;
use std::time::Duration;

use idem::admin::{
    AdminError, AdminStore, Cursor, ListFilter, ListQuery, OperationStats, RecordState, Released,
    Status, system_now,
};
use idem::record::{Body, Command, Record, Reply, Reservation, StoredResult};
use idem::{Coordinator, Fingerprint, Key, Operation, Options, OwnerToken};

/// How long the short leases and retentions of the scenarios last.
const SHORT: Duration = Duration::from_millis(300);
/// How long a scenario waits for them to run out (on the store's clock too).
const PAST_SHORT: Duration = Duration::from_millis(800);
/// A lease that lives through any scenario.
const LONG: Duration = Duration::from_secs(60);

fn op(name: &str) -> Operation {
    Operation::new(name).expect("a valid operation")
}

fn key(name: &str) -> Key {
    Key::new(name).expect("a valid key")
}

fn fingerprint(of: &str) -> Fingerprint {
    Fingerprint::of_bytes(of.as_bytes())
}

/// Reserves `key` for `owner` and returns the grant.
async fn reserve<S: AdminStore>(
    store: &S,
    operation: &Operation,
    key: &Key,
    owner: u128,
    lease: Duration,
) -> Reservation {
    let command = Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: fingerprint("request"),
        lease,
    };
    match store.apply(operation, key, command).await {
        Ok(Reply::Reserved(reservation)) => reservation,
        other => panic!("reserve of ({operation}, {key}) answered {other:?}"),
    }
}

/// Reserves `key` for `owner` and completes it with `result`, kept for `retention`.
async fn completed<S: AdminStore>(
    store: &S,
    operation: &Operation,
    key: &Key,
    owner: u128,
    result: StoredResult,
    retention: Duration,
) {
    reserve(store, operation, key, owner, LONG).await;
    let command = Command::Complete {
        owner: OwnerToken::from_u128(owner),
        fingerprint: fingerprint("request"),
        result,
        retention,
    };
    match store.apply(operation, key, command).await {
        Ok(Reply::Completed(_)) => {}
        other => panic!("complete of ({operation}, {key}) answered {other:?}"),
    }
}

fn body(bytes: &[u8]) -> StoredResult {
    StoredResult::Value(Body::new(bytes))
}

/// Every page of `query` from its first, with how many pages it took; each page at most
/// `query.limit` records.
async fn all_pages<S: AdminStore>(store: &S, mut query: ListQuery) -> (Vec<(String, String)>, u32) {
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages < 100, "the listing does not end");
        let page = store.list(&query).await.expect("list");
        assert!(
            page.records.len() <= query.limit as usize,
            "a page of {} records for a limit of {}",
            page.records.len(),
            query.limit
        );
        for listed in &page.records {
            let state = RecordState::of(&listed.record, page.now);
            assert!(
                query.matches(&listed.operation, state),
                "({}, {}) in state {state} is not what {query:?} asks for",
                listed.operation,
                listed.key
            );
            seen.push((
                listed.operation.as_str().to_owned(),
                listed.key.as_str().to_owned(),
            ));
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => return (seen, pages),
        }
    }
}

/// The names of `records`, sorted as a listing returns them.
fn sorted(records: &[(&Operation, &str)]) -> Vec<(String, String)> {
    let set: BTreeSet<(String, String)> = records
        .iter()
        .map(|(operation, key)| (operation.as_str().to_owned(), (*key).to_owned()))
        .collect();
    set.into_iter().collect()
}

/// `inspect` and `list` over a live, an expired, a completed (through a [`Coordinator`]),
/// a panicked, a tenant-scoped and a retired record, and records of an operation that
/// only shares a prefix with the one asked for (`admin.pay_later`: `_` is a wildcard to
/// SQL's `LIKE`) and of another.
pub async fn inspect_and_list<S>(store: S)
where
    S: AdminStore + Clone + 'static,
{
    let pay = op("admin.pay");
    let tenant = pay.for_tenant("acme").expect("a scoped operation");
    let later = op("admin.pay_later");
    let refund = op("admin.refund");

    let live = reserve(&store, &pay, &key("k-live"), 1, LONG).await;
    reserve(&store, &pay, &key("k-expired"), 2, SHORT).await;
    completed(
        &store,
        &pay,
        &key("k-panicked"),
        3,
        StoredResult::Panicked,
        LONG,
    )
    .await;
    completed(&store, &tenant, &key("k-tenant"), 4, body(b"[1,2,3]"), LONG).await;
    completed(&store, &later, &key("k-near"), 5, body(b"1"), LONG).await;
    reserve(&store, &refund, &key("k-other"), 6, LONG).await;
    completed(&store, &pay, &key("k-retired"), 7, body(b"2"), SHORT).await;
    // 98 characters and their quotes: a body of 100 bytes, as the coordinator stores it.
    let coordinator = Coordinator::new(store.clone(), Options::default());
    let value: String = coordinator
        .execute("admin.pay", "k-done", fingerprint("done"), |_| async {
            Ok::<_, std::io::Error>("x".repeat(98))
        })
        .await
        .expect("the coordinator runs the action");
    assert_eq!(value.len(), 98);
    tokio::time::sleep(PAST_SHORT).await;

    // inspect
    let local = system_now();
    let seen = store.inspect(&pay, &key("k-live")).await.expect("inspect");
    let off = seen
        .now
        .saturating_duration_since(local)
        .max(local.saturating_duration_since(seen.now));
    assert!(
        off < Duration::from_secs(5),
        "the store's clock is {off:?} off"
    );
    assert_eq!(seen.state(), RecordState::Pending);
    let left = seen.time_left().expect("a live lease has time left");
    assert!(left > Duration::from_secs(50) && left <= LONG, "{left:?}");
    match &seen.record {
        Some(Record::Pending { owner, fence, .. }) => {
            assert_eq!(*owner, OwnerToken::from_u128(1));
            assert_eq!(*fence, live.fence);
            assert!(fence.is_some(), "a SQL store fences every grant");
        }
        other => panic!("k-live holds {other:?}"),
    }

    let seen = store
        .inspect(&pay, &key("k-expired"))
        .await
        .expect("inspect");
    assert_eq!(seen.state(), RecordState::Expired, "{seen:?}");
    assert_eq!(seen.time_left(), Some(Duration::ZERO));
    assert_eq!(
        seen.record.as_ref().map(Record::owner),
        Some(OwnerToken::from_u128(2))
    );

    let seen = store.inspect(&pay, &key("k-done")).await.expect("inspect");
    assert_eq!(seen.state(), RecordState::Completed);
    assert!(seen.time_left().expect("retention") > Duration::from_secs(23 * 3600));
    match &seen.record {
        Some(Record::Completed {
            result: StoredResult::Value(body),
            ..
        }) => {
            assert_eq!(body.len(), 100);
            assert_eq!(body.as_bytes(), format!("\"{value}\"").as_bytes());
        }
        other => panic!("k-done holds {other:?}"),
    }

    let seen = store
        .inspect(&pay, &key("k-panicked"))
        .await
        .expect("inspect");
    assert_eq!(seen.state(), RecordState::Panicked);

    let seen = store
        .inspect(&tenant, &key("k-tenant"))
        .await
        .expect("inspect");
    assert_eq!(seen.state(), RecordState::Completed);
    let seen = store
        .inspect(&pay, &key("k-tenant"))
        .await
        .expect("inspect");
    assert_eq!(
        seen.record, None,
        "a tenant's record is not the base name's"
    );

    let seen = store
        .inspect(&pay, &key("k-retired"))
        .await
        .expect("inspect");
    assert_eq!(seen.state(), RecordState::Absent, "{seen:?}");
    let seen = store.inspect(&pay, &key("k-never")).await.expect("inspect");
    assert_eq!((seen.state(), seen.record), (RecordState::Absent, None));

    // list: every record, two at a time
    let every = sorted(&[
        (&pay, "k-live"),
        (&pay, "k-expired"),
        (&pay, "k-done"),
        (&pay, "k-panicked"),
        (&tenant, "k-tenant"),
        (&later, "k-near"),
        (&refund, "k-other"),
    ]);
    let query = |operation: Option<&Operation>, filter| ListQuery {
        operation: operation.cloned(),
        filter,
        after: None,
        limit: 2,
    };
    let (listed, pages) = all_pages(&store, query(None, ListFilter::All)).await;
    assert_eq!(
        listed, every,
        "every record once, in (operation, key) order"
    );
    assert!(pages <= 5, "{pages} pages for 7 records two at a time");

    let (listed, _) = all_pages(&store, query(Some(&pay), ListFilter::All)).await;
    let of_pay = sorted(&[
        (&pay, "k-live"),
        (&pay, "k-expired"),
        (&pay, "k-done"),
        (&pay, "k-panicked"),
        (&tenant, "k-tenant"),
    ]);
    assert_eq!(
        listed, of_pay,
        "admin.pay and its tenants' records, nothing else"
    );

    let (listed, _) = all_pages(&store, query(Some(&tenant), ListFilter::All)).await;
    assert_eq!(listed, sorted(&[(&tenant, "k-tenant")]));

    let (listed, _) = all_pages(&store, query(None, ListFilter::InFlight)).await;
    let in_flight = sorted(&[(&pay, "k-live"), (&pay, "k-expired"), (&refund, "k-other")]);
    assert_eq!(listed, in_flight, "pending records, live or expired");

    let (listed, _) = all_pages(&store, query(Some(&pay), ListFilter::InFlight)).await;
    assert_eq!(listed, sorted(&[(&pay, "k-live"), (&pay, "k-expired")]));

    // One page of everything: the last page says so.
    let mut whole = query(None, ListFilter::All);
    whole.limit = 100;
    let page = store.list(&whole).await.expect("list");
    assert_eq!(page.records.len(), every.len());
    assert_eq!(page.next, None);
    let expired = page
        .records
        .iter()
        .find(|listed| listed.key.as_str() == "k-expired")
        .expect("the expired record is listed");
    assert_eq!(
        RecordState::of(&expired.record, page.now),
        RecordState::Expired
    );

    // A cursor this store did not make.
    for made_up in ["", "no-space-in-it", "admin.pay key with spaces", "~ k"] {
        let mut bad = query(None, ListFilter::All);
        bad.after = Some(Cursor(made_up.to_owned()));
        match store.list(&bad).await {
            Err(AdminError::Corrupt(_)) => {}
            other => panic!("the cursor {made_up:?} was answered {other:?}"),
        }
    }
}

/// `forget` refuses a live lease and another owner's record, deletes a completed and an
/// expired record; `release` (the record machine's) frees a live key for a new grant.
pub async fn forget_and_release<S: AdminStore>(store: S) {
    let pay = op("admin.forget");
    let (live, done, expired) = (key("k-live"), key("k-done"), key("k-expired"));
    let held = reserve(&store, &pay, &live, 1, LONG).await;
    completed(&store, &pay, &done, 2, body(b"{}"), LONG).await;
    reserve(&store, &pay, &expired, 3, SHORT).await;
    tokio::time::sleep(PAST_SHORT).await;
    let owner = OwnerToken::from_u128;

    assert!(!store.forget(&pay, &live, owner(1)).await.expect("forget"));
    assert_eq!(
        store.inspect(&pay, &live).await.expect("inspect").state(),
        RecordState::Pending,
        "a live lease is never forgotten"
    );
    assert!(!store.forget(&pay, &done, owner(9)).await.expect("forget"));
    assert!(
        !store
            .forget(&pay, &expired, owner(9))
            .await
            .expect("forget")
    );
    assert_eq!(
        store.inspect(&pay, &done).await.expect("inspect").state(),
        RecordState::Completed,
        "another owner's record is never forgotten"
    );
    assert!(store.forget(&pay, &done, owner(2)).await.expect("forget"));
    assert_eq!(
        store.inspect(&pay, &done).await.expect("inspect").record,
        None
    );
    assert!(
        store
            .forget(&pay, &expired, owner(3))
            .await
            .expect("forget")
    );
    assert_eq!(
        store.inspect(&pay, &expired).await.expect("inspect").record,
        None
    );
    assert!(!store.forget(&pay, &done, owner(2)).await.expect("forget"));
    assert!(
        !store
            .forget(&pay, &key("k-never"), owner(1))
            .await
            .expect("forget")
    );

    // Release: another owner's token changes nothing; the holder's frees the key.
    assert_eq!(
        store.release(&pay, &live, owner(9)).await.expect("release"),
        Released::Changed
    );
    assert_eq!(
        store.release(&pay, &live, owner(1)).await.expect("release"),
        Released::Released
    );
    assert_ne!(
        store.inspect(&pay, &live).await.expect("inspect").state(),
        RecordState::Pending
    );
    let next = reserve(&store, &pay, &live, 4, LONG).await;
    assert_eq!(next.owner, owner(4));
    if let (Some(before), Some(after)) = (held.fence, next.fence) {
        assert!(
            after > before,
            "the new grant is fenced above the released one"
        );
    }
    completed(&store, &pay, &done, 5, body(b"1"), LONG).await;
    assert_eq!(
        store.release(&pay, &done, owner(5)).await.expect("release"),
        Released::Changed,
        "a completed record is not released"
    );
}

/// `stats` counts by operation and state at the store's clock, with body sizes, leaving
/// out a completed record past its retention; `sweep` deletes exactly the expired records.
pub async fn stats_and_sweep<S: AdminStore>(store: S) {
    let one = op("admin.one");
    let scoped = one.for_tenant("acme").expect("a scoped operation");
    let two = op("admin.two");
    reserve(&store, &one, &key("live"), 1, LONG).await;
    reserve(&store, &one, &key("expired"), 2, SHORT).await;
    completed(&store, &one, &key("ten"), 3, body(&[b'1'; 10]), LONG).await;
    completed(&store, &one, &key("thirty"), 4, body(&[b'2'; 30]), LONG).await;
    completed(
        &store,
        &one,
        &key("unstored"),
        5,
        StoredResult::NotStored,
        LONG,
    )
    .await;
    completed(
        &store,
        &one,
        &key("panicked"),
        6,
        StoredResult::Panicked,
        LONG,
    )
    .await;
    completed(&store, &one, &key("retired"), 7, body(&[b'3'; 1000]), SHORT).await;
    completed(&store, &scoped, &key("five"), 8, body(b"12345"), LONG).await;
    reserve(&store, &two, &key("live"), 9, LONG).await;
    completed(
        &store,
        &op("admin.three"),
        &key("gone"),
        10,
        body(b"1"),
        SHORT,
    )
    .await;
    tokio::time::sleep(PAST_SHORT).await;

    let stats = AdminStore::stats(&store).await.expect("stats");
    let expected = vec![
        OperationStats {
            operation: one.as_str().to_owned(),
            pending: 1,
            expired: 1,
            completed: 3,
            panicked: 1,
            body_bytes: 40,
            largest_body: 30,
        },
        OperationStats {
            operation: scoped.as_str().to_owned(),
            completed: 1,
            body_bytes: 5,
            largest_body: 5,
            ..OperationStats::default()
        },
        OperationStats {
            operation: two.as_str().to_owned(),
            pending: 1,
            ..OperationStats::default()
        },
    ];
    assert_eq!(stats.operations, expected);

    // The expired lease and the two retired results, and nothing else.
    assert_eq!(store.sweep(100).await.expect("sweep"), 3);
    assert_eq!(store.sweep(100).await.expect("sweep"), 0);
    for (operation, name) in [(&one, "expired"), (&one, "retired")] {
        let seen = store.inspect(operation, &key(name)).await.expect("inspect");
        assert_eq!(seen.record, None, "({operation}, {name}) was swept");
    }
    let seen = store.inspect(&one, &key("live")).await.expect("inspect");
    assert_eq!(
        seen.state(),
        RecordState::Pending,
        "a live lease is never swept"
    );
    let after = AdminStore::stats(&store).await.expect("stats");
    assert_eq!(after.operations[0].expired, 0);
    assert_eq!(after.operations[0].completed, 3);
}

/// `health` of a good store: every check `ok`, and at least the `clock` and `layout`
/// checks and those named in `names`; `kind` names the store as `kind` says.
pub async fn healthy<S: AdminStore>(store: S, kind: &str, names: &[&str]) {
    assert!(
        store.kind().contains(kind),
        "kind {:?} does not say {kind:?}",
        store.kind()
    );
    let health = store.health().await.expect("health");
    for check in &health.checks {
        assert_eq!(check.status, Status::Ok, "{check:?}");
        assert!(!check.detail.is_empty(), "{check:?} explains nothing");
    }
    for name in ["clock", "layout"].iter().chain(names) {
        assert!(
            health.checks.iter().any(|check| check.name == *name),
            "no {name:?} check in {health:?}"
        );
    }
    assert_eq!(health.status(), Status::Ok);
}

/// `health` of a store whose table was never made: the `layout` check fails and says to
/// run the migration.
pub async fn table_missing<S: AdminStore>(store: S) {
    let health = store
        .health()
        .await
        .expect("health answers for a bare store");
    assert_eq!(health.status(), Status::Fail, "{health:?}");
    let layout = health
        .checks
        .iter()
        .find(|check| check.name == "layout")
        .expect("a layout check");
    assert_eq!(layout.status, Status::Fail, "{layout:?}");
    assert!(layout.detail.contains("migrate"), "{layout:?}");
}

/// A row the store did not write, planted by the caller under (`operation`, `key`) with
/// an unknown state, an all-zero owner and a deadline far ahead: `inspect` answers
/// [`AdminError::Corrupt`] naming it, a listing that reaches it names it in the page's
/// `corrupt` and goes on; `stats` leaves it out; `forget` never deletes it.
pub async fn corrupt_row_is_named<S: AdminStore>(store: S, operation: &str, key_name: &str) {
    let (operation, key) = (
        Operation::from_stored(operation).expect("a name"),
        key(key_name),
    );
    match store.inspect(&operation, &key).await {
        Err(AdminError::Corrupt(detail)) => assert!(detail.contains(key_name), "{detail}"),
        other => panic!("inspect of a planted row answered {other:?}"),
    }
    let every = ListQuery {
        operation: None,
        filter: ListFilter::All,
        after: None,
        limit: 10,
    };
    let page = store
        .list(&every)
        .await
        .expect("a listing goes past a planted row");
    assert!(
        page.corrupt.iter().any(|name| name.contains(key_name)),
        "the planted row is named: {page:?}"
    );
    assert!(
        page.records.iter().all(|listed| listed.key != key),
        "{page:?}"
    );
    let stats = AdminStore::stats(&store).await.expect("stats");
    assert!(
        stats
            .operations
            .iter()
            .all(|entry| entry.operation != operation.as_str()),
        "{stats:?}"
    );
    assert!(
        !store
            .forget(&operation, &key, OwnerToken::from_u128(0))
            .await
            .expect("forget")
    );
    assert!(matches!(
        store.inspect(&operation, &key).await,
        Err(AdminError::Corrupt(_))
    ));
}
