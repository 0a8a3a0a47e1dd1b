//! A lease that lapses while Redis does not answer the holder (MODEL.md, "Counting the lease
//! on the caller's clock"): the holder's `Claim::lease_lost()` fires on its own clock, before
//! another caller, on its own connection, is granted the key.
//!
//! Two ways the store stops answering: the holder's link stalls (a proxy holds its bytes)
//! while the other caller reaches Redis all along, so the takeover comes the moment Redis
//! frees the key, and the instants can be compared to the millisecond (Redis's `TIME` and
//! this process's wall clock are the same host's clock); and the whole server is stopped
//! (`SIGSTOP`), so nobody is answered until it continues.

mod support;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::{
    Claim, Coordinator, Error, Fingerprint, InFlightPolicy, Key, LeaseState, Operation, Options,
    Provenance, Store, StoreFailurePolicy,
};
use idem_core::{Command, Record, Reply};
use idem_redis::RedisStore;
use support::RedisServer;
use support::proxy::Proxy;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const OP: &str = "export.run";
const KEY: &str = "lapse-1";
const LEASE: Duration = Duration::from_secs(2);

/// Microseconds since the Unix epoch on this host's wall clock, which Redis's `TIME` reads
/// too.
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

/// Runs the holder's call: its action signals `started`, watches its lease, and once
/// `lease_lost()` fires, reports what it saw on `lapsed` and goes on until `taken` (as an
/// action that cannot stop at once would), so that its complete meets the taker's record.
fn holder<S: Store + Clone>(
    coordinator: Coordinator<S>,
    started: oneshot::Sender<()>,
    lapsed: oneshot::Sender<Lapse>,
    taken: oneshot::Receiver<()>,
) -> JoinHandle<Result<idem::Answer<String>, Error<String>>> {
    tokio::spawn(async move {
        coordinator
            .execute_with_provenance(OP, KEY, fingerprint(), move |claim: Claim| async move {
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
                            let bound = unix_us(SystemTime::now())
                                + u64::try_from(left.as_micros()).unwrap_or(u64::MAX);
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
            })
            .await
    })
}

/// Another caller tries to take the key over until it runs its action; returns when its
/// reservation was granted, on Redis's clock (ms since the epoch), read from its record.
async fn take_over(coordinator: &Coordinator<RedisStore>) -> u64 {
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

/// The taker: 409 at once while the key is held, and nothing run while the store does not
/// answer, so that it only ever runs under its own grant.
fn taker_options() -> Options {
    Options::builder()
        .lease(LEASE)
        .in_flight(InFlightPolicy::Raise)
        .on_store_failure(StoreFailurePolicy::FailClosed)
        .build()
        .unwrap()
}

fn holder_options() -> Options {
    Options::builder().lease(LEASE).build().unwrap()
}

/// Sends `signal` (`STOP`, `CONT`) to a process of this test's own.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// A process stopped by this test, continued when this drops (also when the test fails).
struct Stopped(u32);

impl Stopped {
    fn stop(pid: u32) -> Self {
        signal(pid, "STOP");
        Self(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .unwrap_or_else(|_| panic!("{what} took over a minute"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_link_stalls_sees_its_lease_go_before_redis_frees_the_key() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    // The holder reaches Redis through the proxy; the taker on a connection of its own.
    let holding = Coordinator::new(
        RedisStore::connect(&proxy.url()).await.unwrap(),
        holder_options(),
    );
    let taking = Coordinator::new(
        RedisStore::connect(&server.url()).await.unwrap(),
        taker_options(),
    );
    let (started, started_rx) = oneshot::channel();
    let (lapsed, lapsed_rx) = oneshot::channel();
    let (taken, taken_rx) = oneshot::channel();
    let call = holder(holding.clone(), started, lapsed, taken_rx);
    within("the holder's start", started_rx).await.unwrap();
    // Mid-action, after a renewal or two were confirmed, the link stalls: the holder's
    // renewals go unanswered, and Redis never refuses them.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    proxy.stall();
    let granted_ms = within("the takeover", take_over(&taking)).await;
    let lapse = within("the lapse", lapsed_rx).await.unwrap();
    let _ = taken.send(());
    proxy.resume();
    let outcome = within("the holder's end", call).await.unwrap().unwrap();

    let granted_us = granted_ms * 1_000;
    eprintln!(
        "the holder's lease_lost() fired {} us, and its view had turned at least {} us, \
         before Redis granted the key to the taker",
        granted_us.saturating_sub(lapse.fired_us),
        granted_us.saturating_sub(lapse.turned_by_us)
    );
    // The instant the claim's view turned leads Redis's own lease end, by construction.
    assert!(
        lapse.turned_by_us < granted_us,
        "the view turned by {} us, the key was granted at {granted_us} us",
        lapse.turned_by_us
    );
    // And the future fired before the takeover.
    assert!(
        lapse.fired_us < granted_us,
        "lease_lost() fired at {} us, the key was granted at {granted_us} us",
        lapse.fired_us
    );
    assert_eq!(
        lapse.at_fire,
        (LeaseState::Unconfirmed, Some(Duration::ZERO))
    );
    // The holder's complete met the taker's record: its outcome says the lease was lost.
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_redis_is_stopped_sees_its_lease_go_before_anyone_takes_the_key() {
    let server = RedisServer::start();
    let holding = Coordinator::new(
        RedisStore::connect(&server.url()).await.unwrap(),
        holder_options(),
    );
    let taking = Coordinator::new(
        RedisStore::connect(&server.url()).await.unwrap(),
        taker_options(),
    );
    let (started, started_rx) = oneshot::channel();
    let (lapsed, lapsed_rx) = oneshot::channel();
    let (taken, taken_rx) = oneshot::channel();
    let call = holder(holding.clone(), started, lapsed, taken_rx);
    within("the holder's start", started_rx).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // The server stops answering everyone. The taker keeps trying (each try ends
    // StoreUnavailable, fail-closed); the server continues two leases later.
    let stopped = Stopped::stop(server.pid().expect("the server's pid"));
    let taker = tokio::spawn(async move { take_over(&taking).await });
    tokio::time::sleep(2 * LEASE).await;
    let continued_us = unix_us(SystemTime::now());
    drop(stopped);
    let granted_ms = within("the takeover", taker).await.unwrap();
    let lapse = within("the lapse", lapsed_rx).await.unwrap();
    let _ = taken.send(());
    let outcome = within("the holder's end", call).await.unwrap().unwrap();

    // The future fired while Redis was stopped, never waiting for an answer, so before any
    // grant could be made.
    assert!(
        lapse.fired_us < continued_us,
        "lease_lost() fired at {} us, Redis continued at {continued_us} us",
        lapse.fired_us
    );
    assert!(lapse.fired_us < granted_ms * 1_000);
    assert!(lapse.turned_by_us < continued_us);
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
}
