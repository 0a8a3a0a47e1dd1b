//! Faults on a real Redis: the server killed, the server restarted, a stalled link, and a
//! reply lost after the server applied a reserve. Callers are `idem_core::Attempt`s driven
//! by the harness's minimal driver.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use idem::{Store, StoreError};
use idem_core::record::{Command, CommandKind, Reply};
use idem_core::{
    ActionResult, Attempt, Body, Execution, Fingerprint, Key, Operation, Options, Outcome,
    OwnerToken, Protection, Record, Recording, StoreFailurePolicy,
};
use idem_redis::{DEFAULT_COMMAND_TIMEOUT, RedisStore, codec};
use redis::AsyncCommands;
use support::attempt::drive;
use support::proxy::Proxy;
use support::{RedisServer, raw_command};

/// How long the attempts here await a store reply (the core's `reply_timeout`).
const REPLY_TIMEOUT: Duration = Duration::from_millis(200);

/// The attempts' lease.
const LEASE: Duration = Duration::from_secs(5);

fn options(on_failure: StoreFailurePolicy) -> Options {
    Options::builder()
        .on_store_failure(on_failure)
        .lease(LEASE)
        .reply_timeout(REPLY_TIMEOUT)
        .backoff_initial(Duration::from_millis(5))
        .backoff_max(Duration::from_millis(20))
        .build()
        .unwrap()
}

fn attempt(key: &str, owner: u128, on_failure: StoreFailurePolicy) -> Attempt {
    Attempt::new(
        Operation::new("payment.charge").unwrap(),
        Key::new(key).unwrap(),
        Fingerprint::of_bytes(b"charge 100"),
        OwnerToken::from_u128(owner),
        owner as u64,
        options(on_failure),
        idem_core::Timestamp::ZERO,
    )
}

/// An action that counts its effects, like a card statement.
fn charge(effects: &Arc<AtomicU32>) -> impl AsyncFnOnce() -> ActionResult + use<> {
    let effects = effects.clone();
    async move || {
        let n = effects.fetch_add(1, Ordering::SeqCst) + 1;
        ActionResult::Succeeded(Body::new(format!("ch_{n}").into_bytes()))
    }
}

/// A store whose only connection is the command connection (no watch subscription), so
/// that a proxy's faults hit the commands under test. Its per-command timeout is the
/// default backstop: the attempts' reply deadlines decide.
async fn store_at(url: &str) -> RedisStore {
    RedisStore::builder()
        .watch(false)
        .connect_timeout(REPLY_TIMEOUT)
        .connect(url)
        .await
        .unwrap()
}

fn executed_under_reservation(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Executed(Execution {
            protection: Protection::Reserved,
            record: Recording::Stored,
            lease_lost: false,
        })
    )
}

#[tokio::test]
async fn a_killed_server_fails_open_or_closed_as_configured() {
    let mut server = RedisServer::start();
    let store = store_at(&server.url()).await;
    let effects = Arc::new(AtomicU32::new(0));

    let (outcome, seen) = drive(
        &store,
        attempt("before", 1, StoreFailurePolicy::FailOpen),
        charge(&effects),
    )
    .await;
    assert!(executed_under_reservation(&outcome), "{outcome:?}");
    assert_eq!(seen.store_errors, 0);

    server.kill();

    // Fail-open: the action runs unprotected, and the outcome says so.
    let (outcome, seen) = drive(
        &store,
        attempt("open", 2, StoreFailurePolicy::FailOpen),
        charge(&effects),
    )
    .await;
    assert!(
        matches!(
            outcome,
            Outcome::Executed(Execution {
                protection: Protection::FailedOpen,
                record: Recording::Unknown,
                ..
            })
        ),
        "{outcome:?}"
    );
    assert_eq!(seen.runs, 1);
    // Every try of the reserve and of the complete failed (refused, or given up at the
    // attempt's reply deadline), and each was retried as the attempt says.
    let tries = 1 + options(StoreFailurePolicy::FailOpen).store_retries();
    assert_eq!(seen.store_errors + seen.timed_out, 2 * tries, "{seen:?}");
    assert_eq!(effects.load(Ordering::SeqCst), 2);
    let open_errors = seen.store_errors;

    // Fail-closed: nothing runs.
    let (outcome, seen) = drive(
        &store,
        attempt("closed", 3, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert_eq!(outcome, Outcome::StoreUnavailable);
    assert_eq!(seen.runs, 0);
    assert_eq!(effects.load(Ordering::SeqCst), 2);

    assert_eq!(seen.store_errors + seen.timed_out, tries, "{seen:?}");

    // The store counted every failure it answered (a command dropped at the attempt's
    // deadline never answered).
    let stats = store.stats();
    assert_eq!(
        stats.unavailable,
        u64::from(open_errors + seen.store_errors),
        "{stats:?}"
    );
    assert_eq!(stats.corrupt, 0);
}

#[tokio::test]
async fn a_restarted_server_is_reached_again_by_the_same_store() {
    let mut server = RedisServer::start();
    let store = store_at(&server.url()).await;
    let effects = Arc::new(AtomicU32::new(0));
    let (outcome, _) = drive(
        &store,
        attempt("k", 1, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert!(executed_under_reservation(&outcome), "{outcome:?}");

    server.restart();

    // The connection manager reconnects in the background; the first commands after the
    // restart may fail (outcome unknown), then the same store answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let op = Operation::new("payment.charge").unwrap();
    let key = Key::new("k").unwrap();
    let reply = loop {
        match store.apply(&op, &key, Command::Read).await {
            Ok(reply) => break reply,
            Err(error) => {
                assert!(error.is_outcome_unknown(), "{error}");
                assert!(Instant::now() < deadline, "no reconnect: {error}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // Without persistence the restart lost the record (MODEL.md, "Redis"): a retry of the
    // same request runs the effect a second time.
    assert_eq!(reply, Reply::Read(None));
    let (outcome, _) = drive(
        &store,
        attempt("k", 2, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert!(executed_under_reservation(&outcome), "{outcome:?}");
    assert_eq!(effects.load(Ordering::SeqCst), 2);
}

/// A stalled link: the attempt gives each command up at its own reply deadline (rule 12),
/// far sooner than the store's backstop would, retries it as its policy says, and ends
/// (fail-closed here) with nothing run. The stalled reserves still reach the server once
/// the link recovers (a timed-out command may still run), and a retry with the same token
/// gets that reservation (I11).
#[tokio::test]
async fn a_stalled_link_is_cut_short_by_the_command_timeout() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let store = store_at(&proxy.url()).await;
    assert_eq!(store.command_timeout(), DEFAULT_COMMAND_TIMEOUT);
    let op = Operation::new("payment.charge").unwrap();
    let key = Key::new("k").unwrap();
    let effects = Arc::new(AtomicU32::new(0));
    // Load the scripts first: a stalled EVALSHA of an unknown script would only come back
    // NOSCRIPT.
    let (outcome, _) = drive(
        &store,
        attempt("warm-up", 1, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert!(executed_under_reservation(&outcome), "{outcome:?}");

    proxy.stall();
    let stalled = attempt("k", 2, StoreFailurePolicy::FailClosed);
    let tries = 1 + stalled.options().store_retries();
    let started = Instant::now();
    let (outcome, seen) = drive(&store, stalled, charge(&effects)).await;
    let waited = started.elapsed();
    assert_eq!(outcome, Outcome::StoreUnavailable);
    assert_eq!(seen.runs, 0);
    // Every try ended at the attempt's deadline, none at the store's backstop.
    assert_eq!(seen.timed_out, tries, "{seen:?}");
    assert_eq!(seen.store_errors, 0, "{seen:?}");
    assert!(waited >= REPLY_TIMEOUT * tries, "waited {waited:?}");
    // Generous (the machine is shared): the point is that no try waited for the backstop.
    assert!(waited < DEFAULT_COMMAND_TIMEOUT, "waited {waited:?}");

    // The stalled reserve reaches the server once the link recovers. Its retry with the
    // same token gets the reservation (I11).
    proxy.resume();
    let mut conn = server.conn().await;
    let redis_key = store.layout().record_key(&op, &key);
    let deadline = Instant::now() + Duration::from_secs(4);
    let raw: Vec<u8> = loop {
        let raw: Option<Vec<u8>> = conn.get(&redis_key).await.unwrap();
        if let Some(raw) = raw {
            break raw;
        }
        assert!(
            Instant::now() < deadline,
            "the stalled reserve never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The reserve was the fast reserve, whose lease end is the key's expiry.
    let owner = OwnerToken::from_u128(2);
    assert!(
        matches!(codec::decode(&raw), Ok(codec::Stored { owner: o, state: codec::StoredState::Pending { .. }, .. }) if o == owner),
        "a pending record of the stalled caller"
    );
    let retry = Command::Reserve {
        owner,
        fingerprint: Fingerprint::of_bytes(b"charge 100"),
        lease: LEASE,
    };
    let retried = loop {
        match store.apply(&op, &key, retry.clone()).await {
            Ok(reply) => break reply,
            Err(error) => {
                assert!(Instant::now() < deadline, "{error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    assert_eq!(
        retried,
        Reply::Reserved(idem_core::Reservation {
            owner,
            lease_until: None,
            fence: None,
        })
    );
    assert_eq!(effects.load(Ordering::SeqCst), 1, "only the warm-up ran");
}

/// The store's own timeout is a backstop for a command sent with no deadline of its own
/// (here, straight to `Store::apply`): a stalled link still returns, as an unknown outcome.
/// A command sent with `Store::apply_bounded` has no backstop: its caller bounds it.
#[tokio::test]
async fn the_backstop_bounds_a_command_sent_without_a_deadline() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let backstop = Duration::from_millis(300);
    let store = RedisStore::builder()
        .watch(false)
        .command_timeout(backstop)
        .connect(&proxy.url())
        .await
        .unwrap();
    let op = Operation::new("payment.charge").unwrap();
    let reserve = |key: &str| {
        (
            Key::new(key).unwrap(),
            Command::Reserve {
                owner: OwnerToken::from_u128(1),
                fingerprint: Fingerprint::of_bytes(b"a"),
                lease: LEASE,
            },
        )
    };
    let (warm_up, command) = reserve("warm-up");
    store.apply(&op, &warm_up, command).await.unwrap();

    proxy.stall();
    let (key, command) = reserve("k");
    let started = Instant::now();
    let result = store.apply(&op, &key, command).await;
    let waited = started.elapsed();
    assert!(
        matches!(
            &result,
            Err(StoreError::Unavailable {
                command: CommandKind::Reserve,
                ..
            })
        ),
        "{result:?}"
    );
    assert!(result.unwrap_err().is_outcome_unknown());
    assert!(waited >= backstop, "waited {waited:?}");
    // Generous bound (the machine is shared): the point is that the call returns at all.
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");

    // A caller that bounds the command itself (the driver, at the attempt's reply deadline)
    // gets no timer of the store's: the command waits as long as the caller lets it.
    let (key, command) = reserve("k2");
    let bounded = tokio::time::timeout(backstop * 3, store.apply_bounded(&op, &key, command)).await;
    assert!(bounded.is_err(), "{bounded:?}");
    proxy.resume();
}

#[tokio::test]
async fn a_reply_lost_after_the_reserve_applied_is_retried_with_the_same_token() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let store = store_at(&proxy.url()).await;
    let effects = Arc::new(AtomicU32::new(0));
    // Load the reserve script first, so the swallowed reply is the reserve's own.
    let (outcome, _) = drive(
        &store,
        attempt("warm-up", 1, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert!(executed_under_reservation(&outcome), "{outcome:?}");

    proxy.cut_after_next_reply();
    let (outcome, seen) = drive(
        &store,
        attempt("k", 2, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert_eq!(proxy.swallowed(), 1);
    assert_eq!(seen.store_errors, 1, "only the reserve's reply was lost");
    assert!(executed_under_reservation(&outcome), "{outcome:?}");
    assert_eq!(seen.runs, 1);
    assert_eq!(effects.load(Ordering::SeqCst), 2, "one effect per key");
    assert!(proxy.connections() >= 2, "the store reconnected");
}

/// Asynchronous replication: a reserve the master acknowledged, but had not yet sent to its
/// replica, is gone after the replica is promoted (MODEL.md, "Redis"). The replication link
/// runs through the proxy, which is stalled before the write.
#[tokio::test]
async fn a_failover_can_lose_an_acknowledged_reserve() {
    let mut master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let link = Proxy::start(master.port).await;
    let link_port = link.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &link_port]);
    let on_master = store_at(&master.url()).await;
    let op = Operation::new("payment.charge").unwrap();
    let reserve = |owner: u128| Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(b"a"),
        lease: Duration::from_secs(30),
    };
    let replicated = Key::new("replicated").unwrap();
    let lost = Key::new("lost").unwrap();

    assert!(matches!(
        on_master.apply(&op, &replicated, reserve(1)).await,
        Ok(Reply::Reserved(_))
    ));
    let replicated_key = on_master.layout().record_key(&op, &replicated);
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw_command(replica.port, &format!("EXISTS {replicated_key}")).unwrap_or_default()
        != ":1\r\n"
    {
        assert!(Instant::now() < deadline, "the replica never synchronised");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    link.stall();
    assert!(matches!(
        on_master.apply(&op, &lost, reserve(2)).await,
        Ok(Reply::Reserved(_))
    ));
    master.kill();
    let promoted = raw_command(replica.port, "REPLICAOF NO ONE").unwrap();
    assert!(promoted.starts_with("+OK"), "{promoted}");

    let on_replica = store_at(&replica.url()).await;
    assert!(matches!(
        on_replica.apply(&op, &replicated, Command::Read).await,
        Ok(Reply::Read(Some(Record::Pending { .. })))
    ));
    // The acknowledged reservation is gone: another caller takes the key, and its action
    // would run a second time.
    assert_eq!(
        on_replica.apply(&op, &lost, Command::Read).await.unwrap(),
        Reply::Read(None)
    );
    assert!(matches!(
        on_replica.apply(&op, &lost, reserve(3)).await,
        Ok(Reply::Reserved(r)) if r.owner == OwnerToken::from_u128(3)
    ));
}

/// Fences across a failover (MODEL.md, "Which stores hand out fences"): a reservation the
/// replica received keeps its fence there, and a grant the promoted replica makes, of a key
/// whose acknowledged grant it never received and of a key whose lease ran out on it, is
/// fenced above the grants the old master made. That holds because both servers read one
/// clock here; a replica whose clock runs behind by more than the time between two grants of
/// a key would grant a lower fence, which MODEL.md names as where monotonicity ends.
#[tokio::test]
async fn with_fences_a_promoted_replica_grants_above_the_old_masters_fences() {
    let mut master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    let link = Proxy::start(master.port).await;
    let link_port = link.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &link_port]);
    let fenced_at = |url: String| async move {
        RedisStore::builder()
            .watch(false)
            .fences(true)
            .connect_timeout(REPLY_TIMEOUT)
            .connect(&url)
            .await
            .unwrap()
    };
    let on_master = fenced_at(master.url()).await;
    let op = Operation::new("payment.charge").unwrap();
    let reserve = |owner: u128, lease: Duration| Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(b"a"),
        lease,
    };
    let granted = |reply: Result<Reply, StoreError>, owner: u128| match reply {
        Ok(Reply::Reserved(grant)) if grant.owner == OwnerToken::from_u128(owner) => {
            grant.fence.expect("a fenced grant")
        }
        other => panic!("not granted to {owner}: {other:?}"),
    };
    let (kept, lost) = (Key::new("kept").unwrap(), Key::new("lost").unwrap());
    let kept_lease = Duration::from_millis(1_500);

    let kept_fence = granted(on_master.apply(&op, &kept, reserve(1, kept_lease)).await, 1);
    let kept_key = on_master.layout().record_key(&op, &kept);
    let deadline = Instant::now() + Duration::from_secs(10);
    while raw_command(replica.port, &format!("EXISTS {kept_key}")).unwrap_or_default() != ":1\r\n" {
        assert!(Instant::now() < deadline, "the replica never synchronised");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    link.stall();
    let lost_fence = granted(on_master.apply(&op, &lost, reserve(2, LEASE)).await, 2);
    assert!(lost_fence > kept_fence);
    master.kill();
    let promoted = raw_command(replica.port, "REPLICAOF NO ONE").unwrap();
    assert!(promoted.starts_with("+OK"), "{promoted}");

    let on_replica = fenced_at(replica.url()).await;
    // The replicated reservation is the master's, fence and all.
    match on_replica.apply(&op, &kept, Command::Read).await {
        Ok(Reply::Read(Some(Record::Pending { owner, fence, .. }))) => {
            assert_eq!(owner, OwnerToken::from_u128(1));
            assert_eq!(fence, Some(kept_fence));
        }
        other => panic!("the replicated reservation: {other:?}"),
    }
    // The grant that never reached the replica is lost with its record (I7's failover
    // case); the next grant of that key is fenced above it all the same.
    let regranted = granted(on_replica.apply(&op, &lost, reserve(3, LEASE)).await, 3);
    assert!(regranted > lost_fence, "{regranted:?} after {lost_fence:?}");
    // The replicated lease runs out on the promoted replica's clock; the takeover is fenced
    // above the master's grant.
    tokio::time::sleep(kept_lease).await;
    let taken = granted(on_replica.apply(&op, &kept, reserve(4, LEASE)).await, 4);
    assert!(taken > kept_fence && taken > regranted, "{taken:?}");
    assert_eq!(on_replica.stats().corrupt, 0);
}

/// A service can start while Redis is down: a lazily connected store answers every command
/// `Unavailable` (so calls fail as configured) and works once the server is up.
#[tokio::test]
async fn a_store_built_while_redis_is_down_works_once_it_is_up() {
    let mut server = RedisServer::start();
    server.kill();
    let store = RedisStore::builder()
        .connect_timeout(REPLY_TIMEOUT)
        .connect_lazy(&server.url())
        .unwrap();
    let effects = Arc::new(AtomicU32::new(0));
    let (outcome, seen) = drive(
        &store,
        attempt("k", 1, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert_eq!(outcome, Outcome::StoreUnavailable);
    assert_eq!(seen.runs, 0);

    server.restart();
    let op = Operation::new("payment.charge").unwrap();
    let key = Key::new("k").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(error) = store.apply(&op, &key, Command::Read).await {
        assert!(Instant::now() < deadline, "never connected: {error}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (outcome, _) = drive(
        &store,
        attempt("k", 2, StoreFailurePolicy::FailClosed),
        charge(&effects),
    )
    .await;
    assert!(executed_under_reservation(&outcome), "{outcome:?}");
    assert!(RedisStore::builder().connect_lazy("not a url").is_err());
}
