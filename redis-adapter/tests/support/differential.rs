//! The differential check on Redis: random command sequences, with time moving, applied to
//! the core's record machine and to a store; every reply must agree, step for step. The
//! checker is the conformance kit's differential check (`idem_conformance`); what is Redis's
//! own is here: the subjects that say when the store decided. Used on standalone Redis
//! (`tests/differential.rs`) and on a Cluster (`tests/cluster.rs`).
//!
//! The scripts report the server's `now` with each reply, so a store that runs them
//! ([`ThroughScripts`]) is judged exactly at that instant even though the server's clock is
//! real. The fast reserve and the fast complete do not read the clock: a store that uses them
//! ([`FastPaths`]) reports the window of server time around the command instead, and the
//! record machine must give the same reply at some instant in that window (a grant's unsaid
//! lease end agrees with any); a write they made is placed exactly by the key's expiry.

use std::time::Duration;

use idem::StoreError;
use idem_conformance::{Check, Config, Subject, Timing, Verdict, run};
use idem_core::record::{Command, CommandKind, Completion, Reply};
use idem_core::{Fingerprint, Key, Operation, OwnerToken, Timestamp};
use idem_redis::RedisStore;

/// Runs `cases` random sequences of the kit's differential check; the first divergence,
/// shrunk, with its history, is the error.
pub fn check<S: Subject>(
    runtime: &tokio::runtime::Runtime,
    subject: &S,
    cases: u32,
) -> Result<(), String> {
    let config = Config {
        cases,
        checks: vec![Check::Differential],
        ..Config::default()
    };
    let report = runtime.block_on(run("Redis", subject, &config));
    match report
        .result(Check::Differential)
        .map(|result| &result.verdict)
    {
        Some(Verdict::Passed(_)) => Ok(()),
        Some(Verdict::Failed(divergence)) => Err(divergence.to_string()),
        _ => Err(format!("the differential check did not run: {report}")),
    }
}

/// The server's clock as a script reads it: the instant a read of a record nobody writes
/// was decided at.
pub async fn scripts_now(store: &RedisStore) -> Result<Timestamp, StoreError> {
    store
        .apply_timed(
            &Operation::new("clock").unwrap(),
            &Key::new("clock").unwrap(),
            Command::Read,
        )
        .await
        .map(|(_, now)| now)
}

/// The store through its scripts alone ([`RedisStore::apply_timed`]): every command is
/// decided at the server instant its script reports, so the kit judges it exactly.
pub struct ThroughScripts(pub RedisStore);

impl Subject for ThroughScripts {
    type Store = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.0
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        scripts_now(&self.0).await
    }

    async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timing), StoreError> {
        let (reply, now) = self.0.apply_timed(operation, key, command).await?;
        Ok((reply, Timing::At(now)))
    }
}

/// The real store, its reserves and completes through [`idem::Store::apply`] so that they
/// take the fast paths (the fast reserve, the fast complete); `conn` reads the server's clock
/// around each of them. A command whose reply carries its times, or that changes nothing, is
/// placed by the record machine's agreement within the window; one that wrote a record, by
/// the key's expiry.
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
            .map_err(unavailable(CommandKind::Reserve))?;
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
pub trait Connection: redis::aio::ConnectionLike + Clone + Send + Sync + 'static {}

impl<C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static> Connection for C {}

fn unavailable(command: CommandKind) -> impl Fn(redis::RedisError) -> StoreError {
    move |error| StoreError::Unavailable {
        command,
        source: Box::new(error),
    }
}

async fn server_now(conn: &mut impl Connection) -> Result<u64, StoreError> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(conn)
        .await
        .map_err(unavailable(CommandKind::Read))?;
    Ok(secs * 1000 + micros / 1000)
}

impl<C: Connection> Subject for FastPaths<C> {
    type Store = RedisStore;

    fn store(&self) -> &RedisStore {
        &self.store
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        server_now(&mut self.conn.clone())
            .await
            .map(Timestamp::from_millis)
    }

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
            _ => {
                let (reply, now) = self.store.apply_timed(operation, key, command).await?;
                return Ok((reply, Timing::At(now)));
            }
        };
        let mut conn = self.conn.clone();
        let redis_key = self.store.layout().record_key(operation, key);
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
