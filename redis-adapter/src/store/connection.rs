//! The connection a store sends its commands on, and the backstop timeout around each.

use std::fmt;

use idem::StoreError;
use idem_core::record::Command;
use redis::RedisResult;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

use super::RedisStore;

pub use idem::CommandTimeout;

/// Where commands go.
#[derive(Clone)]
pub(super) enum Connection {
    /// Reconnects in the background after a dropped connection.
    Standalone(ConnectionManager),
    /// Routes each script by its one key; refreshes its slot map on redirections.
    Cluster(ClusterConnection),
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Connection::Standalone(_) => "Standalone",
            Connection::Cluster(_) => "Cluster",
        })
    }
}

/// What bounds a command's wait for its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bound {
    /// The store's backstop, [`RedisStore::command_timeout`]: for a caller with no deadline
    /// of its own ([`Store::apply`](idem::Store::apply), an operator's tool).
    Backstop,
    /// The caller, which drops the command at a deadline of its own
    /// ([`Store::apply_bounded`](idem::Store::apply_bounded)): no timer of the store's.
    Caller,
}

impl RedisStore {
    /// Awaits `call` as `bound` says; every failure is `Unavailable`. A driver that gives
    /// the command up at the attempt's reply deadline drops this future first.
    pub(super) async fn within<T>(
        &self,
        command: &Command,
        bound: Bound,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let answer = match bound {
            Bound::Caller => call.await,
            Bound::Backstop => {
                let timeout = self.inner.command_timeout;
                match tokio::time::timeout(timeout, call).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        return Err(StoreError::unavailable(command, CommandTimeout(timeout)));
                    }
                }
            }
        };
        answer.map_err(|error| StoreError::unavailable(command, error))
    }
}
