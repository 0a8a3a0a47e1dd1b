//! Whether a key still holds a pending record: the read a waiter makes once its key's
//! subscription is live ([`crate::notices`]).

use idem_core::record::Record;
use redis::Value;

use super::RedisStore;
use super::connection::Connection;
use crate::codec::{self, Stored};

impl RedisStore {
    /// Whether `redis_key` holds a pending record (a bare reservation, or a pending record with or
    /// without a waiter's mark). One `GET`: Redis drops a record's key when its deadline
    /// passes, so a key that exists holds a live record. Anything else (absent, completed,
    /// a value this adapter did not write, no answer) is "not pending", which wakes the
    /// waiter to reserve again: a wake-up too many is safe, a missed one only slower.
    pub(super) async fn still_pending(&self, redis_key: String) -> bool {
        let get = redis::cmd("GET").arg(&redis_key).clone();
        let call = async {
            match &self.inner.connection {
                Connection::Standalone(manager) => {
                    get.query_async::<Value>(&mut manager.clone()).await
                }
                Connection::Cluster(cluster) => {
                    get.query_async::<Value>(&mut cluster.clone()).await
                }
            }
        };
        let reply = tokio::time::timeout(self.inner.command_timeout, call).await;
        match reply {
            Ok(Ok(Value::BulkString(bytes))) => matches!(
                codec::decode_stored(&bytes),
                Ok(Stored::BareReservation { .. }
                    | Stored::Record {
                        record: Record::Pending { .. },
                        ..
                    })
            ),
            _ => false,
        }
    }
}
