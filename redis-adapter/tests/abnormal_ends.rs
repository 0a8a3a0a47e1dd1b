//! Abnormal ends on a real Redis never buy a silent second effect (rule 11). Each check is
//! on the card statement ([`support::card`]) and on what Redis holds, and each is shown
//! catching the old, broken behaviour:
//!
//! - a detached call dropped after its charge runs on and is recorded: one charge, and the
//!   retry replays its value (releasing on abandon is caught charging twice);
//! - a panic after the charge is recorded as "outcome unknown" (codec state 6): the panic
//!   reaches the caller, the retry gets `OutcomeUnknown` (releasing on a panic is caught
//!   charging twice);
//! - a key holding a value that is not a record runs nothing under the default, fail-open
//!   options, and the value stays byte for byte (treating it as unavailability is caught
//!   running the action);
//! - an attached call dropped mid-action leaves the key held until its lease ends, counted
//!   as `left_to_lease`; a retry after the lease takes over.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use idem::{
    Answer, Claim, Coordinator, Error, Fingerprint, InFlightPolicy, Key, Operation, Options,
    OwnerToken, Provenance, Store, StoreFailurePolicy, StoredResult,
};
use idem_core::Record;
use idem_core::record::{Command, Reply};
use idem_redis::{RedisStore, codec};
use redis::AsyncCommands;
use support::RedisServer;
use support::broken::CorruptFailsOpen;
use support::card::Card;
use tokio::task::JoinHandle;

const OP: &str = "payment.charge";

/// An action as the coordinator takes it, boxed so that tests can hand over several kinds.
type Action = Box<dyn FnOnce(Claim) -> BoxFuture<'static, Result<String, String>> + Send>;

/// Where the action writes the owner token of the attempt it runs under.
type OwnerSlot = Arc<Mutex<Option<OwnerToken>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `execute`: the call runs on a task of its own.
    Detached,
    /// `execute_attached`: the call runs in the caller's future.
    Attached,
}

fn fingerprint(key: &str) -> Fingerprint {
    Fingerprint::builder()
        .field("order_id", key)
        .field("amount", 100)
        .finish()
        .unwrap()
}

async fn coordinator(server: &RedisServer, options: Options) -> Coordinator<RedisStore> {
    let store = RedisStore::connect(&server.url()).await.unwrap();
    Coordinator::new(store, options)
}

/// The provider of the issue: the charge is recorded the moment the request reaches the
/// card, and the answer comes `answers_after` later.
fn charge_then_answer(card: &Arc<Card>, answers_after: Duration, owner: &OwnerSlot) -> Action {
    let (card, owner) = (Arc::clone(card), Arc::clone(owner));
    Box::new(move |claim: Claim| {
        async move {
            *owner.lock().unwrap() = Some(claim.owner());
            let id = card.charge(claim.key().as_str());
            tokio::time::sleep(answers_after).await;
            Ok(id)
        }
        .boxed()
    })
}

/// Charges, then panics: the effect happened, and the caller never learns its id.
fn charge_then_panic(card: &Arc<Card>) -> Action {
    let card = Arc::clone(card);
    Box::new(move |claim: Claim| {
        async move {
            card.charge(claim.key().as_str());
            tokio::task::yield_now().await;
            panic!("the card network client panicked after the charge");
        }
        .boxed()
    })
}

/// A call of `key` on a task of its own, so that the test can drop it by aborting the task.
fn spawn_call(
    coordinator: &Coordinator<RedisStore>,
    key: &str,
    mode: Mode,
    action: Action,
) -> JoinHandle<Result<Answer<String>, Error<String>>> {
    let (coordinator, key) = (coordinator.clone(), key.to_owned());
    tokio::spawn(async move {
        let fp = fingerprint(&key);
        match mode {
            Mode::Detached => {
                coordinator
                    .execute_with_provenance(OP, &key, fp, action)
                    .await
            }
            Mode::Attached => {
                coordinator
                    .execute_attached_with_provenance(OP, &key, fp, action)
                    .await
            }
        }
    })
}

/// A call of `key` whose action charges at once and answers after `answers_after`, dropped
/// (its task aborted) 10 ms after the charge reached the card. Returns the dropped
/// attempt's owner token.
async fn dropped_10ms_after_the_charge(
    coordinator: &Coordinator<RedisStore>,
    card: &Arc<Card>,
    key: &str,
    mode: Mode,
    answers_after: Duration,
) -> OwnerToken {
    let owner = OwnerSlot::default();
    let call = spawn_call(
        coordinator,
        key,
        mode,
        charge_then_answer(card, answers_after, &owner),
    );
    card.charged(key).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    call.abort();
    let dropped = call.await;
    assert!(
        matches!(&dropped, Err(error) if error.is_cancelled()),
        "the call was still running: {dropped:?}"
    );
    owner.lock().unwrap().expect("the action ran")
}

/// An identical request retried with `key`: its action would charge again.
async fn retry(
    coordinator: &Coordinator<RedisStore>,
    card: &Arc<Card>,
    key: &str,
) -> Result<Answer<String>, Error<String>> {
    let action = charge_then_answer(card, Duration::ZERO, &OwnerSlot::default());
    spawn_call(coordinator, key, Mode::Detached, action)
        .await
        .unwrap()
}

fn names(key: &str) -> (Operation, Key) {
    (Operation::new(OP).unwrap(), Key::new(key).unwrap())
}

/// The record under `key`, as the read script returns it.
async fn read(coordinator: &Coordinator<RedisStore>, key: &str) -> Option<Record> {
    let (operation, key) = names(key);
    match coordinator
        .store()
        .apply(&operation, &key, Command::Read)
        .await
    {
        Ok(Reply::Read(record)) => record,
        other => panic!("read {key}: {other:?}"),
    }
}

/// The raw value under `key`'s record key.
async fn raw(server: &RedisServer, coordinator: &Coordinator<RedisStore>, key: &str) -> Vec<u8> {
    let (operation, key) = names(key);
    let redis_key = coordinator.store().layout().record_key(&operation, &key);
    server.conn().await.get(redis_key).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_call_dropped_after_its_charge_is_recorded_and_the_retry_replays_it() {
    let server = RedisServer::start();
    let payments = coordinator(&server, Options::default()).await;
    let card = Arc::new(Card::default());
    let key = "order-1";
    dropped_10ms_after_the_charge(
        &payments,
        &card,
        key,
        Mode::Detached,
        Duration::from_millis(200),
    )
    .await;
    // Retried at once: the dropped call's action runs on, the retry waits for it and
    // replays its value.
    let answer = retry(&payments, &card, key).await.unwrap();
    assert_eq!(
        (answer.value.as_str(), answer.provenance),
        ("ch_1", Provenance::Replayed)
    );
    assert_eq!(card.one_effect(key), Ok(()));
    let counted = payments.metrics();
    assert_eq!(
        (
            counted.executed,
            counted.replayed,
            counted.abandoned,
            counted.left_to_lease
        ),
        (1, 1, 0, 0)
    );
    // The record holds the first call's value, as its owner completed it.
    let Some(Record::Completed { result, .. }) = read(&payments, key).await else {
        panic!("the dropped call's result is recorded");
    };
    assert_eq!(
        result,
        StoredResult::Value(idem::record::Body::new(b"\"ch_1\""))
    );
}

/// The old behaviour as a deliberately broken caller: whoever drops the call releases the
/// key with the dropped attempt's owner token (the action learned it from its claim). The
/// one-charge check above catches the retry's second charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_on_abandon_is_caught_charging_twice() {
    let server = RedisServer::start();
    let payments = coordinator(&server, Options::default()).await;
    let card = Arc::new(Card::default());
    let key = "order-1";
    let owner = dropped_10ms_after_the_charge(
        &payments,
        &card,
        key,
        Mode::Detached,
        Duration::from_millis(200),
    )
    .await;
    let (operation, k) = names(key);
    let released = payments
        .store()
        .apply(&operation, &k, Command::Release { owner })
        .await
        .unwrap();
    assert_eq!(released, Reply::Released);
    let answer = retry(&payments, &card, key).await.unwrap();
    assert!(answer.provenance.executed(), "{answer:?}");
    let caught = card.one_effect(key).expect_err("charged twice");
    assert!(caught.contains("charged 2 times"), "{caught}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_after_the_charge_is_recorded_and_the_retry_gets_outcome_unknown() {
    let server = RedisServer::start();
    let payments = coordinator(&server, Options::default()).await;
    let card = Arc::new(Card::default());
    for (key, mode) in [
        ("panics-detached", Mode::Detached),
        ("panics-attached", Mode::Attached),
    ] {
        // The panic reaches the caller, here the task that made the call.
        let call = spawn_call(&payments, key, mode, charge_then_panic(&card)).await;
        let payload = call.expect_err("the call panicked").into_panic();
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"the card network client panicked after the charge"),
            "{mode:?}"
        );
        // The retry is told the outcome is unknown, never run again.
        let error = retry(&payments, &card, key).await.unwrap_err();
        assert!(
            matches!(error, Error::OutcomeUnknown),
            "{mode:?}: {error:?}"
        );
        assert_eq!(error.http_status(), Some(500));
        assert!(!error.is_retryable());
        assert_eq!(card.one_effect(key), Ok(()), "{mode:?}");
        // What Redis holds: a completion without a body in state 6.
        let value = raw(&server, &payments, key).await;
        assert_eq!((value.len(), value[3]), (codec::HEADER_LEN, 6), "{mode:?}");
        assert!(
            matches!(
                codec::decode(&value).map(|stored| stored.state),
                Ok(codec::StoredState::Completed(StoredResult::Panicked))
            ),
            "{mode:?}"
        );
    }
    let counted = payments.metrics();
    assert_eq!((counted.panicked, counted.outcome_unknown), (2, 2));
}

/// The old behaviour as a deliberately broken action: a panic counted as a failure, so the
/// key is released. Played by an action that catches its own panic and fails; the
/// one-charge check above catches the retry's second charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_on_a_panic_is_caught_charging_twice() {
    let server = RedisServer::start();
    let payments = coordinator(&server, Options::default()).await;
    let card = Arc::new(Card::default());
    let key = "order-1";
    let swallowing: Action = {
        let card = Arc::clone(&card);
        Box::new(move |claim: Claim| {
            async move {
                card.charge(claim.key().as_str());
                let panicked = std::panic::catch_unwind(|| panic!("swallowed"));
                panicked
                    .map(|()| String::new())
                    .map_err(|_| "the card network client panicked".to_owned())
            }
            .boxed()
        })
    };
    let failed = spawn_call(&payments, key, Mode::Detached, swallowing)
        .await
        .unwrap();
    assert!(matches!(failed, Err(Error::Action(_))), "{failed:?}");
    let answer = retry(&payments, &card, key).await.unwrap();
    assert!(answer.provenance.executed(), "{answer:?}");
    assert!(card.one_effect(key).is_err());
}

/// Values that are not records, each planted under the record key of `key`.
async fn plant(server: &RedisServer, redis_key: &str, kind: &str) {
    let mut conn = server.conn().await;
    let pending = codec::encode(&Record::Pending {
        owner: OwnerToken::from_u128(1),
        fingerprint: fingerprint("order"),
        lease_until: idem::Timestamp::from_millis(u64::MAX / 4),
        fence: None,
    });
    let panicked = codec::encode(&Record::Completed {
        owner: OwnerToken::from_u128(1),
        fingerprint: fingerprint("order"),
        result: StoredResult::Panicked,
        expires_at: idem::Timestamp::from_millis(u64::MAX / 4),
    });
    let planted: redis::RedisResult<()> = match kind {
        "garbage bytes" => conn.set(redis_key, b"\xff\x00\x13 not a record").await,
        "a hash" => conn.hset(redis_key, "status", "completed").await,
        "a list" => conn.rpush(redis_key, "ch_1").await,
        "a truncated record" => conn.set(redis_key, &pending[..codec::HEADER_LEN - 1]).await,
        // State 6 has no body: bytes after its header are not a record this store wrote.
        "a panicked completion with a body" => {
            conn.set(redis_key, [&panicked[..], &b"\"ch_1\""[..]].concat())
                .await
        }
        other => panic!("unknown kind {other}"),
    };
    planted.unwrap();
}

const CORRUPT: [&str; 5] = [
    "garbage bytes",
    "a hash",
    "a list",
    "a truncated record",
    "a panicked completion with a body",
];

/// What each of `calls` identical calls of every corrupt key ended in, how many actions
/// ran, and whether every value stayed byte for byte.
async fn call_corrupt_keys<S: Store>(
    server: &RedisServer,
    coordinator: &Coordinator<S>,
    layout: &idem_redis::KeyLayout,
    calls: usize,
) -> (Vec<Result<Provenance, Error<String>>>, usize) {
    let card = Arc::new(Card::default());
    let mut conn = server.conn().await;
    let mut answers = Vec::new();
    for kind in CORRUPT {
        let key = format!("corrupt-{}", kind.replace(' ', "-"));
        let (operation, k) = names(&key);
        let redis_key = layout.record_key(&operation, &k);
        plant(server, &redis_key, kind).await;
        let dump = |mut conn: redis::aio::MultiplexedConnection| {
            let redis_key = redis_key.clone();
            async move {
                let dumped: Option<Vec<u8>> = redis::cmd("DUMP")
                    .arg(&redis_key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                dumped.expect("the value is there")
            }
        };
        let before = dump(conn.clone()).await;
        for _ in 0..calls {
            let card = Arc::clone(&card);
            let answer = coordinator
                .execute_with_provenance(OP, &key, fingerprint("order"), move |claim| async move {
                    Ok::<_, String>(card.charge(claim.key().as_str()))
                })
                .await;
            answers.push(answer.map(|answer| answer.provenance));
            assert_eq!(dump(conn.clone()).await, before, "{kind} was changed");
        }
        let ttl: i64 = conn.pttl(&redis_key).await.unwrap();
        assert_eq!(ttl, -1, "{kind} was given an expiry");
    }
    let ran = CORRUPT
        .iter()
        .map(|kind| card.charges(&format!("corrupt-{}", kind.replace(' ', "-"))))
        .sum();
    (answers, ran)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_runs_nothing_under_the_default_options() {
    let server = RedisServer::start();
    let payments = coordinator(&server, Options::default()).await;
    assert_eq!(
        payments.options().on_store_failure(),
        StoreFailurePolicy::FailOpen
    );
    let layout = payments.store().layout().clone();
    let calls = 3;
    let (answers, ran) = call_corrupt_keys(&server, &payments, &layout, calls).await;
    assert_eq!(ran, 0, "an action ran beside a corrupt record");
    assert_eq!(answers.len(), CORRUPT.len() * calls);
    for answer in &answers {
        let Err(error) = answer else {
            panic!("a corrupt record answered {answer:?}");
        };
        let Error::CorruptRecord {
            operation,
            key,
            detail,
        } = error
        else {
            panic!("expected CorruptRecord, got {error:?}");
        };
        assert_eq!(operation.as_str(), OP);
        assert!(key.as_str().starts_with("corrupt-"), "{key}");
        assert!(!detail.is_empty());
        assert_eq!(error.http_status(), Some(500));
        assert!(!error.is_retryable());
    }
    // Never retried, never failed open: one reserve per call, each answered corrupt.
    let counted = payments.metrics();
    assert_eq!(
        (
            counted.corrupt_record,
            counted.failed_open,
            counted.store_errors.total()
        ),
        ((CORRUPT.len() * calls) as u64, 0, 0)
    );
    let stats = payments.store().stats();
    assert_eq!(
        (stats.corrupt, stats.unavailable),
        ((CORRUPT.len() * calls) as u64, 0)
    );
}

/// The old behaviour as a deliberately broken store: a corrupt record reported as
/// unavailability. Under the default, fail-open options the action then runs beside the
/// value; the check above catches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_taken_for_unavailability_is_caught_running_the_action() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let layout = store.layout().clone();
    let broken = Coordinator::new(CorruptFailsOpen(store), Options::default());
    let (answers, ran) = call_corrupt_keys(&server, &broken, &layout, 1).await;
    assert_eq!(ran, CORRUPT.len(), "every call ran its action");
    assert!(
        answers
            .iter()
            .all(|answer| matches!(answer, Ok(Provenance::ExecutedUnprotected { .. }))),
        "{answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_call_dropped_mid_action_leaves_the_key_held_until_its_lease_ends() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(1);
    let options = Options::builder()
        .in_flight(InFlightPolicy::Raise)
        .lease(lease)
        .build()
        .unwrap();
    let payments = coordinator(&server, options).await;
    let card = Arc::new(Card::default());
    let key = "order-1";
    let owner =
        dropped_10ms_after_the_charge(&payments, &card, key, Mode::Attached, lease * 3).await;
    let dropped_at = Instant::now();
    let counted = payments.metrics();
    assert_eq!((counted.abandoned, counted.left_to_lease), (1, 1));

    // The key stays held by the dropped attempt, with its expiry: nothing released it.
    let held = read(&payments, key).await;
    let Some(Record::Pending {
        owner: holder,
        lease_until,
        ..
    }) = held
    else {
        panic!("the dropped call's key is still pending: {held:?}");
    };
    assert_eq!(holder, owner);
    let (operation, k) = names(key);
    let redis_key = payments.store().layout().record_key(&operation, &k);
    let mut conn = server.conn().await;
    let ttl: i64 = conn.pttl(&redis_key).await.unwrap();
    assert!(ttl > 0, "PTTL {ttl}");
    // Within the lease a retry is refused, never run.
    let early = retry(&payments, &card, key).await.unwrap_err();
    assert!(matches!(early, Error::InProgress), "{early:?}");
    // Nobody renews it either: the lease ends where it ended when the call was dropped.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        read(&payments, key).await,
        Some(Record::Pending {
            owner,
            fingerprint: fingerprint(key),
            lease_until,
            fence: None,
        })
    );
    assert_eq!(card.one_effect(key), Ok(()));

    // Redis drops the key at the lease end, not before.
    let gone_at = loop {
        let exists: bool = conn.exists(&redis_key).await.unwrap();
        if !exists {
            let (secs, micros): (u64, u64) =
                redis::cmd("TIME").query_async(&mut conn).await.unwrap();
            break secs * 1000 + micros / 1000;
        }
        assert!(
            dropped_at.elapsed() < lease * 3,
            "the key outlived its lease"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        gone_at >= lease_until.as_millis(),
        "freed at {gone_at} ms, before its lease ended at {lease_until:?}"
    );

    // After the lease the key is free, as after a crash: a retry takes it over and runs.
    // The second charge has its named cause, counted above (`left_to_lease`).
    let taken_over = retry(&payments, &card, key).await.unwrap();
    assert_eq!(
        (taken_over.value.as_str(), taken_over.provenance.executed()),
        ("ch_2", true)
    );
    assert_eq!(card.charges(key), 2);
    assert_eq!(payments.metrics().left_to_lease, 1);
}
