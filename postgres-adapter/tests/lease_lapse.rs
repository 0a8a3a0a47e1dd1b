//! A lease that lapses while PostgreSQL does not answer the holder (MODEL.md, "Counting the
//! lease on the caller's clock"): the holder's `Claim::lease_lost()` fires on its own clock,
//! before another caller, on connections of its own, is granted the key.
//!
//! The holder's backend processes are stopped (`SIGSTOP`), and so is the postmaster of a
//! private server, so that the holder cannot open another connection; the taker's
//! connections, opened before, keep working, so it takes the key the moment the server's
//! clock frees it. The server's `clock_timestamp()` and this process's wall clock are the
//! same host's clock, so the instants compare to the millisecond.

mod support;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{
    Claim, Coordinator, Error, Fingerprint, InFlightPolicy, Key, LeaseState, Operation, Options,
    Provenance, Store, StoreFailurePolicy,
};
use idem_core::{Command, Record, Reply};
use idem_postgres::PostgresStore;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use support::{PrivateServer, TestDb};
use tokio::sync::oneshot;

const OP: &str = "export.run";
const KEY: &str = "lapse-1";
const LEASE: Duration = Duration::from_secs(2);
/// How the holder's connections name themselves, so the test can find their backends.
const HOLDER_APP: &str = "idem-lapse-holder";

/// Microseconds since the Unix epoch on this host's wall clock, which the server's
/// `clock_timestamp()` reads too.
fn unix_us(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_bytes(b"export 2026-12")
}

/// What the holder's action saw of its lease.
#[derive(Debug)]
struct Lapse {
    /// When `lease_lost()` resolved (wall clock, µs).
    fired_us: u64,
    /// A bound on the instant the claim's view turned from `Held` (wall clock, µs): the
    /// claim's `lease_left()` read after its last confirmed renewal, added to the wall
    /// clock read just after.
    turned_by_us: u64,
    /// What the claim said when the future resolved.
    at_fire: (LeaseState, Option<Duration>),
}

/// The holder's action: signals `started`, watches its lease, and once `lease_lost()` fires,
/// reports what it saw on `lapsed` and goes on until `taken`, so that its complete meets the
/// taker's record.
async fn watch_the_lease(
    claim: Claim,
    started: oneshot::Sender<()>,
    lapsed: oneshot::Sender<Lapse>,
    taken: oneshot::Receiver<()>,
) -> Result<String, String> {
    let _ = started.send(());
    let lost = claim.lease_lost();
    tokio::pin!(lost);
    let (mut turned_by_us, mut last_left) = (u64::MAX, Duration::ZERO);
    let fired_us = loop {
        tokio::select! {
            biased;
            () = &mut lost => break unix_us(SystemTime::now()),
            () = tokio::time::sleep(Duration::from_millis(2)) => {
                let Some(left) = claim.lease_left().filter(|l| !l.is_zero()) else {
                    continue;
                };
                let bound =
                    unix_us(SystemTime::now()) + u64::try_from(left.as_micros()).unwrap_or(u64::MAX);
                // A confirmed renewal moves the turn later: start again from it.
                turned_by_us = if left > last_left {
                    bound
                } else {
                    turned_by_us.min(bound)
                };
                last_left = left;
            }
        }
    };
    let at_fire = (claim.lease(), claim.lease_left());
    let _ = lapsed.send(Lapse {
        fired_us,
        turned_by_us,
        at_fire,
    });
    let _ = tokio::time::timeout(Duration::from_secs(60), taken).await;
    Ok("holder".to_owned())
}

/// Another caller tries to take the key over until it runs its action; returns when its
/// reservation was granted, on the server's clock (ms since the epoch), read from its record.
async fn take_over(coordinator: &Coordinator<PostgresStore>) -> u64 {
    let (operation, key) = (Operation::new(OP).unwrap(), Key::new(KEY).unwrap());
    let store = coordinator.store().clone();
    loop {
        let (store, operation, key) = (store.clone(), operation.clone(), key.clone());
        let answer = coordinator
            .execute_with_provenance(OP, KEY, fingerprint(), move |_claim| async move {
                match store.apply(&operation, &key, Command::Read).await {
                    Ok(Reply::Read(Some(Record::Pending { lease_until, .. }))) => {
                        let lease = u64::try_from(LEASE.as_millis()).unwrap();
                        Ok(lease_until.as_millis() - lease)
                    }
                    other => Err(format!("the taker's own record: {other:?}")),
                }
            })
            .await;
        match answer {
            Ok(answer) if answer.provenance.executed() => return answer.value,
            Err(Error::InProgress | Error::StoreUnavailable(_)) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            other => panic!("the taker got {other:?}"),
        }
    }
}

/// Sends `signal` (`STOP`, `CONT`) to a process of this test's private server.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Processes stopped by this test, continued (last stopped first) when this drops, also when
/// the test fails.
#[derive(Default)]
struct Stopped(Vec<u32>);

impl Stopped {
    fn stop(&mut self, pid: u32) {
        signal(pid, "STOP");
        self.0.push(pid);
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for pid in self.0.drain(..).rev() {
            signal(pid, "CONT");
        }
    }
}

/// The parent of a process: a backend's is its server's postmaster.
fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // `pid (comm) state ppid ...`: the command may hold spaces, so count from its end.
    let after = &stat[stat.rfind(')').expect("a stat line") + 1..];
    after
        .split_whitespace()
        .nth(1)
        .and_then(|ppid| ppid.parse().ok())
        .expect("a parent pid")
}

/// The backends serving the holder's connections.
async fn holder_backends(pool: &PgPool) -> Vec<u32> {
    let pids: Vec<i32> =
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name = $1")
            .bind(HOLDER_APP)
            .fetch_all(pool)
            .await
            .expect("list the holder's backends");
    pids.into_iter()
        .map(|pid| u32::try_from(pid).unwrap())
        .collect()
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .unwrap_or_else(|_| panic!("{what} took over a minute"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_backend_stops_sees_its_lease_go_before_the_key_is_taken() {
    let server = PrivateServer::start(&[]);
    let db = TestDb::create_on(&server.url("postgres")).await;
    // The taker's connections are all open before anything stops.
    let taker_pool = PgPoolOptions::new()
        .max_connections(4)
        .min_connections(4)
        .connect_with(db.options())
        .await
        .expect("the taker's pool");
    let open: Vec<_> = open_connections(&taker_pool, 4).await;
    drop(open);
    let taker_store = PostgresStore::builder().build(taker_pool.clone());
    taker_store.migrate().await.expect("migrate");
    // The holder on one connection of its own.
    let holder_pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(db.options().application_name(HOLDER_APP))
        .await
        .expect("the holder's pool");
    let holding = Coordinator::new(
        PostgresStore::builder().build(holder_pool),
        Options::builder().lease(LEASE).build().unwrap(),
    );
    let taking = Coordinator::new(
        taker_store,
        Options::builder()
            .lease(LEASE)
            .in_flight(InFlightPolicy::Raise)
            .on_store_failure(StoreFailurePolicy::FailClosed)
            .build()
            .unwrap(),
    );

    let (started, started_rx) = oneshot::channel();
    let (lapsed, lapsed_rx) = oneshot::channel();
    let (taken, taken_rx) = oneshot::channel();
    let call = {
        let holding = holding.clone();
        tokio::spawn(async move {
            holding
                .execute_with_provenance(OP, KEY, fingerprint(), move |claim| {
                    watch_the_lease(claim, started, lapsed, taken_rx)
                })
                .await
        })
    };
    within("the holder's start", started_rx).await.unwrap();
    // Mid-action, after a renewal or two were confirmed, the holder's server stops
    // answering it: the postmaster first (no new connection for the holder), then its
    // backend. The server never refuses a renewal; it only stops answering.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let backends = holder_backends(&taker_pool).await;
    assert!(!backends.is_empty(), "the holder has a backend");
    let mut stopped = Stopped::default();
    stopped.stop(parent_of(backends[0]));
    tokio::time::sleep(Duration::from_millis(100)).await;
    for pid in holder_backends(&taker_pool).await {
        stopped.stop(pid);
    }
    let granted_ms = within("the takeover", take_over(&taking)).await;
    let lapse = within("the lapse", lapsed_rx).await.unwrap();
    drop(stopped);
    let _ = taken.send(());
    let outcome = within("the holder's end", call).await.unwrap().unwrap();

    let granted_us = granted_ms * 1_000;
    eprintln!(
        "the holder's lease_lost() fired {} us, and its view had turned at least {} us, \
         before PostgreSQL granted the key to the taker",
        granted_us.saturating_sub(lapse.fired_us),
        granted_us.saturating_sub(lapse.turned_by_us)
    );
    assert!(
        lapse.turned_by_us < granted_us,
        "the view turned by {} us, the key was granted at {granted_us} us",
        lapse.turned_by_us
    );
    assert!(
        lapse.fired_us < granted_us,
        "lease_lost() fired at {} us, the key was granted at {granted_us} us",
        lapse.fired_us
    );
    assert_eq!(
        lapse.at_fire,
        (LeaseState::Unconfirmed, Some(Duration::ZERO))
    );
    assert!(
        matches!(
            outcome.provenance,
            Provenance::Executed {
                lease_lost: true,
                ..
            }
        ),
        "{:?}",
        outcome.provenance
    );
    drop(db);
    drop(server);
}

/// Holds `n` connections of `pool` at once (so that many are open), and returns them.
async fn open_connections(
    pool: &PgPool,
    n: usize,
) -> Vec<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(pool.acquire().await.expect("a connection of the taker"));
    }
    held
}
