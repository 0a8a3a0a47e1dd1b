//! The pool serves its leases: as many transactional actions as the store allows run at
//! once, each holding its transaction for several leases, while plain calls come and go on
//! the same store. The actions' transactions are on a pool of their own, so the renewals
//! that keep their leases, and the other calls' reserves, always find a connection: no lease
//! lapses, nothing fails open. With the transactions on the statements' pool (the store
//! built on one pool, as before), the same load starves the renewals and is caught.

mod support;

use std::time::Duration;

use idem::{Coordinator, Fingerprint, LeaseState, Options, Provenance};
use idem_postgres::{PostgresStore, in_transaction_with_provenance};
use support::{TestDb, create_orders, insert_order, orders};

/// The store's default pool sizes: 16 for its statements, 16 for actions' transactions.
const TRANSACTIONS: usize = 16;
const PLAIN: usize = 20;
const LEASE: Duration = Duration::from_secs(1);
/// Each action holds its transaction for this long: three leases.
const HOLDS: Duration = Duration::from_secs(3);

#[derive(Debug, Default)]
struct Load {
    /// Transactional calls whose lease was held through their action and who committed.
    held_and_committed: usize,
    /// Every execution whose lease lapsed, and every call that ran unprotected.
    lease_lost: u64,
    failed_open: u64,
    /// The claims that saw their lease other than held at the end of their action.
    unconfirmed: usize,
    plain_ok: usize,
}

/// `TRANSACTIONS` transactional calls and `PLAIN` plain calls at once on `store`, under the
/// default store-failure policy (fail open), so that a starved store shows as calls run
/// unprotected.
async fn run_load(store: PostgresStore) -> Load {
    create_orders(store.pool()).await;
    let options = Options::builder().lease(LEASE).build().unwrap();
    let coordinator = Coordinator::new(store.clone(), options);
    let orders_op = coordinator
        .operation::<i64, sqlx::Error>("order.create")
        .unwrap();
    let mut calls = Vec::new();
    for i in 0..TRANSACTIONS {
        let orders_op = orders_op.clone();
        calls.push(tokio::spawn(async move {
            let fp = Fingerprint::builder().field("cart", i).finish().unwrap();
            let answer = in_transaction_with_provenance(
                &orders_op,
                format!("order-{i}"),
                fp,
                move |claim, mut tx| async move {
                    let id = insert_order(&mut tx, &format!("order-{i}")).await?;
                    tokio::time::sleep(HOLDS).await;
                    let held = claim.lease() == LeaseState::Held;
                    Ok((if held { id } else { -1 }, tx))
                },
            )
            .await;
            match answer {
                Ok(answer) => Some((
                    answer.value,
                    matches!(answer.provenance, Provenance::Executed { .. }),
                )),
                Err(_) => None,
            }
        }));
    }
    let plain = coordinator.operation::<u64, String>("mail.send").unwrap();
    let mut plain_calls = Vec::new();
    for i in 0..PLAIN {
        let plain = plain.clone();
        plain_calls.push(tokio::spawn(async move {
            // Spread over the actions' run, when their renewals need the pool.
            tokio::time::sleep(Duration::from_millis(100 * i as u64)).await;
            let fp = Fingerprint::builder().field("mail", i).finish().unwrap();
            plain
                .execute(format!("mail-{i}"), fp, |_claim| async { Ok(1) })
                .await
                .is_ok()
        }));
    }
    let mut load = Load::default();
    for call in calls {
        match call.await.unwrap() {
            Some((id, true)) if id >= 0 => load.held_and_committed += 1,
            Some((_, true)) => load.unconfirmed += 1,
            _ => {}
        }
    }
    for call in plain_calls {
        if call.await.unwrap() {
            load.plain_ok += 1;
        }
    }
    let metrics = coordinator.metrics();
    load.lease_lost = metrics.lease_lost;
    load.failed_open = metrics.failed_open;
    load
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_many_transactional_actions_as_allowed_never_starve_their_leases() {
    let db = TestDb::create().await;
    // The defaults: a pool of 16 for the statements, 16 for the actions' transactions.
    let store = PostgresStore::connect(&db.url()).await.unwrap();
    store.migrate().await.unwrap();
    let load = run_load(store.clone()).await;
    println!("separate pools: {load:?}");
    assert_eq!(load.held_and_committed, TRANSACTIONS, "{load:?}");
    assert_eq!(
        (load.lease_lost, load.failed_open, load.unconfirmed),
        (0, 0, 0),
        "{load:?}"
    );
    assert_eq!(load.plain_ok, PLAIN, "{load:?}");
    assert_eq!(orders(store.pool()).await.len(), TRANSACTIONS);
    assert_eq!(store.stats().unavailable, 0);
}

/// The layout this replaces: actions' transactions on the statements' own pool of 16. The
/// same load leaves the renewals no connection: leases lapse, calls fail open. The check
/// above catches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_on_the_statements_pool_are_caught_starving_the_leases() {
    let db = TestDb::create().await;
    let shared = db.pool(16).await;
    let store = PostgresStore::builder().build(shared);
    store.migrate().await.unwrap();
    let load = run_load(store).await;
    println!("shared pool: {load:?}");
    let starved = load.lease_lost > 0
        || load.failed_open > 0
        || load.unconfirmed > 0
        || load.held_and_committed < TRANSACTIONS
        || load.plain_ok < PLAIN;
    assert!(starved, "the shared pool was not caught starving: {load:?}");
}

/// One source for timeouts: the store's backstop is derived from the coordinator's options
/// (twice the reply deadline), and the default is the one every store uses.
#[tokio::test]
async fn the_command_timeout_is_derived_from_the_coordinators_options() {
    let db = TestDb::create().await;
    let options = Options::builder()
        .reply_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let store = PostgresStore::builder()
        .options(&options)
        .connect_lazy(&db.url())
        .unwrap();
    assert_eq!(store.command_timeout(), Duration::from_millis(600));
    let default = PostgresStore::builder().connect_lazy(&db.url()).unwrap();
    assert_eq!(
        default.command_timeout(),
        idem::store::DEFAULT_COMMAND_TIMEOUT
    );
    assert_eq!(
        idem::store::DEFAULT_COMMAND_TIMEOUT,
        idem::store::command_timeout(&Options::default())
    );
}
