//! The fenced write on the real PostgreSQL (MODEL.md `F1`): a [`FenceGuard`] admits a
//! resource's writes under a fence not below the highest it admitted, in the caller's
//! transaction; and a holder paused past its lease, whose key another caller took over, has
//! its write refused while the new holder's lands.

mod support;

use std::future::Future;
use std::time::Duration;

use idem::{
    Coordinator, Error, Fence, Fingerprint, InFlightPolicy, Key, Operation, Options, Store,
    StoreError, StoreFailurePolicy,
};
use idem_core::record::{Command, Reply};
use idem_postgres::{Admission, FenceGuard, PostgresStore, TableName};
use sqlx::PgPool;
use support::TestDb;
use tokio::sync::oneshot;

fn fence(n: u64) -> Fence {
    Fence::new(n).unwrap()
}

async fn admit(pool: &PgPool, guard: &FenceGuard, resource: &str, n: u64) -> Admission {
    let mut tx = pool.begin().await.unwrap();
    let admission = guard.admit(&mut tx, resource, fence(n)).await.unwrap();
    tx.commit().await.unwrap();
    admission
}

#[tokio::test]
async fn a_write_is_admitted_under_a_fence_not_below_the_highest() {
    let db = TestDb::create().await;
    let pool = db.pool(4).await;
    let guard = FenceGuard::default();
    guard.migrate(&pool).await.unwrap();
    guard.migrate(&pool).await.unwrap();

    assert_eq!(admit(&pool, &guard, "acct-1", 5).await, Admission::Admitted);
    // Lower: a holder granted before the one admitted.
    assert_eq!(
        admit(&pool, &guard, "acct-1", 4).await,
        Admission::Stale { highest: fence(5) }
    );
    // The same: the same holder's write again.
    assert_eq!(admit(&pool, &guard, "acct-1", 5).await, Admission::Admitted);
    assert_eq!(admit(&pool, &guard, "acct-1", 9).await, Admission::Admitted);
    // Resources are apart.
    assert_eq!(admit(&pool, &guard, "acct-2", 1).await, Admission::Admitted);

    // A rollback gives the fence back with the writes it guarded.
    let mut tx = pool.begin().await.unwrap();
    assert_eq!(
        guard.admit(&mut tx, "acct-1", fence(20)).await.unwrap(),
        Admission::Admitted
    );
    tx.rollback().await.unwrap();
    assert_eq!(
        admit(&pool, &guard, "acct-1", 10).await,
        Admission::Admitted
    );

    // While a higher fence's transaction is open, a lower one waits for it, and is refused
    // once it commits.
    let mut newer = pool.begin().await.unwrap();
    assert_eq!(
        guard.admit(&mut newer, "acct-1", fence(12)).await.unwrap(),
        Admission::Admitted
    );
    let stale = tokio::spawn({
        let (pool, guard) = (pool.clone(), guard.clone());
        async move { admit(&pool, &guard, "acct-1", 11).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stale.is_finished(),
        "the lower fence waits for the open one"
    );
    newer.commit().await.unwrap();
    assert_eq!(
        stale.await.unwrap(),
        Admission::Stale { highest: fence(12) }
    );

    // A value that is no fence, written by something else, is below every fence.
    sqlx::query("INSERT INTO idem_fences VALUES ('foreign', -3)")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        admit(&pool, &guard, "foreign", 1).await,
        Admission::Admitted
    );
    let held: i64 = sqlx::query_scalar("SELECT fence FROM idem_fences WHERE resource = 'foreign'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(held, 1);
    // A schema-qualified table of its own name.
    sqlx::query("CREATE SCHEMA ledger")
        .execute(&pool)
        .await
        .unwrap();
    let named = FenceGuard::new(TableName::new("ledger.Fences").unwrap());
    named.migrate(&pool).await.unwrap();
    assert_eq!(admit(&pool, &named, "acct-1", 1).await, Admission::Admitted);
}

/// The holder's store: PostgreSQL, except that renewals never answer, so its lease runs out
/// while its action runs, as a holder paused or cut off past its lease would see it.
struct RenewalsHang(PostgresStore);

impl Store for RenewalsHang {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        if matches!(command, Command::Renew { .. }) {
            std::future::pending::<()>().await;
        }
        self.0.apply(operation, key, command).await
    }

    fn changed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.0.changed(operation, key)
    }
}

#[tokio::test]
async fn a_holder_paused_past_its_lease_has_its_fenced_write_refused() {
    let db = TestDb::create().await;
    let pool = db.pool(8).await;
    support::create_orders(&pool).await;
    let guard = FenceGuard::default();
    guard.migrate(&pool).await.unwrap();
    let options = Options::builder()
        .lease(Duration::from_secs(1))
        .in_flight(InFlightPolicy::Raise)
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap();
    let store = db.store(4).await;
    let holder = Coordinator::new(RenewalsHang(store.clone()), options.clone());
    let taker = Coordinator::new(store, options);
    let request = Fingerprint::of_bytes(b"debit acct-9 100");

    let (granted_tx, granted_rx) = oneshot::channel();
    let (resume_tx, resume_rx) = oneshot::channel::<()>();
    let held = tokio::spawn({
        let (pool, guard) = (pool.clone(), guard.clone());
        async move {
            holder
                .execute("debit", "pay-1", request, move |claim| async move {
                    let fence = claim.fence().expect("PostgreSQL fences its grants");
                    let _ = granted_tx.send(fence);
                    // Paused: the lease runs out and the key is taken over meanwhile.
                    claim.lease_lost().await;
                    let _ = resume_rx.await;
                    let admission =
                        support::fenced_order(&pool, &guard, "acct-9", fence, "holder").await?;
                    Ok::<_, sqlx::Error>(format!("{admission:?}"))
                })
                .await
        }
    });
    let first = granted_rx.await.unwrap();
    let (second, taken) = loop {
        let (pool, guard) = (pool.clone(), guard.clone());
        let done = taker
            .execute("debit", "pay-1", request, move |claim| async move {
                let fence = claim.fence().expect("PostgreSQL fences its grants");
                let admission =
                    support::fenced_order(&pool, &guard, "acct-9", fence, "taker").await?;
                Ok::<_, sqlx::Error>((fence.get(), format!("{admission:?}")))
            })
            .await;
        match done {
            Err(Error::InProgress) => tokio::time::sleep(Duration::from_millis(50)).await,
            other => break other.unwrap(),
        }
    };
    assert!(
        second > first.get(),
        "the takeover's fence {second} above {first:?}"
    );
    assert_eq!(taken, "Admitted");

    // The holder resumes and writes under its old fence: refused, nothing written.
    resume_tx.send(()).unwrap();
    let stale = held.await.unwrap();
    match stale {
        Ok(answer) => assert_eq!(
            answer,
            format!(
                "{:?}",
                Admission::Stale {
                    highest: fence(second)
                }
            )
        ),
        Err(other) => panic!("{other:?}"),
    }
    assert_eq!(support::orders(&pool).await, ["taker"]);
}
