//! The single-command reserve ([`crate::fast_reserve`]) as the store sends it: which reserves try
//! it, the `SET … NX … GET` itself (or, on a store that hands out fences, the smallest script
//! that puts the server's clock in it as the fence), and how its answer is decided.

use std::time::Duration;

use idem::StoreError;
use idem_core::record::{Command, Reply};
use idem_core::{Fence, Fingerprint, Key, Operation, OwnerToken, Reservation};
use redis::Value;

use super::RedisStore;
use super::connection::Bound;
use super::reply::UnexpectedReply;
use crate::codec;
use crate::fast_reserve::{self, Decision};

/// The longest lease the single-command reserve takes, 2^52 ms (some 142,000 years): its
/// end stays below [`MAX_DEADLINE_MS`] while the server's clock is below 2^52 ms. A longer
/// lease goes to the reserve script, which caps its end.
///
/// [`MAX_DEADLINE_MS`]: crate::codec::MAX_DEADLINE_MS
pub const MAX_FAST_RESERVE_LEASE_MS: u64 = 1 << 52;

impl RedisStore {
    /// The lease of `command` in milliseconds if it is a reserve to try as the fast reserve. The key
    /// expires one millisecond before the lease end, so a lease under two milliseconds
    /// (only a test sends one) is left to the script; so is one over [`MAX_FAST_RESERVE_LEASE_MS`],
    /// whose end could pass the largest deadline a record holds, where the script caps it.
    pub(super) fn fast_reserve_lease(&self, command: &Command) -> Option<u64> {
        let Command::Reserve { lease, .. } = command else {
            return None;
        };
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        (self.inner.fast_reserve && (2..=MAX_FAST_RESERVE_LEASE_MS).contains(&lease_ms))
            .then_some(lease_ms)
    }

    /// The single-command reserve ([`crate::fast_reserve`]) with a lease of `lease_ms`: the record
    /// machine's reply, or `None` when the reserve script must decide.
    pub(super) async fn fast_reserve(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
        bound: Bound,
        lease_ms: u64,
    ) -> Result<Option<Reply>, StoreError> {
        let Command::Reserve {
            owner, fingerprint, ..
        } = command
        else {
            return Ok(None);
        };
        let redis_key = self.inner.layout.record_key(operation, key);
        if self.inner.fences {
            return self
                .fenced_fast_reserve(command, bound, &redis_key, *owner, *fingerprint, lease_ms)
                .await;
        }
        let mut set = redis::cmd("SET");
        set.arg(&redis_key)
            .arg(codec::encode_pending(*owner, *fingerprint))
            .arg("NX")
            .arg("PX")
            .arg(lease_ms - 1)
            .arg("GET");
        // With `replay_time_left`, the key's `PTTL` in the same atomic step: how long a
        // completed record the `SET` found has left.
        let call = async {
            let reply = if self.inner.replay_time_left {
                let mut both = redis::pipe();
                both.atomic().add_command(set).cmd("PTTL").arg(&redis_key);
                self.query_pipeline(&both).await
            } else {
                self.query(&set).await.map(|held| vec![held])
            };
            match reply {
                // The server refused the command, so it changed nothing: a key of another
                // type (`WRONGTYPE`), or a write refused where the script may still answer
                // by reading (`OOM` under `maxmemory`, which refuses `SET … NX` even when
                // it would not write; inside `MULTI`, `EXECABORT`). The script decides, or
                // reports the error itself.
                Err(error) if error.code().is_some() => Ok(None),
                other => other.map(Some),
            }
        };
        let Some(replies) = self.within(command, bound, call).await? else {
            return Ok(None);
        };
        let mut replies = replies.into_iter();
        let held = match replies.next() {
            Some(Value::Nil) => None,
            Some(Value::BulkString(bytes)) => Some(bytes),
            // Refused inside `MULTI` (`WRONGTYPE`): it changed nothing; the script decides.
            Some(Value::ServerError(_)) => return Ok(None),
            other => {
                return Err(StoreError::unavailable(
                    command,
                    UnexpectedReply {
                        script: "fast reserve",
                        detail: format!("{other:?}"),
                    },
                ));
            }
        };
        // The record's deadline is the key's expiry plus one millisecond; a key without an
        // expiry (`-1`) leaves the time unsaid.
        let time_left = match replies.next() {
            Some(Value::Int(ms)) => u64::try_from(ms)
                .ok()
                .map(|ms| Duration::from_millis(ms.saturating_add(1))),
            _ => None,
        };
        Ok(self.decide(held.as_deref(), *owner, *fingerprint, time_left))
    }

    /// The fenced fast reserve (`reserve_fenced.lua`, MODEL.md `F1`): the single-command
    /// reserve as the smallest script that writes the server's clock into the reservation as
    /// its fence. A grant answers with that fence; a value found is decided as the
    /// single-command reserve decides it.
    async fn fenced_fast_reserve(
        &self,
        command: &Command,
        bound: Bound,
        redis_key: &str,
        owner: OwnerToken,
        fingerprint: Fingerprint,
        lease_ms: u64,
    ) -> Result<Option<Reply>, StoreError> {
        let args = [
            codec::fenced_header(owner, fingerprint),
            (lease_ms - 1).to_string().into_bytes(),
            if self.inner.replay_time_left {
                b"1".to_vec()
            } else {
                b"0".to_vec()
            },
        ];
        let script = &self.inner.scripts.reserve_fenced;
        let value = self.eval(command, bound, script, redis_key, &args).await?;
        let unexpected = |detail: String| {
            StoreError::unavailable(
                command,
                UnexpectedReply {
                    script: "reserve_fenced",
                    detail,
                },
            )
        };
        let Value::Array(reply) = value else {
            return Err(unexpected(format!("{value:?}")));
        };
        match reply.as_slice() {
            // I1 and F1: the key was free, and is now reserved under this fence.
            [Value::Int(1), Value::BulkString(bytes)] => {
                let fence = <[u8; 8]>::try_from(bytes.as_slice())
                    .ok()
                    .and_then(|bytes| Fence::new(u64::from_be_bytes(bytes)))
                    .ok_or_else(|| unexpected(format!("the fence {bytes:?}")))?;
                Ok(Some(Reply::Reserved(Reservation {
                    owner,
                    lease_until: None,
                    fence: Some(fence),
                })))
            }
            [Value::Int(0), Value::BulkString(held), rest @ ..] => {
                let time_left = match rest {
                    [Value::Int(ms)] => u64::try_from(*ms)
                        .ok()
                        .map(|ms| Duration::from_millis(ms.saturating_add(1))),
                    _ => None,
                };
                Ok(self.decide(Some(held), owner, fingerprint, time_left))
            }
            // The `SET` was refused and changed nothing: the reserve script decides.
            [Value::Int(2)] => Ok(None),
            other => Err(unexpected(format!("{other:?}"))),
        }
    }

    /// The answer to a reserve from the value the key `held` when the fast reserve ran
    /// (`None`: it was free), with `time_left` of a completed record found: the record
    /// machine's reply, or `None` for the reserve script to decide.
    fn decide(
        &self,
        held: Option<&[u8]>,
        owner: OwnerToken,
        fingerprint: Fingerprint,
        time_left: Option<Duration>,
    ) -> Option<Reply> {
        let watch = self.inner.notices.is_some();
        match fast_reserve::decide(held, owner, fingerprint, watch) {
            Decision::Answer(Reply::Replay { result, .. }) => Some(Reply::Replay {
                result,
                remaining: time_left,
            }),
            Decision::Answer(reply) => Some(reply),
            Decision::Script => None,
        }
    }
}
