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
    ///
    /// On a Cluster whose slot map the store has not caught up with (the key's slot just
    /// moved, which is also when a waiter reads again: [`crate::notices`]), the `GET` is
    /// redirected; it is sent once more, which reaches the new owner, since the client learns
    /// the new map from the redirection. This read is no record command: the attempt's retries
    /// are not involved.
    pub(super) async fn still_pending(&self, redis_key: String) -> bool {
        let get = redis::cmd("GET").arg(&redis_key).clone();
        let read = async {
            match self.query(&get).await {
                Err(error) if error.redirect_node().is_some() => self.query(&get).await,
                other => other,
            }
        };
        let reply = tokio::time::timeout(self.inner.command_timeout, read).await;
        match reply {
            Ok(Ok(Value::BulkString(bytes))) => matches!(
                codec::decode(&bytes).map(|stored| stored.state),
                Ok(StoredState::Pending { .. })
            ),
            _ => false,
        }
    }
}
