//! The differential checker: random command sequences, with time moving, applied to the
//! core's record machine and to a store; every reply must agree, step for step. Used on
//! standalone Redis (`tests/differential.rs`) and on a Cluster (`tests/cluster.rs`).
//!
//! The scripts report the server's `now` with each reply; the model is stepped at that same
//! `now`, so the comparison is exact even though the server's clock is real. The fast
//! reserve and the fast complete do not read the clock: a store that uses them reports the
//! window of server time around the command instead, and the model must give the same reply
//! at some instant in that window (a grant's unsaid lease end agrees with any); a write they
//! made is placed exactly by the key's expiry. Leases and retentions of a few milliseconds,
//! with sleeps between steps, make expiry happen often.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem::StoreError;
use idem_core::record::{
    Command, CommandKind, Completion, Record, Reply, StoredResult, apply, apply_fenced,
};
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken, Timestamp};
use idem_redis::RedisStore;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

#[derive(Debug, Clone)]
pub enum Step {
    /// A command on record `slot` (0..4: two keys under two operations).
    Send { slot: usize, command: Command },
    /// Let the server's clock move.
    Sleep(u64),
}

fn command() -> impl Strategy<Value = Command> {
    let owner = (1..=3_u128).prop_map(OwnerToken::from_u128);
    let fp = (0..2_u8).prop_map(|n| Fingerprint::of_bytes(&[n]));
    let ms = |max: u64| (0..max).prop_map(Duration::from_millis);
    let body = prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..8)
            .prop_map(|bytes| StoredResult::Value(Body::new(bytes))),
        1 => Just(StoredResult::NotStored),
        1 => Just(StoredResult::Panicked),
    ];
    prop_oneof![
        3 => (owner.clone(), fp.clone(), ms(40)).prop_map(|(owner, fingerprint, lease)| {
            Command::Reserve { owner, fingerprint, lease }
        }),
        2 => (owner.clone(), fp, body, ms(80)).prop_map(|(owner, fingerprint, body, retention)| {
            Command::Complete { owner, fingerprint, result: body, retention }
        }),
        2 => (owner.clone(), ms(40)).prop_map(|(owner, lease)| Command::Renew { owner, lease }),
        1 => owner.prop_map(|owner| Command::Release { owner }),
        1 => Just(Command::Read),
    ]
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => (0..4_usize, command()).prop_map(|(slot, command)| Step::Send { slot, command }),
        1 => (0..25_u64).prop_map(Step::Sleep),
    ];
    proptest::collection::vec(step, 1..16)
}

/// When, on the server's clock, a store decided.
#[derive(Debug, Clone, Copy)]
pub enum Timing {
    /// At this instant.
    At(Timestamp),
    /// At some instant in this window, both ends included.
    Within(Timestamp, Timestamp),
}

/// A store that says when it decided: the real one, or a broken one.
pub trait TimedStore {
    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError>;
}

impl TimedStore for RedisStore {
    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        RedisStore::apply_timed(self, operation, key, command)
            .await
            .map(|(reply, now)| (reply, Timing::At(now)))
    }
}

/// The real store, its reserves and completes through [`idem::Store::apply`] so that they
/// take the fast paths (the fast reserve, the fast complete); `conn` reads the server's clock
/// around each of them. A command whose reply carries its times, or that changes nothing, is
/// placed by the model's agreement within the window; one that wrote a record, by the key's
/// expiry.
pub struct FastPaths<C = redis::aio::MultiplexedConnection> {
    pub store: RedisStore,
    /// A plain connection to the server (or, on a Cluster, one that routes by key).
    pub conn: C,
    /// Broken on purpose when set: the harness reserves a free key itself with `SET … NX PX
    /// lease` (the store sends `lease-1`), so the key outlives the lease by a millisecond;
    /// anything else goes to the store's scripts.
    pub outlives_lease: bool,
}

impl<C: Connection> FastPaths<C> {
    pub fn new(store: RedisStore, conn: C) -> Self {
        Self {
            store,
            conn,
            outlives_lease: false,
        }
    }

    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<Reply, StoreError> {
        let Command::Reserve {
            owner,
            fingerprint,
            lease,
        } = command
        else {
            return idem::Store::apply(&self.store, operation, key, command.clone()).await;
        };
        if !self.outlives_lease || lease.as_millis() < 2 {
            return idem::Store::apply(&self.store, operation, key, command.clone()).await;
        }
        let held: Option<Vec<u8>> = redis::cmd("SET")
            .arg(self.store.layout().record_key(operation, key))
            .arg(idem_redis::codec::encode_pending(*owner, *fingerprint))
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg("GET")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::Unavailable {
                command: CommandKind::Reserve,
                source: Box::new(e),
            })?;
        match held {
            None => Ok(Reply::Reserved(idem_core::Reservation {
                owner: *owner,
                lease_until: None,
                fence: None,
            })),
            Some(_) => RedisStore::apply_timed(&self.store, operation, key, command.clone())
                .await
                .map(|(reply, _)| reply),
        }
    }
}

/// What `FastPaths` needs of its own connection.
pub trait Connection: redis::aio::ConnectionLike + Clone + Send + Sync {}

impl<C: redis::aio::ConnectionLike + Clone + Send + Sync> Connection for C {}

async fn server_now(conn: &mut impl Connection) -> Result<u64, StoreError> {
    let (secs, micros): (u64, u64) =
        redis::cmd("TIME")
            .query_async(conn)
            .await
            .map_err(|e| StoreError::Unavailable {
                command: CommandKind::Read,
                source: Box::new(e),
            })?;
    Ok(secs * 1000 + micros / 1000)
}

impl<C: Connection> TimedStore for FastPaths<C> {
    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let span = match command {
            Command::Reserve { lease, .. } => lease,
            Command::Complete { retention, .. } => retention,
            // Only a reserve and a complete have fast paths; the rest are scripts.
            _ => return TimedStore::apply_timed(&self.store, operation, key, command).await,
        };
        let mut conn = self.conn.clone();
        let redis_key = self.store.layout().record_key(operation, key);
        let unavailable = |command: CommandKind| {
            move |e: redis::RedisError| StoreError::Unavailable {
                command,
                source: Box::new(e),
            }
        };
        // Whether the key was taken before: then a grant is the owner's retry of an earlier
        // one, made at an earlier instant with its own lease.
        let taken: bool = redis::cmd("EXISTS")
            .arg(&redis_key)
            .query_async(&mut conn)
            .await
            .map_err(unavailable(CommandKind::Read))?;
        let before = server_now(&mut conn).await?;
        let reply = self.apply(operation, key, &command).await?;
        // A record this command may have written: a grant (a fresh one, or the owner's retry
        // of an earlier one, unchanged, on a key taken before), or a completion.
        let retry = matches!(command, Command::Reserve { .. }) && taken;
        let wrote = match &reply {
            Reply::Reserved(granted) => granted.lease_until.is_none(),
            Reply::Completed(Completion::InTime | Completion::AfterLeaseExpiry) => true,
            _ => false,
        };
        if wrote {
            // The record's deadline is the key's expiry plus one: it was written at that end
            // less the lease or retention. The key may already be gone (a span of a few ms),
            // and then the window below stands in.
            let expiry: i64 = redis::cmd("PEXPIRETIME")
                .arg(&redis_key)
                .query_async(&mut conn)
                .await
                .map_err(unavailable(CommandKind::Read))?;
            let span = u64::try_from(span.as_millis()).unwrap_or(u64::MAX);
            let after = server_now(&mut conn).await?;
            if let Ok(expiry) = u64::try_from(expiry) {
                let at = (expiry + 1).saturating_sub(span);
                // A grant on a key taken before whose expiry does not date it in the window is
                // the owner's retry, unchanged: the window places it. (One dated in it is a
                // fresh grant: the key expired between the check and the command.)
                if retry && !(before..=after).contains(&at) {
                    let window = Timing::Within(
                        Timestamp::from_millis(before),
                        Timestamp::from_millis(after),
                    );
                    return Ok((reply, window));
                }
                // A record that outlives its lease would be made after the window.
                if !(before..=after).contains(&at) {
                    return Err(StoreError::Unavailable {
                        command: command.kind(),
                        source: format!(
                            "a record written in {before}..={after} ms expires at {expiry} ms, not one ms before its {span} ms lease or retention ends"
                        )
                        .into(),
                    });
                }
                return Ok((reply, Timing::At(Timestamp::from_millis(at))));
            }
        }
        let after = server_now(&mut conn).await?;
        let window = Timing::Within(
            Timestamp::from_millis(before),
            Timestamp::from_millis(after),
        );
        Ok((reply, window))
    }
}

/// `got` is the model's `expected`, except that a grant or an "in flight" may leave its lease
/// end unsaid, and a replay how long its record has left.
fn agrees(got: &Reply, expected: &Reply) -> bool {
    match (got, expected) {
        (Reply::Reserved(g), Reply::Reserved(e)) if g.lease_until.is_none() => g.owner == e.owner,
        (Reply::InFlight { lease_until: None }, Reply::InFlight { .. }) => true,
        // A replay answered without the server's clock leaves its remaining time unsaid.
        (
            Reply::Replay {
                result: g,
                remaining: None,
            },
            Reply::Replay { result: e, .. },
        ) => g == e,
        _ => got == expected,
    }
}

/// Fresh keys for every case, so cases never see each other's records.
fn names(case: u64) -> Vec<(Operation, Key)> {
    let mut out = Vec::new();
    for operation in ["payment.charge", "order.cancel"] {
        for key in ["a", "b"] {
            out.push((
                Operation::new(operation).unwrap(),
                Key::new(format!("case-{case}-{key}")).unwrap(),
            ));
        }
    }
    out
}

pub async fn run_case(store: &impl TimedStore, steps: &[Step], case: u64) -> Result<(), String> {
    let names = names(case);
    let mut model: HashMap<usize, Option<Record>> = HashMap::new();
    // Each slot's highest fence granted so far (F1), when the store hands fences out.
    let mut last_fence: HashMap<usize, idem_core::Fence> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Sleep(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Step::Send { slot, command } => {
                let (operation, key) = &names[*slot];
                let (got, timing) = store
                    .apply_timed(operation, key, command.clone())
                    .await
                    .map_err(|e| format!("step {i}: store error {e}"))?;
                let state = model.entry(*slot).or_default();
                let (from, to) = match timing {
                    Timing::At(now) => (now.as_millis(), now.as_millis()),
                    Timing::Within(from, to) => (from.as_millis(), to.as_millis()),
                };
                // A store that hands out fences grants under the one it says; the model
                // grants under the same (and one without, under none).
                let granted = match &got {
                    Reply::Reserved(grant) => grant.fence,
                    _ => None,
                };
                let model_step = |now: u64| {
                    let now = Timestamp::from_millis(now);
                    match granted {
                        Some(fence) => apply_fenced(state.as_ref(), command.clone(), now, || fence),
                        None => apply(state.as_ref(), command.clone(), now),
                    }
                };
                // The earliest instant at which the model agrees: for a grant whose key is
                // already gone, the earliest lease end is gone too by the next step.
                let agreeing = (from..=to).find_map(|now| {
                    let transition = model_step(now);
                    agrees(&got, &transition.reply).then_some(transition)
                });
                let Some(transition) = agreeing else {
                    let expected = apply(
                        state.as_ref(),
                        command.clone(),
                        Timestamp::from_millis(from),
                    )
                    .reply;
                    return Err(format!(
                        "step {i}: {command:?} on slot {slot} at {timing:?}: redis {got:?}, model {expected:?}"
                    ));
                };
                // F1: a fresh grant (the model wrote a reservation under the store's fence
                // that the slot did not hold) is fenced above every earlier one.
                let fresh = matches!(
                    (&transition.write, state.as_ref()),
                    (idem_core::record::Write::Put(Record::Pending { fence: Some(_), owner, .. }), before)
                        if before.is_none_or(|record| record.owner() != *owner || record.is_expired(Timestamp::from_millis(from)))
                );
                if fresh
                    && let Some(fence) = granted
                    && let Some(last) = last_fence.insert(*slot, fence)
                    && fence <= last
                {
                    return Err(format!(
                        "step {i}: F1: {command:?} on slot {slot} granted {fence:?}, not above \
                         the earlier {last:?}"
                    ));
                }
                transition.apply_to(state);
            }
        }
    }
    Ok(())
}

pub fn check(
    runtime: &tokio::runtime::Runtime,
    store: &impl TimedStore,
    cases: u32,
) -> Result<(), String> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&steps(), |steps| {
            let case = CASE.fetch_add(1, Ordering::Relaxed);
            runtime
                .block_on(run_case(store, &steps, case))
                .map_err(TestCaseError::fail)
        })
        .map_err(|e| e.to_string())
}

/// A fresh reserve on `store` is granted under a fence: the store hands fences out, so the
/// grants a differential run held to F1 carried theirs.
pub fn assert_grants_are_fenced(runtime: &tokio::runtime::Runtime, store: &RedisStore) {
    let granted = runtime.block_on(idem::Store::apply(
        store,
        &Operation::new("fenced.check").unwrap(),
        &Key::new("k").unwrap(),
        Command::Reserve {
            owner: OwnerToken::from_u128(1),
            fingerprint: Fingerprint::of_bytes(b"f"),
            lease: Duration::from_secs(5),
        },
    ));
    assert!(
        matches!(granted, Ok(Reply::Reserved(ref grant)) if grant.fence.is_some()),
        "{granted:?}"
    );
}
