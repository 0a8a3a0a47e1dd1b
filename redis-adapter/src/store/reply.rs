//! A script's reply, `{tag, now, …}`, read as the record machine's [`Reply`].

use idem::StoreError;
use idem_core::record::{Command, Completion, Refusal, Reply, Reservation, StoredResult};
use idem_core::{Body, Fence, Fingerprint, Timestamp};
use redis::Value;
use thiserror::Error;

use crate::codec;

/// A script answered with something that is not one of its replies.
#[derive(Debug, Error)]
#[error("unexpected reply from the {script} script: {detail}")]
pub struct UnexpectedReply {
    pub(super) script: &'static str,
    pub(super) detail: String,
}

/// Turns a script's `{tag, now, …}` array into the record machine's reply.
pub(super) fn parse_reply(
    command: &Command,
    redis_key: &str,
    value: Value,
) -> Result<(Reply, Timestamp), StoreError> {
    let unexpected = |detail: String| {
        StoreError::unavailable(
            command,
            UnexpectedReply {
                script: command.name(),
                detail,
            },
        )
    };
    let Value::Array(items) = value else {
        return Err(unexpected(format!("{value:?}")));
    };
    let mut items = items.into_iter();
    let tag = match items.next() {
        Some(Value::BulkString(tag)) if tag.len() == 1 => tag[0],
        other => return Err(unexpected(format!("tag {other:?}"))),
    };
    let now = match items.next() {
        Some(Value::Int(now)) => Timestamp::from_millis(u64::try_from(now).unwrap_or(0)),
        other => return Err(unexpected(format!("now {other:?}"))),
    };
    let field = items.next();
    let int = |field: &Option<Value>| match field {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    let owner = match command {
        Command::Reserve { owner, .. } | Command::Renew { owner, .. } => Some(*owner),
        _ => None,
    };
    let reply = match (command, tag) {
        (_, b'!') => {
            let detail = match field {
                Some(Value::BulkString(detail)) => String::from_utf8_lossy(&detail).into_owned(),
                other => format!("{other:?}"),
            };
            return Err(StoreError::Corrupt {
                key: redis_key.to_owned(),
                detail,
            });
        }
        (Command::Reserve { .. }, b'R') | (Command::Renew { .. }, b'N') => {
            match (owner, int(&field)) {
                (Some(owner), Some(until)) => {
                    // The grant's fence, 8 bytes big-endian, when the record carries one.
                    let fence = match items.next() {
                        None => None,
                        Some(Value::BulkString(bytes)) => {
                            match <[u8; 8]>::try_from(bytes.as_slice())
                                .ok()
                                .and_then(|bytes| Fence::new(u64::from_be_bytes(bytes)))
                            {
                                Some(fence) => Some(fence),
                                None => return Err(unexpected(format!("fence {bytes:?}"))),
                            }
                        }
                        Some(other) => return Err(unexpected(format!("fence {other:?}"))),
                    };
                    let reservation = Reservation {
                        owner,
                        lease_until: Some(Timestamp::from_millis(until)),
                        fence,
                    };
                    if tag == b'R' {
                        Reply::Reserved(reservation)
                    } else {
                        Reply::Renewed(reservation)
                    }
                }
                _ => return Err(unexpected(format!("lease {field:?}"))),
            }
        }
        (Command::Reserve { .. }, b'F') => match int(&field) {
            Some(until) => Reply::InFlight {
                lease_until: Some(Timestamp::from_millis(until)),
            },
            None => return Err(unexpected(format!("lease {field:?}"))),
        },
        // A completed record: its deadline, then its body if it has one. How long it has
        // left is the deadline minus the script's own `now`.
        (Command::Reserve { .. }, tag @ (b'P' | b'U')) => {
            let Some(deadline) = int(&field) else {
                return Err(unexpected(format!("deadline {field:?}")));
            };
            let remaining = Some(Timestamp::from_millis(deadline).saturating_duration_since(now));
            let result = match (tag, items.next()) {
                (b'P', None) => StoredResult::NotStored,
                (b'P', Some(Value::BulkString(body))) => StoredResult::Value(Body::new(body)),
                (b'U', None) => StoredResult::Panicked,
                (_, Some(other)) => return Err(unexpected(format!("body {other:?}"))),
                (_, None) => return Err(unexpected("a result without its state".into())),
            };
            Reply::Replay { result, remaining }
        }
        (Command::Reserve { .. }, b'K') => match field {
            Some(Value::BulkString(bytes)) => match <[u8; 32]>::try_from(bytes.as_slice()) {
                Ok(bytes) => Reply::KeyReuse {
                    stored: Fingerprint::from_bytes(bytes),
                },
                Err(_) => return Err(unexpected(format!("fingerprint of {} bytes", bytes.len()))),
            },
            other => return Err(unexpected(format!("fingerprint {other:?}"))),
        },
        (Command::Complete { .. }, b'C') => match int(&field) {
            Some(1) => Reply::Completed(Completion::InTime),
            Some(2) => Reply::Completed(Completion::AfterLeaseExpiry),
            Some(3) => Reply::Completed(Completion::Repeated),
            _ => return Err(unexpected(format!("completion {field:?}"))),
        },
        (Command::Complete { .. } | Command::Renew { .. } | Command::Release { .. }, b'X') => {
            match int(&field) {
                Some(1) => Reply::Refused(Refusal::NotOwner),
                Some(2) => Reply::Refused(Refusal::LeaseLost),
                Some(3) => Reply::Refused(Refusal::AlreadyCompleted),
                _ => return Err(unexpected(format!("refusal {field:?}"))),
            }
        }
        (Command::Release { .. }, b'D') => Reply::Released,
        (Command::Read, b'E') => Reply::Read(None),
        // The value, then its deadline (the key's expiry plus one millisecond).
        (Command::Read, b'V') => match (field, int(&items.next())) {
            (Some(Value::BulkString(raw)), Some(deadline)) => match codec::decode(&raw) {
                Ok(stored) => Reply::Read(Some(stored.until(Timestamp::from_millis(deadline)))),
                Err(error) => {
                    return Err(StoreError::Corrupt {
                        key: redis_key.to_owned(),
                        detail: error.to_string(),
                    });
                }
            },
            (field, deadline) => return Err(unexpected(format!("record {field:?}, {deadline:?}"))),
        },
        (_, tag) => return Err(unexpected(format!("tag {:?}", char::from(tag)))),
    };
    Ok((reply, now))
}
