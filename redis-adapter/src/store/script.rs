//! A command as its Lua script ([`crate::scripts`]): the script's arguments, the fast
//! complete, and the call on the store's connection (`EVALSHA`, then `EVAL` when the server
//! does not hold the script).

use std::sync::atomic::Ordering;
use std::time::Duration;

use idem::StoreError;
use idem_core::record::{Command, Completion, Reply, StoredResult};
use idem_core::{Fingerprint, Key, Operation, OwnerToken, Timestamp};
use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};

use super::RedisStore;
use super::connection::{Bound, Connection};
use super::fast_reserve::MAX_FAST_RESERVE_LEASE_MS;
use super::reply::{UnexpectedReply, parse_reply};
use crate::codec::{self, MAX_DEADLINE_MS};
use crate::scripts::Script;

impl RedisStore {
    /// Runs `command`'s script on `key`: the reply, and the server's clock when the script
    /// decided.
    pub(super) async fn run(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
        bound: Bound,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let redis_key = self.inner.layout.record_key(operation, key);
        let scripts = &self.inner.scripts;
        let channel = || {
            self.inner
                .notices
                .as_ref()
                .map_or_else(Vec::new, |notices| {
                    notices.publish_command().as_bytes().to_vec()
                })
        };
        let (script, args): (&Script, Vec<Vec<u8>>) = match command {
            Command::Reserve {
                owner,
                fingerprint,
                lease,
            } => (
                &scripts.reserve,
                vec![
                    token(*owner),
                    print(*fingerprint),
                    millis(*lease),
                    if self.inner.notices.is_some() {
                        b"1".to_vec()
                    } else {
                        b"0".to_vec()
                    },
                    if self.inner.fences {
                        b"1".to_vec()
                    } else {
                        b"0".to_vec()
                    },
                ],
            ),
            Command::Complete {
                owner,
                fingerprint,
                result,
                retention,
            } => {
                let (flag, bytes) = match result {
                    StoredResult::Value(body) => (b"1".to_vec(), body.as_bytes().to_vec()),
                    StoredResult::NotStored => (b"0".to_vec(), Vec::new()),
                    StoredResult::Panicked => (b"2".to_vec(), Vec::new()),
                };
                (
                    &scripts.complete,
                    vec![
                        token(*owner),
                        print(*fingerprint),
                        flag,
                        bytes,
                        millis(*retention),
                        channel(),
                    ],
                )
            }
            Command::Renew { owner, lease } => {
                (&scripts.renew, vec![token(*owner), millis(*lease)])
            }
            Command::Release { owner } => (&scripts.release, vec![token(*owner), channel()]),
            Command::Read => (&scripts.read, Vec::new()),
        };
        let value = self.eval(command, bound, script, &redis_key, &args).await?;
        parse_reply(command, &redis_key, value)
    }

    /// The retention of `command` in milliseconds if it is a complete to try as the fast
    /// complete ([`crate::scripts`]): the key expires one millisecond before the retention
    /// ends, so a retention under two milliseconds goes to the complete script, as does one
    /// over [`MAX_FAST_RESERVE_LEASE_MS`], whose end the script caps.
    pub(super) fn fast_complete_retention(&self, command: &Command) -> Option<u64> {
        let Command::Complete { retention, .. } = command else {
            return None;
        };
        let ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
        (self.inner.fast_complete && (2..=MAX_FAST_RESERVE_LEASE_MS).contains(&ms)).then_some(ms)
    }

    /// The fast complete: `Completed(InTime)` if the key held the owner's own unmarked pending
    /// record, which it now replaces with the result; `None` (nothing changed) otherwise, for
    /// the complete script to decide.
    pub(super) async fn fast_complete(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
        bound: Bound,
        retention_ms: u64,
    ) -> Result<Option<Reply>, StoreError> {
        let Command::Complete {
            owner,
            fingerprint,
            result,
            ..
        } = command
        else {
            return Ok(None);
        };
        let redis_key = self.inner.layout.record_key(operation, key);
        let args = [
            codec::encode_pending(*owner, *fingerprint),
            codec::encode_completed(*owner, *fingerprint, result),
            (retention_ms - 1).to_string().into_bytes(),
        ];
        let script = &self.inner.scripts.complete_own;
        match self.eval(command, bound, script, &redis_key, &args).await? {
            Value::Int(1) => Ok(Some(Reply::Completed(Completion::InTime))),
            Value::Int(0) => Ok(None),
            other => Err(StoreError::unavailable(
                command,
                UnexpectedReply {
                    script: "complete_own",
                    detail: format!("{other:?}"),
                },
            )),
        }
    }

    /// `script` on `redis_key` with `args`, bounded as `bound` says: `EVALSHA`, and if
    /// the server does not hold the script, `EVAL` with its source, which goes to the key's
    /// node and caches it there (counted in `script_fallbacks`).
    pub(super) async fn eval(
        &self,
        command: &Command,
        bound: Bound,
        script: &Script,
        redis_key: &str,
        args: &[Vec<u8>],
    ) -> Result<Value, StoreError> {
        let invocation = |verb: &str, script: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(script).arg(1).arg(redis_key);
            for arg in args {
                cmd.arg(arg.as_slice());
            }
            cmd
        };
        let call = async {
            match self.query(&invocation("EVALSHA", &script.sha1)).await {
                Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    let counters = &self.inner.counters;
                    counters.script_fallbacks.fetch_add(1, Ordering::Relaxed);
                    self.query(&invocation("EVAL", &script.source)).await
                }
                other => other,
            }
        };
        self.within(command, bound, call).await
    }

    /// One command on the store's connection.
    pub(super) async fn query(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        match &self.inner.connection {
            Connection::Standalone(manager) => cmd.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => cmd.query_async(&mut cluster.clone()).await,
        }
    }

    /// A pipeline on the store's connection (on a Cluster, its commands on one key), its
    /// replies in order.
    pub(super) async fn query_pipeline(&self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        match &self.inner.connection {
            Connection::Standalone(manager) => pipe.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => pipe.query_async(&mut cluster.clone()).await,
        }
    }
}

fn token(owner: OwnerToken) -> Vec<u8> {
    owner.to_bytes().to_vec()
}

fn print(fingerprint: Fingerprint) -> Vec<u8> {
    fingerprint.to_bytes().to_vec()
}

/// Whole milliseconds, as the core rounds them, capped where Lua's numbers stay exact.
fn millis(duration: Duration) -> Vec<u8> {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    ms.min(MAX_DEADLINE_MS).to_string().into_bytes()
}
