//! Holders in another process, paused (SIGSTOP) past their lease and resumed, against the
//! fenced write on the real PostgreSQL (MODEL.md `F1`): while they are stopped, this process
//! takes every key over and debits under its own, higher, fences; resumed, every holder's
//! debit is refused, and the business table holds no stale write.
//!
//! The holders' process is this test binary itself, started again with its arguments in
//! `IDEM_FENCED_HOLDER_ARGS` (hence `harness = false`, as for the http crate's process tests,
//! whose support module this reuses).

use idem_tests::process;
mod support;

use std::time::Duration;

use idem::{Coordinator, Error, Fingerprint, InFlightPolicy, Options, StoreFailurePolicy};
use idem_postgres::{FenceGuard, PostgresStore};
use process::{ExampleProcess, child_args, run_test, serve};
use sqlx::postgres::PgPoolOptions;
use support::TestDb;

const HOLDERS: &str = "IDEM_FENCED_HOLDER_ARGS";
const KEYS: usize = 4;
const LEASE: Duration = Duration::from_secs(1);

fn main() {
    if let Some(args) = child_args(HOLDERS, "holders") {
        serve(holders(args[1].clone()));
    } else {
        run_test(
            "fenced processes",
            holders_paused_past_their_lease_write_nothing_stale(),
        );
    }
}

fn options() -> Options {
    Options::builder()
        .lease(LEASE)
        .in_flight(InFlightPolicy::Raise)
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap()
}

fn request(i: usize) -> Fingerprint {
    Fingerprint::of_bytes(format!("debit acct-{i} 100").as_bytes())
}

/// The holders' process: takes every key, says so, and once each lease is no longer
/// confirmed (the process was paused past it), debits under its grant's fence and prints
/// what the guard answered.
async fn holders(url: String) -> Result<(), Box<dyn std::error::Error>> {
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&url)
        .await?;
    let store = PostgresStore::builder().build(pool.clone());
    let coordinator = Coordinator::new(store, options());
    let guard = FenceGuard::default();
    println!("holders started");
    let calls: Vec<_> = (0..KEYS)
        .map(|i| {
            let (coordinator, pool, guard) = (coordinator.clone(), pool.clone(), guard.clone());
            tokio::spawn(async move {
                coordinator
                    .execute(
                        "debit",
                        format!("pay-{i}"),
                        request(i),
                        move |claim| async move {
                            let fence = claim.fence().expect("PostgreSQL fences every grant");
                            println!("granted {i} {fence}");
                            claim.lease_lost().await;
                            let admission = support::fenced_order(
                                &pool,
                                &guard,
                                &format!("acct-{i}"),
                                fence,
                                "holder",
                            )
                            .await?;
                            println!("debit {i} {admission:?}");
                            Ok::<_, sqlx::Error>(())
                        },
                    )
                    .await
            })
        })
        .collect();
    for call in calls {
        let _ = call.await;
    }
    println!("holders done");
    Ok(())
}

async fn holders_paused_past_their_lease_write_nothing_stale() {
    let db = TestDb::create().await;
    let pool = db.pool(8).await;
    support::create_orders(&pool).await;
    let guard = FenceGuard::default();
    guard.migrate(&pool).await.unwrap();
    let store = db.store(8).await;
    let holders = ExampleProcess::start(HOLDERS, &[&db.url()], "holders started");
    let mut held = Vec::new();
    for _ in 0..KEYS {
        let line = holders.line(Duration::from_secs(20));
        let mut words = line.split(' ');
        assert_eq!(words.next(), Some("granted"), "{line}");
        let i: usize = words.next().unwrap().parse().unwrap();
        let fence: u64 = words.next().unwrap().parse().unwrap();
        held.push((i, fence));
    }
    // Every holder runs its action; the process stops, past every lease.
    holders.signal("-STOP");
    let taker = Coordinator::new(store, options());
    let mut taken = Vec::new();
    for &(i, fence) in &held {
        let (pool, guard) = (pool.clone(), guard.clone());
        let ours = loop {
            let (pool, guard) = (pool.clone(), guard.clone());
            let done = taker
                .execute(
                    "debit",
                    format!("pay-{i}"),
                    request(i),
                    move |claim| async move {
                        let fence = claim.fence().expect("a fenced grant");
                        let admission = support::fenced_order(
                            &pool,
                            &guard,
                            &format!("acct-{i}"),
                            fence,
                            "taker",
                        )
                        .await?;
                        Ok::<_, sqlx::Error>((fence.get(), format!("{admission:?}")))
                    },
                )
                .await;
            match done {
                Err(Error::InProgress) => tokio::time::sleep(Duration::from_millis(50)).await,
                other => break other.unwrap(),
            }
        };
        assert!(
            ours.0 > fence,
            "key {i}: the takeover's fence {} above {fence}",
            ours.0
        );
        assert_eq!(ours.1, "Admitted");
        taken.push(i);
    }
    // Resumed, every holder sees its lease gone and debits under its old fence: refused.
    holders.signal("-CONT");
    let mut refused = 0;
    for _ in 0..KEYS {
        let line = holders.line(Duration::from_secs(20));
        assert!(line.starts_with("debit "), "{line}");
        if line.contains("Stale") {
            refused += 1;
        }
    }
    println!("{KEYS} holders paused past their lease: {refused} stale debits refused");
    assert_eq!(refused, KEYS);
    assert_eq!(support::orders(&pool).await, vec!["taker"; KEYS]);
    assert_eq!(taken.len(), KEYS);
}
