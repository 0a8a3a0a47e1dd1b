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

impl RedisStore {
    /// Awaits `call` within the backstop timeout; every failure is `Unavailable`. A driver
    /// that gives the command up at the attempt's reply deadline drops this future first.
    pub(super) async fn within_timeout<T>(
        &self,
        command: &Command,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, StoreError> {
        let timeout = self.inner.command_timeout;
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(StoreError::unavailable(command, error)),
            Err(_) => Err(StoreError::unavailable(command, CommandTimeout(timeout))),
        }
    }
}
