//! A holder in another process, killed (SIGKILL) in the middle of its action, on the real
//! MariaDB: the key stays protected while its lease lasts (an identical request is told
//! "in progress"), then a retry takes it over and runs the action once. The holder's
//! transactional write, uncommitted when it died, was rolled back by the server with its
//! connection: the business table holds the retry's write alone (MODEL.md rules 3 and 11,
//! `T1`).
//!
//! The holder's process is this test binary itself, started again with its arguments in
//! `IDEM_MYSQL_KILLED_HOLDER_ARGS` (hence `harness = false`).

use idem_tests::process;
mod support;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idem::{Coordinator, Error, Fingerprint, InFlightPolicy, Options, StoreFailurePolicy};
use idem_mysql::{MySqlStore, in_transaction};
use process::{ExampleProcess, child_args, run_test, serve};
use support::{TestDb, create_orders, insert_order, orders};

const HOLDER: &str = "IDEM_MYSQL_KILLED_HOLDER_ARGS";
const LEASE: Duration = Duration::from_secs(1);

fn main() {
    if let Some(args) = child_args(HOLDER, "holder") {
        serve(holder(args[1].clone()));
    } else {
        run_test(
            "killed process",
            a_holder_killed_mid_action_is_taken_over_after_its_lease_and_the_action_runs_once(),
        );
    }
}

fn options(policy: InFlightPolicy) -> Options {
    Options::builder()
        .lease(LEASE)
        .in_flight(policy)
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap()
}

fn request() -> Fingerprint {
    Fingerprint::of_bytes(b"order cart-1")
}

/// The holder's process: takes the key, writes its order in the action's transaction,
/// says so, and never finishes.
async fn holder(url: String) -> Result<(), Box<dyn std::error::Error>> {
    let store = MySqlStore::connect(&url).await?;
    let orders_op = Coordinator::new(store, options(InFlightPolicy::Raise))
        .operation::<u64, sqlx::Error>("order.create")?;
    println!("listening");
    in_transaction(&orders_op, "k", request(), |claim, mut tx| async move {
        let id = insert_order(&mut tx, "killed holder").await?;
        let fence = claim.fence().map_or(0, |f| f.get());
        println!("acting under fence {fence}");
        std::io::stdout().flush().ok();
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok((id, tx))
    })
    .await?;
    Ok(())
}

async fn a_holder_killed_mid_action_is_taken_over_after_its_lease_and_the_action_runs_once() {
    let db = TestDb::create().await;
    let store = db.store(8).await;
    create_orders(store.pool()).await;
    let mut child = ExampleProcess::start(HOLDER, &[db.url()], "listening");
    let acting = child.line(Duration::from_secs(20));
    let holder_fence: u64 = acting
        .strip_prefix("acting under fence ")
        .and_then(|fence| fence.parse().ok())
        .unwrap_or_else(|| panic!("{acting}"));
    assert!(holder_fence > 0, "the holder's grant is fenced");
    child.signal("-KILL");
    let status = child.wait();
    assert!(!status.success(), "the holder died: {status:?}");
    let killed = Instant::now();

    // While the dead holder's lease lasts, the key is protected.
    let raise = Coordinator::new(store.clone(), options(InFlightPolicy::Raise))
        .operation::<u64, sqlx::Error>("order.create")
        .unwrap();
    let early = in_transaction(&raise, "k", request(), |_claim, mut tx| async move {
        let id = insert_order(&mut tx, "too early").await?;
        Ok((id, tx))
    })
    .await;
    assert!(matches!(early, Err(Error::InProgress)), "{early:?}");

    // A waiting retry takes the key over once the lease has run out, and runs once.
    let wait = Coordinator::new(store.clone(), options(InFlightPolicy::Wait))
        .operation::<u64, sqlx::Error>("order.create")
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let fences = Arc::new(AtomicUsize::new(0));
    let taker = Arc::clone(&fences);
    let id = in_transaction(&wait, "k", request(), move |claim, mut tx| async move {
        counted.fetch_add(1, Ordering::SeqCst);
        let fence = claim.fence().map_or(0, |f| f.get());
        taker.store(usize::try_from(fence).unwrap_or(0), Ordering::SeqCst);
        let id = insert_order(&mut tx, "retry").await?;
        Ok((id, tx))
    })
    .await
    .expect("the retry takes the key over");
    let took = killed.elapsed();
    assert!(took < LEASE * 3, "taken over {took:?} after the kill");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let taker_fence = fences.load(Ordering::SeqCst) as u64;
    assert!(
        taker_fence > holder_fence,
        "F1: {taker_fence} above {holder_fence}"
    );
    assert_eq!(
        orders(store.pool()).await,
        ["retry"],
        "the killed holder's write rolled back"
    );

    // And the result is replayed from now on, the action not run again.
    let counted = Arc::clone(&runs);
    let again = in_transaction(&wait, "k", request(), move |_claim, mut tx| async move {
        counted.fetch_add(1, Ordering::SeqCst);
        let id = insert_order(&mut tx, "twice").await?;
        Ok((id, tx))
    })
    .await
    .unwrap();
    assert_eq!(again, id);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(orders(store.pool()).await, ["retry"]);
}
