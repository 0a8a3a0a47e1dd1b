//! The store on a real standalone Redis: each transition, server time, the layout, corrupt
//! and foreign values, limits, the script cache, and the record size.

mod support;

use std::time::Duration;

use idem::{Store, StoreError};
use idem_core::record::{Command, Completion, Refusal, Reply, StoredResult};
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken, Record, Timestamp};
use idem_redis::{ConnectError, PrefixError, RedisStore, codec};
use redis::AsyncCommands;
use support::RedisServer;

const LEASE: Duration = Duration::from_secs(30);
const RETENTION: Duration = Duration::from_secs(3600);

fn op(name: &str) -> Operation {
    Operation::new(name).unwrap()
}

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

fn reserve(owner: u128, fp: &[u8]) -> Command {
    Command::Reserve {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(fp),
        lease: LEASE,
    }
}

/// A complete with a body, or (`None`) without one.
fn complete(owner: u128, fp: &[u8], body: Option<&[u8]>) -> Command {
    complete_as(owner, fp, body.map_or(StoredResult::NotStored, value))
}

fn complete_as(owner: u128, fp: &[u8], result: StoredResult) -> Command {
    Command::Complete {
        owner: OwnerToken::from_u128(owner),
        fingerprint: Fingerprint::of_bytes(fp),
        result,
        retention: RETENTION,
    }
}

fn value(bytes: &[u8]) -> StoredResult {
    StoredResult::Value(Body::new(bytes))
}

/// A replay of `result`, as [`unsaid`] leaves a store's reply.
fn replay(result: StoredResult) -> Reply {
    Reply::Replay {
        result,
        remaining: None,
    }
}

/// `reply` with a replay's remaining time taken out, once checked: the single-command
/// reserve leaves it unsaid, and the script says it, within the record's retention.
fn unsaid(reply: Reply) -> Reply {
    match reply {
        Reply::Replay { result, remaining } => {
            if let Some(left) = remaining {
                assert!(
                    !left.is_zero() && left <= Duration::from_secs(24 * 3600),
                    "a replay with {left:?} left"
                );
            }
            replay(result)
        }
        other => other,
    }
}

fn renew(owner: u128) -> Command {
    Command::Renew {
        owner: OwnerToken::from_u128(owner),
        lease: LEASE,
    }
}

fn release(owner: u128) -> Command {
    Command::Release {
        owner: OwnerToken::from_u128(owner),
    }
}

async fn server_now(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1000 + micros / 1000
}

#[tokio::test]
async fn a_key_through_its_life() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (o, k) = (op("payment.charge"), key("order-1"));

    let Ok(Reply::Reserved(mine)) = store.apply(&o, &k, reserve(1, b"a")).await else {
        panic!("a free key is reserved");
    };
    assert_eq!(mine.owner, OwnerToken::from_u128(1));
    // I11: the owner's retried reserve gets the same reservation back.
    assert_eq!(
        store.apply(&o, &k, reserve(1, b"a")).await.unwrap(),
        Reply::Reserved(mine)
    );
    // The holder's lease end: the grant above came from the single-command reserve, which
    // does not read the clock; a read fills it in from the key's expiry.
    let Ok(Reply::Read(Some(Record::Pending { lease_until, .. }))) =
        store.apply(&o, &k, Command::Read).await
    else {
        panic!("the reservation reads back as pending");
    };
    assert_eq!(
        store.apply(&o, &k, reserve(2, b"a")).await.unwrap(),
        Reply::InFlight {
            lease_until: Some(lease_until)
        }
    );
    assert_eq!(
        store.apply(&o, &k, reserve(2, b"other")).await.unwrap(),
        Reply::KeyReuse {
            stored: Fingerprint::of_bytes(b"a")
        }
    );
    // I2: another owner can neither renew, release nor complete.
    for command in [renew(2), release(2), complete(2, b"a", Some(b"x"))] {
        assert_eq!(
            store.apply(&o, &k, command).await.unwrap(),
            Reply::Refused(Refusal::NotOwner)
        );
    }
    let Ok(Reply::Renewed(renewed)) = store.apply(&o, &k, renew(1)).await else {
        panic!("the owner renews");
    };
    assert!(renewed.lease_until >= Some(lease_until), "I10");
    assert_eq!(
        store
            .apply(&o, &k, complete(1, b"a", Some(b"ch_1")))
            .await
            .unwrap(),
        Reply::Completed(Completion::InTime)
    );
    assert_eq!(
        unsaid(store.apply(&o, &k, reserve(3, b"a")).await.unwrap()),
        replay(value(b"ch_1"))
    );
    // I3: a completed record is never changed or removed.
    assert_eq!(
        store
            .apply(&o, &k, complete(1, b"a", Some(b"ch_2")))
            .await
            .unwrap(),
        Reply::Completed(Completion::Repeated)
    );
    for command in [renew(1), release(1)] {
        assert_eq!(
            store.apply(&o, &k, command).await.unwrap(),
            Reply::Refused(Refusal::AlreadyCompleted)
        );
    }
    let Ok(Reply::Read(Some(Record::Completed { result, owner, .. }))) =
        store.apply(&o, &k, Command::Read).await
    else {
        panic!("a completed record reads back");
    };
    assert_eq!(result, value(b"ch_1"));
    assert_eq!(owner, OwnerToken::from_u128(1));
    // Rule 8: the same key under another operation is another record.
    assert!(matches!(
        store.apply(&op("order.cancel"), &k, reserve(4, b"a")).await,
        Ok(Reply::Reserved(_))
    ));
    // One request each, except two for the first "in flight" (the fast reserve hands it to
    // the script, which reads the lease end and marks the record for the waiter) and for each
    // complete the fast complete leaves to the complete script: a stranger's, the holder's on
    // the record the waiter marked, and the holder's repeat.
    assert_eq!(store.stats().commands, 20);

    // A key whose action panicked (rule 11): completed as "outcome unknown", codec state 6,
    // and from then on exactly as completed as a key with a value.
    let panicked = key("order-2");
    assert!(matches!(
        store.apply(&o, &panicked, reserve(5, b"a")).await,
        Ok(Reply::Reserved(_))
    ));
    assert_eq!(
        store
            .apply(&o, &panicked, complete_as(5, b"a", StoredResult::Panicked))
            .await
            .unwrap(),
        Reply::Completed(Completion::InTime)
    );
    let raw: Vec<u8> = server
        .conn()
        .await
        .get(store.layout().record_key(&o, &panicked))
        .await
        .unwrap();
    assert_eq!(
        (raw.len(), raw[3]),
        (codec::HEADER_LEN, 6),
        "state 6, no body"
    );
    // Every identical request, the holder's own retry and a stranger's, is told the outcome
    // is unknown: through the single-command reserve and through the script alike.
    for owner in [5, 6] {
        assert_eq!(
            unsaid(
                store
                    .apply(&o, &panicked, reserve(owner, b"a"))
                    .await
                    .unwrap()
            ),
            replay(StoredResult::Panicked)
        );
        let (reply, _) = store
            .apply_timed(&o, &panicked, reserve(owner, b"a"))
            .await
            .unwrap();
        // The script reads the server's clock, so it says how long the record has left.
        assert!(
            matches!(
                reply,
                Reply::Replay {
                    remaining: Some(_),
                    ..
                }
            ),
            "{reply:?}"
        );
        assert_eq!(unsaid(reply), replay(StoredResult::Panicked));
    }
    assert_eq!(
        store
            .apply(&o, &panicked, reserve(6, b"other"))
            .await
            .unwrap(),
        Reply::KeyReuse {
            stored: Fingerprint::of_bytes(b"a")
        }
    );
    // I3: neither its owner nor anyone else changes it; a repeated complete (even one that
    // says it has a value) is recognised and changes nothing.
    assert_eq!(
        store
            .apply(&o, &panicked, complete_as(5, b"a", StoredResult::Panicked))
            .await
            .unwrap(),
        Reply::Completed(Completion::Repeated)
    );
    assert_eq!(
        store
            .apply(&o, &panicked, complete(5, b"a", Some(b"ch_late")))
            .await
            .unwrap(),
        Reply::Completed(Completion::Repeated)
    );
    for command in [renew(5), release(5)] {
        assert_eq!(
            store.apply(&o, &panicked, command).await.unwrap(),
            Reply::Refused(Refusal::AlreadyCompleted)
        );
    }
    for command in [renew(6), release(6), complete(6, b"a", Some(b"x"))] {
        assert_eq!(
            store.apply(&o, &panicked, command).await.unwrap(),
            Reply::Refused(Refusal::NotOwner)
        );
    }
    let Ok(Reply::Read(Some(Record::Completed { result, owner, .. }))) =
        store.apply(&o, &panicked, Command::Read).await
    else {
        panic!("a panicked completion reads back");
    };
    assert_eq!(
        (result, owner),
        (StoredResult::Panicked, OwnerToken::from_u128(5))
    );
    let unchanged: Vec<u8> = server
        .conn()
        .await
        .get(store.layout().record_key(&o, &panicked))
        .await
        .unwrap();
    assert_eq!(unchanged, raw, "byte for byte");
    assert_eq!(store.stats().unavailable + store.stats().corrupt, 0);
}

#[tokio::test]
async fn release_frees_the_key_and_a_late_complete_is_recorded() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let (o, k) = (op("op"), key("k"));
    store.apply(&o, &k, reserve(1, b"a")).await.unwrap();
    assert_eq!(
        store.apply(&o, &k, release(1)).await.unwrap(),
        Reply::Released
    );
    assert_eq!(
        store.apply(&o, &k, release(1)).await.unwrap(),
        Reply::Refused(Refusal::LeaseLost)
    );
    assert_eq!(
        store.apply(&o, &k, Command::Read).await.unwrap(),
        Reply::Read(None)
    );
    // A complete on a free key records the result (MODEL.md, "Late complete"), without a
    // body when none is given.
    assert_eq!(
        store.apply(&o, &k, complete(1, b"a", None)).await.unwrap(),
        Reply::Completed(Completion::AfterLeaseExpiry)
    );
    assert_eq!(
        unsaid(store.apply(&o, &k, reserve(2, b"a")).await.unwrap()),
        replay(StoredResult::NotStored)
    );
}

#[tokio::test]
async fn time_is_the_servers() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut conn = server.conn().await;
    let (o, k) = (op("op"), key("k"));
    let redis_key = store.layout().record_key(&o, &k);

    // The reply's lease is the server's TIME plus the lease; Redis holds the key that long.
    let before = server_now(&mut conn).await;
    let (reply, now) = store.apply_timed(&o, &k, reserve(1, b"a")).await.unwrap();
    let after = server_now(&mut conn).await;
    assert!((before..=after).contains(&now.as_millis()));
    assert_eq!(
        reply,
        Reply::Reserved(idem_core::Reservation {
            owner: OwnerToken::from_u128(1),
            lease_until: Some(now.saturating_add(LEASE)),
            fence: None,
        })
    );
    let pttl: i64 = conn.pttl(&redis_key).await.unwrap();
    assert!(pttl > 0 && pttl <= 30_000, "PTTL {pttl}");

    // One rule for liveness (layout 2): a record is live exactly while its key exists, and
    // its deadline is the key's expiry. A key without an expiry (an operator's `PERSIST`)
    // holds a record that never ends; both the fast reserve and the script say so.
    let planted = codec::encode_pending(OwnerToken::from_u128(9), Fingerprint::of_bytes(b"a"));
    let _: () = conn.set(&redis_key, &planted).await.unwrap();
    assert_eq!(
        store.apply(&o, &k, reserve(2, b"a")).await.unwrap(),
        Reply::InFlight {
            lease_until: Some(Timestamp::from_millis(codec::MAX_DEADLINE_MS))
        }
    );
    // An expiry changed by hand (`PEXPIRE`) is the record's new deadline, for every path.
    let _: () = conn.pexpire(&redis_key, 60_000).await.unwrap();
    let expiry: i64 = redis::cmd("PEXPIRETIME")
        .arg(&redis_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    // The record is marked now: the fast reserve answers the waiter from its bytes, the
    // script with the new deadline.
    assert_eq!(
        store.apply(&o, &k, reserve(3, b"a")).await.unwrap(),
        Reply::InFlight { lease_until: None }
    );
    assert_eq!(
        store.apply_timed(&o, &k, reserve(3, b"a")).await.unwrap().0,
        Reply::InFlight {
            lease_until: Some(Timestamp::from_millis(u64::try_from(expiry).unwrap() + 1))
        }
    );
    // Expired by hand: gone for every path at once.
    let _: () = conn.pexpire(&redis_key, 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(matches!(
        store.apply(&o, &k, reserve(3, b"a")).await.unwrap(),
        Reply::Reserved(r) if r.owner == OwnerToken::from_u128(3)
    ));
}

/// Redis holds a key exactly while its record is live: the key expires one millisecond
/// before the record's deadline (Redis keeps a key while its clock is at or before the
/// expiry; the record machine drops a record once `now` reaches the deadline). A record's
/// deadline is its key's expiry plus one.
#[tokio::test]
async fn keys_expire_exactly_when_their_records_do() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut conn = server.conn().await;
    let (o, k) = (op("op"), key("k"));
    let redis_key = store.layout().record_key(&o, &k);
    let expiry = |conn: &mut redis::aio::MultiplexedConnection| {
        let redis_key = redis_key.clone();
        let mut conn = conn.clone();
        async move {
            let ms: i64 = redis::cmd("PEXPIRETIME")
                .arg(&redis_key)
                .query_async(&mut conn)
                .await
                .unwrap();
            u64::try_from(ms).expect("the key has an expiry")
        }
    };
    let read = || async {
        let Ok(Reply::Read(Some(record))) = store.apply(&o, &k, Command::Read).await else {
            panic!("a live record");
        };
        record
    };

    // The fast reserve.
    let before = server_now(&mut conn).await;
    let granted = store.apply(&o, &k, reserve(1, b"a")).await.unwrap();
    let after = server_now(&mut conn).await;
    assert_eq!(
        granted,
        Reply::Reserved(idem_core::Reservation {
            owner: OwnerToken::from_u128(1),
            lease_until: None,
            fence: None,
        })
    );
    let reserve_expiry = expiry(&mut conn).await;
    let lease_ms = 30_000;
    assert!((before + lease_ms - 1..=after + lease_ms - 1).contains(&reserve_expiry));
    assert_eq!(
        read().await.expires_at(),
        Timestamp::from_millis(reserve_expiry + 1)
    );

    // A script's write: a renew, then a complete.
    let Ok(Reply::Renewed(renewed)) = store.apply(&o, &k, renew(1)).await else {
        panic!("the owner renews");
    };
    let renewed_until = renewed.lease_until.expect("a renew reads the clock");
    assert_eq!(expiry(&mut conn).await + 1, renewed_until.as_millis());
    store
        .apply(&o, &k, complete(1, b"a", Some(b"ok")))
        .await
        .unwrap();
    let completed = read().await;
    assert_eq!(
        expiry(&mut conn).await + 1,
        completed.expires_at().as_millis()
    );
}

/// A server out of memory (`maxmemory` with `noeviction`) refuses `SET … NX` even where it
/// would not write; the reserve script, which only reads a completed record, still answers:
/// a replay stays a replay, never an unknown outcome a fail-open caller would run again.
#[tokio::test]
async fn a_server_out_of_memory_still_replays() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut conn = server.conn().await;
    let (o, k) = (op("op"), key("k"));
    assert!(matches!(
        store.apply(&o, &k, reserve(1, b"a")).await,
        Ok(Reply::Reserved(_))
    ));
    store
        .apply(&o, &k, complete(1, b"a", Some(b"ch_1")))
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The fast reserve itself is refused.
    let refused: redis::RedisResult<redis::Value> = redis::cmd("SET")
        .arg(store.layout().record_key(&o, &k))
        .arg(codec::encode_pending(
            OwnerToken::from_u128(2),
            Fingerprint::of_bytes(b"a"),
        ))
        .arg("NX")
        .arg("PX")
        .arg(29_999)
        .arg("GET")
        .query_async(&mut conn)
        .await;
    assert_eq!(
        refused.map_err(|e| e.code().map(str::to_owned)),
        Err(Some("OOM".to_owned()))
    );
    assert_eq!(
        unsaid(store.apply(&o, &k, reserve(2, b"a")).await.unwrap()),
        replay(value(b"ch_1"))
    );
    assert_eq!(
        store.apply(&o, &k, reserve(2, b"b")).await.unwrap(),
        Reply::KeyReuse {
            stored: Fingerprint::of_bytes(b"a")
        }
    );
}

/// A lease too long for the single-command reserve goes to the script, which caps its
/// end at the largest deadline a record holds; the longest the fast reserve takes ends below it.
#[tokio::test]
async fn the_longest_leases_stay_readable() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let o = op("op");
    for (name, lease_ms) in [
        ("k1", u64::MAX),
        ("k2", codec::MAX_DEADLINE_MS),
        ("k3", idem_redis::MAX_FAST_RESERVE_LEASE_MS),
    ] {
        let k = key(name);
        let command = Command::Reserve {
            owner: OwnerToken::from_u128(1),
            fingerprint: Fingerprint::of_bytes(b"a"),
            lease: Duration::from_millis(lease_ms),
        };
        assert!(matches!(
            store.apply(&o, &k, command).await,
            Ok(Reply::Reserved(_))
        ));
        let Ok(Reply::Read(Some(record))) = store.apply(&o, &k, Command::Read).await else {
            panic!("a lease of {lease_ms} ms reads back");
        };
        assert!(record.expires_at().as_millis() <= codec::MAX_DEADLINE_MS);
        assert_eq!(
            store
                .apply(&o, &k, complete(1, b"a", Some(b"ok")))
                .await
                .unwrap(),
            Reply::Completed(Completion::InTime)
        );
    }
    assert_eq!(store.stats().corrupt + store.stats().unavailable, 0);
}

/// Values this adapter did not write, each planted with raw commands.
async fn plant_foreign(conn: &mut redis::aio::MultiplexedConnection, redis_key: &str, kind: &str) {
    // Another owner's pending record, so that the fast reserve hands the defective values
    // that still decode to the script.
    let good = codec::encode_pending(OwnerToken::from_u128(9), Fingerprint::of_bytes(b"a"));
    let _: () = conn.del(redis_key).await.unwrap();
    match kind {
        "garbage" => conn.set(redis_key, b"\xff\x00not a record").await.unwrap(),
        "empty string" => conn.set(redis_key, b"").await.unwrap(),
        "json" => conn
            .set(redis_key, r#"{"status":"pending"}"#)
            .await
            .unwrap(),
        "hash" => conn.hset(redis_key, "status", "done").await.unwrap(),
        "list" => conn.rpush(redis_key, "x").await.unwrap(),
        "set" => conn.sadd(redis_key, "x").await.unwrap(),
        "version 3" => {
            let mut bytes = good.clone();
            bytes[2] = 3;
            conn.set(redis_key, bytes).await.unwrap()
        }
        // Layout 1's record, under this layout's key: not read, never rewritten.
        "layout 1" => {
            let mut bytes = b"id\x01\x03".to_vec();
            bytes.extend_from_slice(&good[4..]);
            bytes.extend_from_slice(&u64::MAX.to_be_bytes()[..2]);
            bytes.extend_from_slice(&[0; 6]);
            bytes.extend_from_slice(b"{}");
            conn.set(redis_key, bytes).await.unwrap()
        }
        "unknown state" => {
            let mut bytes = good.clone();
            bytes[3] = 7;
            conn.set(redis_key, bytes).await.unwrap()
        }
        // Layout 1's bare reservation state.
        "state 5" => {
            let mut bytes = good.clone();
            bytes[3] = 5;
            conn.set(redis_key, bytes).await.unwrap()
        }
        "truncated" => conn.set(redis_key, &good[..51]).await.unwrap(),
        "trailing bytes" => {
            let mut bytes = good.clone();
            bytes.push(b'!');
            conn.set(redis_key, bytes).await.unwrap()
        }
        other => panic!("unknown kind {other}"),
    }
}

const FOREIGN: [&str; 12] = [
    "garbage",
    "empty string",
    "json",
    "hash",
    "list",
    "set",
    "version 3",
    "layout 1",
    "unknown state",
    "state 5",
    "truncated",
    "trailing bytes",
];

#[tokio::test]
async fn foreign_values_are_reported_and_never_overwritten() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut conn = server.conn().await;
    let (o, k) = (op("op"), key("k"));
    let redis_key = store.layout().record_key(&o, &k);
    let commands = [
        reserve(1, b"a"),
        complete(1, b"a", Some(b"x")),
        renew(1),
        release(1),
        Command::Read,
    ];
    for kind in FOREIGN {
        plant_foreign(&mut conn, &redis_key, kind).await;
        let before: Vec<u8> = redis::cmd("DUMP")
            .arg(&redis_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        for command in &commands {
            let result = store.apply(&o, &k, command.clone()).await;
            match result {
                Err(StoreError::Corrupt { key, detail }) => {
                    assert_eq!(key, redis_key);
                    assert!(!detail.is_empty());
                }
                other => panic!("{kind} under {}: {other:?}", command.name()),
            }
            let after: Vec<u8> = redis::cmd("DUMP")
                .arg(&redis_key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(before, after, "{kind} was changed by {}", command.name());
        }
    }
    let stats = store.stats();
    assert_eq!(stats.corrupt, (FOREIGN.len() * commands.len()) as u64);
    assert_eq!(stats.unavailable, 0);
}

#[tokio::test]
async fn keys_and_operations_at_their_limits() {
    let server = RedisServer::start();
    let store = RedisStore::builder()
        .prefix("tenant-7:")
        .connect(&server.url())
        .await
        .unwrap();
    let mut conn = server.conn().await;
    // 100 bytes of every operation character; 255 bytes of every visible ASCII character,
    // braces and colons included.
    let op_chars: Vec<char> = ('a'..='z')
        .chain('A'..='Z')
        .chain('0'..='9')
        .chain(['.', '_', '-'])
        .collect();
    let o = op(&op_chars.iter().cycle().take(100).collect::<String>());
    let visible: Vec<char> = ('\x21'..='\x7e').collect();
    let k = key(&visible.iter().cycle().take(255).collect::<String>());
    assert!(Operation::new("x".repeat(101)).is_err());
    assert!(Key::new("x".repeat(256)).is_err());

    let body = vec![0xAB_u8; 1 << 20];
    assert!(matches!(
        store.apply(&o, &k, reserve(1, b"a")).await,
        Ok(Reply::Reserved(_))
    ));
    assert_eq!(
        store
            .apply(&o, &k, complete(1, b"a", Some(&body)))
            .await
            .unwrap(),
        Reply::Completed(Completion::InTime)
    );
    assert_eq!(
        unsaid(store.apply(&o, &k, reserve(2, b"a")).await.unwrap()),
        replay(value(&body))
    );
    let expected = format!("tenant-7:{{}}{o}:{k}");
    assert_eq!(expected.len(), 9 + 2 + 100 + 1 + 255);
    let exists: bool = conn.exists(&expected).await.unwrap();
    assert!(
        exists,
        "the record lives under prefix + '{{}}' + operation + ':' + key"
    );
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert_eq!(keys, vec![expected]);
}

#[tokio::test]
async fn an_empty_script_cache_is_refilled() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut conn = server.conn().await;
    let (o, k) = (op("op"), key("k"));
    store.apply(&o, &k, reserve(1, b"a")).await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The first script sent after the flush is sent again with EVAL, which refills the
    // cache: the next one is an EVALSHA that the server holds.
    assert_eq!(store.stats().script_fallbacks, 0);
    assert_eq!(
        store.apply(&o, &k, release(1)).await.unwrap(),
        Reply::Released
    );
    assert_eq!(store.stats().script_fallbacks, 1);
    assert!(matches!(
        store.apply(&o, &k, reserve(1, b"a")).await,
        Ok(Reply::Reserved(_))
    ));
    assert_eq!(
        store.apply(&o, &k, release(1)).await.unwrap(),
        Reply::Released
    );
    assert_eq!(store.stats().script_fallbacks, 1);
}

#[tokio::test]
async fn a_prefix_with_a_brace_is_refused_at_connect() {
    let server = RedisServer::start();
    for prefix in ["{idem}:", "idem:{", "}"] {
        let refused = RedisStore::builder()
            .prefix(prefix)
            .connect(&server.url())
            .await;
        assert!(
            matches!(&refused, Err(ConnectError::Prefix(PrefixError::Brace { prefix: p })) if p == prefix),
            "{prefix}: {refused:?}"
        );
        let lazy = RedisStore::builder()
            .prefix(prefix)
            .connect_lazy(&server.url());
        assert!(matches!(lazy, Err(ConnectError::Prefix(_))));
    }
}

/// The record's footprint: the value's length is fixed by the codec; `MEMORY USAGE` (key,
/// value and Redis's bookkeeping, allocator rounding included) is printed for the report.
#[tokio::test]
async fn record_size() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut conn = server.conn().await;
    let o = op("payment.charge");
    let pending = key("order-000001");
    let completed = key("order-000002");
    store.apply(&o, &pending, reserve(1, b"a")).await.unwrap();
    store.apply(&o, &completed, reserve(2, b"a")).await.unwrap();
    let body = br#"{"charge":"ch_1"}"#;
    assert_eq!(body.len(), 17);
    store
        .apply(&o, &completed, complete(2, b"a", Some(body)))
        .await
        .unwrap();
    let mut sizes = Vec::new();
    for (k, value_len) in [(&pending, 52), (&completed, 69)] {
        let redis_key = store.layout().record_key(&o, k);
        let len: usize = conn.strlen(&redis_key).await.unwrap();
        assert_eq!(len, value_len);
        let usage: usize = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&redis_key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(usage < 256, "{redis_key}: {usage} bytes");
        sizes.push(usage);
    }
    println!(
        "MEMORY USAGE: pending {} B, completed with a 17-byte body {} B",
        sizes[0], sizes[1]
    );
}

/// Whether `waiter`'s watch on (`o`, `k`) resolves once `writer` applies `command`.
async fn wakes(
    waiter: &RedisStore,
    writer: &RedisStore,
    (o, k): (&Operation, &Key),
    watched: &Key,
    command: Command,
    within: Duration,
) -> bool {
    // The watch starts at the call; it is live, and has read the record (still pending),
    // before the command is sent, so only a notice can wake it.
    let changed = waiter.changed(o, watched);
    tokio::pin!(changed);
    assert!(
        live(waiter, &mut changed).await,
        "woken before the command, or never live"
    );
    writer.apply(o, k, command).await.unwrap();
    tokio::time::timeout(within, changed).await.is_ok()
}

/// Polls `changed` until its store has read the waited-on record once its subscription
/// was live: true, or false if it resolved meanwhile or never got there.
async fn live(waiter: &RedisStore, changed: &mut (impl Future<Output = ()> + Unpin)) -> bool {
    let before = waiter.stats().notice_rechecks;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while waiter.stats().notice_rechecks == before {
        let polled = tokio::time::timeout(Duration::from_millis(5), &mut *changed).await;
        if polled.is_ok() || std::time::Instant::now() > deadline {
            return false;
        }
    }
    true
}

/// `waiter` reserves (`o`, `k`) held by someone else and is told "in flight", which marks
/// the record so that its end is announced.
async fn told_in_flight(waiter: &RedisStore, o: &Operation, k: &Key) {
    let reply = waiter.apply(o, k, reserve(99, b"a")).await.unwrap();
    assert!(matches!(reply, Reply::InFlight { .. }), "{reply:?}");
}

#[tokio::test]
async fn completes_and_releases_wake_waiters_of_their_key() {
    let server = RedisServer::start();
    let waiter = RedisStore::connect(&server.url()).await.unwrap();
    let writer = RedisStore::connect(&server.url()).await.unwrap();
    let o = op("op");
    let (done, failed, other) = (key("done"), key("failed"), key("other"));
    writer.apply(&o, &done, reserve(1, b"a")).await.unwrap();
    writer.apply(&o, &failed, reserve(1, b"a")).await.unwrap();
    let (soon, never) = (Duration::from_secs(2), Duration::from_millis(300));
    // Nobody was told about `quiet`: its complete is not announced (an uncontended call
    // publishes nothing).
    let quiet = key("quiet");
    writer.apply(&o, &quiet, reserve(1, b"a")).await.unwrap();
    let quiet_by_1 = complete(1, b"a", None);
    assert!(!wakes(&waiter, &writer, (&o, &quiet), &quiet, quiet_by_1, never).await);
    assert_eq!(waiter.stats().notices, 0);
    told_in_flight(&waiter, &o, &done).await;
    told_in_flight(&waiter, &o, &failed).await;
    let done_by_1 = complete(1, b"a", None);
    assert!(wakes(&waiter, &writer, (&o, &done), &done, done_by_1, soon).await);
    assert!(wakes(&waiter, &writer, (&o, &failed), &failed, release(1), soon).await);
    assert_eq!(waiter.stats().notices, 2, "each woken by its key's notice");
    // A renewal is not a change; another key's change is not this key's.
    writer.apply(&o, &failed, reserve(2, b"a")).await.unwrap();
    told_in_flight(&waiter, &o, &failed).await;
    assert!(!wakes(&waiter, &writer, (&o, &failed), &failed, renew(2), never).await);
    writer.apply(&o, &other, reserve(5, b"a")).await.unwrap();
    told_in_flight(&waiter, &o, &other).await;
    assert!(!wakes(&waiter, &writer, (&o, &failed), &other, release(2), never).await);
    // The notice of `failed` was not delivered to this store: nobody here waits on it.
    assert_eq!(
        waiter.stats().notices,
        2,
        "a notice of a key nobody waits on"
    );

    // The check catches a writer that does not announce.
    let silent = RedisStore::builder()
        .watch(false)
        .connect(&server.url())
        .await
        .unwrap();
    assert!(!wakes(&waiter, &silent, (&o, &other), &other, release(5), never).await);
}

#[tokio::test]
async fn notices_resume_after_a_restart() {
    let mut server = RedisServer::start();
    let waiter = RedisStore::builder()
        .notice_health_check(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let writer = RedisStore::connect(&server.url()).await.unwrap();
    let o = op("op");
    server.restart();
    // Both stores reconnect, and the waiter's store connects its notices again in the
    // background; a waiter is then woken by a notice itself.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for round in 0.. {
        assert!(
            std::time::Instant::now() < deadline,
            "no notice after the restart"
        );
        let k = key(&format!("after-restart-{round}"));
        if writer.apply(&o, &k, reserve(1, b"a")).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        if waiter.apply(&o, &k, reserve(99, b"a")).await.is_err() {
            continue;
        }
        let notices = waiter.stats().notices;
        let changed = waiter.changed(&o, &k);
        tokio::pin!(changed);
        if !live(&waiter, &mut changed).await {
            continue;
        }
        writer.apply(&o, &k, release(1)).await.unwrap();
        if tokio::time::timeout(Duration::from_millis(500), changed)
            .await
            .is_ok()
            && waiter.stats().notices > notices
        {
            break;
        }
    }
    assert!(waiter.stats().notice_connections_lost >= 1);
}

/// The fence of a grant or renewal, or a panic naming the reply.
fn fence_of(reply: &Reply) -> idem_core::Fence {
    match reply {
        Reply::Reserved(grant) | Reply::Renewed(grant) => grant.fence.expect("a fenced grant"),
        other => panic!("not a grant: {other:?}"),
    }
}

/// How many times the server ran `EVALSHA` so far.
async fn evalshas(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// Whether `server` holds the script whose source is `name`'s in its script cache.
async fn holds_script(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> bool {
    let source = idem_redis::scripts::source(name).unwrap();
    let sha1 = redis::Script::new(&source).get_hash().to_owned();
    let held: Vec<i64> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha1)
        .query_async(conn)
        .await
        .unwrap();
    held == [1]
}

#[tokio::test]
async fn with_fences_a_fresh_call_and_a_replay_never_send_the_reserve_script() {
    // The fenced fast reserve grants a free key, replays a completed one and answers the
    // holder's repeated reserve from the bytes it finds; only "in flight", which marks the
    // record for a waiter, needs the reserve script.
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let store = RedisStore::builder()
        .fences(true)
        .connect(&server.url())
        .await
        .unwrap();
    let (o, k) = (op("payment.charge"), key("fast-fenced"));
    let first = fence_of(&store.apply(&o, &k, reserve(1, b"a")).await.unwrap());
    assert_eq!(
        fence_of(&store.apply(&o, &k, reserve(1, b"a")).await.unwrap()),
        first
    );
    assert!(holds_script(&mut conn, "reserve_fenced").await);
    assert!(!holds_script(&mut conn, "reserve").await);
    assert_eq!(
        store
            .apply(&o, &k, complete(1, b"a", Some(b"ok")))
            .await
            .unwrap(),
        Reply::Completed(Completion::InTime)
    );
    assert_eq!(
        unsaid(store.apply(&o, &k, reserve(2, b"a")).await.unwrap()),
        replay(value(b"ok"))
    );
    assert!(matches!(
        store.apply(&o, &k, reserve(2, b"b")).await.unwrap(),
        Reply::KeyReuse { .. }
    ));
    let second = fence_of(
        &store
            .apply(&o, &key("other"), reserve(3, b"a"))
            .await
            .unwrap(),
    );
    assert!(second > first, "{second:?} after {first:?}");
    assert!(!holds_script(&mut conn, "reserve").await);
    // A waiter's "in flight" marks the record: the reserve script's work.
    assert!(matches!(
        store
            .apply(&o, &key("other"), reserve(4, b"a"))
            .await
            .unwrap(),
        Reply::InFlight { .. }
    ));
    assert!(holds_script(&mut conn, "reserve").await);
}

#[tokio::test]
async fn with_fences_every_grant_is_fenced_above_the_ones_before() {
    // MODEL.md F1 on Redis: the first grant, the holder's renewal and repeated reserve, a
    // release and a new grant at once, a takeover after the lease ran out; the waiter's mark
    // keeps the fence; an uncontended call is still one script per command.
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let store = RedisStore::builder()
        .fences(true)
        .connect(&server.url())
        .await
        .unwrap();
    let (o, k) = (op("payment.charge"), key("fenced"));
    let first = fence_of(&store.apply(&o, &k, reserve(1, b"a")).await.unwrap());
    assert_eq!(
        fence_of(&store.apply(&o, &k, renew(1)).await.unwrap()),
        first
    );
    assert_eq!(
        fence_of(&store.apply(&o, &k, reserve(1, b"a")).await.unwrap()),
        first
    );
    // A waiter is told "in flight", which marks the record; the mark keeps its fence.
    assert!(matches!(
        store.apply(&o, &k, reserve(2, b"a")).await.unwrap(),
        Reply::InFlight { .. }
    ));
    let Reply::Read(Some(Record::Pending { fence, .. })) =
        store.apply(&o, &k, Command::Read).await.unwrap()
    else {
        panic!("a pending record")
    };
    assert_eq!(fence, Some(first));
    assert_eq!(
        store.apply(&o, &k, release(1)).await.unwrap(),
        Reply::Released
    );
    let second = fence_of(&store.apply(&o, &k, reserve(2, b"a")).await.unwrap());
    assert!(second > first, "{second:?} after {first:?}");
    // The lease runs out; the takeover is fenced above.
    let short = Command::Reserve {
        owner: OwnerToken::from_u128(3),
        fingerprint: Fingerprint::of_bytes(b"a"),
        lease: Duration::from_millis(20),
    };
    let k2 = key("fenced-2");
    let third = fence_of(&store.apply(&o, &k2, short).await.unwrap());
    assert!(third > second);
    tokio::time::sleep(Duration::from_millis(40)).await;
    let fourth = fence_of(&store.apply(&o, &k2, reserve(4, b"a")).await.unwrap());
    assert!(fourth > third);

    // An uncontended call: one reserve script, one fast complete, which completes the
    // fenced reservation itself.
    let k3 = key("fenced-3");
    let before = evalshas(&mut conn).await;
    fence_of(&store.apply(&o, &k3, reserve(5, b"a")).await.unwrap());
    assert_eq!(
        store
            .apply(&o, &k3, complete(5, b"a", Some(b"ok")))
            .await
            .unwrap(),
        Reply::Completed(Completion::InTime)
    );
    assert_eq!(evalshas(&mut conn).await - before, 2);
    assert_eq!(
        unsaid(store.apply(&o, &k3, reserve(6, b"a")).await.unwrap()),
        replay(value(b"ok"))
    );
    // A store without fences grants none, and reads the fenced records all the same.
    let plain = RedisStore::connect(&server.url()).await.unwrap();
    let k4 = key("plain");
    let Reply::Reserved(grant) = plain.apply(&o, &k4, reserve(7, b"a")).await.unwrap() else {
        panic!("a grant")
    };
    assert_eq!(grant.fence, None);
    assert_eq!(
        fence_of(&plain.apply(&o, &k2, reserve(4, b"a")).await.unwrap()),
        fourth
    );
    assert_eq!(store.stats().corrupt + plain.stats().corrupt, 0);
}
