//! Whether a key still holds a pending record: the read a waiter makes once its key's
//! subscription is live ([`crate::notices`]).

use redis::Value;

use super::RedisStore;
use crate::codec::{self, StoredState};

impl RedisStore {
    /// Whether `redis_key` holds a pending record (with or without a waiter's mark). One
    /// `GET`: a record is live exactly while its key exists (layout 2), so a key that holds a
    /// pending record is held. Anything else (absent, completed, a value this adapter did not
    /// write, no answer) is "not pending", which wakes the waiter to reserve again: a wake-up
    /// too many is safe, a missed one only slower.
    pub(super) async fn still_pending(&self, redis_key: String) -> bool {
        let get = redis::cmd("GET").arg(&redis_key).clone();
        let reply = tokio::time::timeout(self.inner.command_timeout, self.query(&get)).await;
        match reply {
            Ok(Ok(Value::BulkString(bytes))) => matches!(
                codec::decode(&bytes).map(|stored| stored.state),
                Ok(StoredState::Pending { .. })
            ),
            _ => false,
        }
    }
}
