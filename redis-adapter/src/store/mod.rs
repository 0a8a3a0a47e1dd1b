//! [`RedisStore`]: the record machine on Redis, standalone or Cluster.
//!
//! - [`admin`]: what an operator asks of the store (the `idem` command);
//! - [`builder`]: the settings, and connecting to a server or a Cluster;
//! - [`connection`]: the connection commands go out on, and the backstop timeout;
//! - [`fast_reserve`]: a reserve tried as the single command `SET … NX … GET`;
//! - [`health`]: whether the server may evict the store's keys;
//! - [`script`]: every other command as its Lua script;
//! - [`reply`]: a script's reply read as the record machine's;
//! - [`stats`]: what the store counts.

mod admin;
mod builder;
mod connection;
mod fast_reserve;
mod health;
mod pending;
mod reply;
mod script;
mod stats;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use idem::{Store, StoreError};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation, Timestamp};

use crate::layout::KeyLayout;
use crate::notices::{Notices, Recheck};
use crate::scripts::Scripts;

pub use self::builder::{
    ConnectError, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_NOTICE_HEALTH_CHECK,
    EvictionCheck, RedisStoreBuilder,
};
pub use self::connection::CommandTimeout;
pub use self::fast_reserve::MAX_FAST_RESERVE_LEASE_MS;
pub use self::health::{Health, HealthError, NO_EVICTION, NodePolicy, PolicyReadError};
pub use self::reply::UnexpectedReply;
pub use self::stats::StoreStats;

use self::connection::{Bound, Connection};
use self::stats::Counters;

/// The record machine on Redis: a [`Store`] for a standalone server or a Cluster.
///
/// Every command is one Lua script on one key ([`crate::scripts`]), judged by the server's
/// clock, except that a reserve is first tried as one plain `SET … NX … GET`
/// ([`crate::fast_reserve`]) and a complete as the fast complete, which needs no clock; records are laid out as in [`crate::codec`] under the keys of
/// [`crate::layout`]. Cheap to clone: clones share one connection.
///
/// Every failure whose effect is unknown (a timeout, a dropped connection, a server error
/// such as a failover's `READONLY` or `CLUSTERDOWN`) is [`StoreError::Unavailable`]; the
/// attempt machine then retries with the same owner token, which the reserve script
/// recognises (`I11`).
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connection: Connection,
    /// The standalone server's address, naming it in [`Health`]; `None` on a Cluster, whose
    /// client names its nodes.
    address: Option<String>,
    notices: Option<Notices>,
    layout: KeyLayout,
    command_timeout: Duration,
    fast_reserve: bool,
    fast_complete: bool,
    replay_time_left: bool,
    /// Every grant carries a fence (`RedisStoreBuilder::fences`).
    fences: bool,
    scripts: Scripts,
    counters: Counters,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("connection", &self.connection)
            .field("layout", &self.layout)
            .field("command_timeout", &self.command_timeout)
            .field(
                "notices",
                &self.notices.as_ref().map(Notices::publish_command),
            )
            .field("single_command_reserve", &self.fast_reserve)
            .field("fast_complete", &self.fast_complete)
            .field("replay_time_left", &self.replay_time_left)
            .field("fences", &self.fences)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Settings: prefix, timeouts; then connect.
    pub fn builder() -> RedisStoreBuilder {
        RedisStoreBuilder::default()
    }

    /// Connects to a standalone server at `url` with the default settings.
    pub async fn connect(url: &str) -> Result<Self, ConnectError> {
        Self::builder().connect(url).await
    }

    /// How record keys are named.
    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// The per-command backstop timeout (see
    /// [`RedisStoreBuilder::command_timeout`]).
    pub fn command_timeout(&self) -> Duration {
        self.inner.command_timeout
    }

    /// Like [`Store::apply`], and also returns the server's clock (milliseconds since the
    /// Unix epoch) at which the script decided: the `now` of `idem_core::record::apply`.
    /// Always runs the command's script, never the single-command reserve (which does not
    /// read the clock).
    pub async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let result = self.run(operation, key, &command, Bound::Backstop).await;
        self.count(result)
    }

    /// A command of the record machine, its wait bounded as `bound` says: the single-command
    /// reserve or the fast complete where they apply, the command's script otherwise.
    async fn command(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
        bound: Bound,
    ) -> Result<Reply, StoreError> {
        if let Some(lease_ms) = self.fast_reserve_lease(&command)
            && let Some(reply) = self.count(
                self.fast_reserve(operation, key, &command, bound, lease_ms)
                    .await,
            )?
        {
            return Ok(reply);
        }
        if let Some(retention_ms) = self.fast_complete_retention(&command)
            && let Some(reply) = self.count(
                self.fast_complete(operation, key, &command, bound, retention_ms)
                    .await,
            )?
        {
            return Ok(reply);
        }
        let result = self.run(operation, key, &command, bound).await;
        self.count(result).map(|(reply, _)| reply)
    }
}

impl Store for RedisStore {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        self.command(operation, key, command, Bound::Backstop).await
    }

    /// As [`apply`](Self::apply), without the store's backstop timer: the caller drops the
    /// command at its own deadline.
    async fn apply_bounded(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        self.command(operation, key, command, Bound::Caller).await
    }

    /// With notices on, resolves when a complete or release of this record is announced,
    /// or, once the key's subscription is live, at once if the record read then is no longer
    /// pending (a change between the "in flight" reply and this call); see
    /// [`crate::notices`]. Without notices, never: the waiter's backoff governs.
    fn changed(&self, operation: &Operation, key: &Key) -> impl Future<Output = ()> + Send {
        self.waiting(operation, key, Recheck::Always)
    }

    /// As [`changed`](Self::changed), registered before the reserve: the record is read
    /// only if the key's subscription was not already live.
    fn watch(&self, operation: &Operation, key: &Key) -> impl Future<Output = ()> + Send {
        self.waiting(operation, key, Recheck::IfNotLive)
    }
}

impl RedisStore {
    /// A waiter's registration on the key, made now, and its wait.
    fn waiting(
        &self,
        operation: &Operation,
        key: &Key,
        recheck: Recheck,
    ) -> impl Future<Output = ()> + Send + 'static {
        let redis_key = self.inner.layout.record_key(operation, key);
        let registration = self
            .inner
            .notices
            .as_ref()
            .map(|notices| notices.register(redis_key.clone()));
        let store = self.clone();
        async move {
            match registration {
                Some(registration) => {
                    registration
                        .wait(recheck, || store.still_pending(redis_key.clone()))
                        .await;
                }
                None => std::future::pending().await,
            }
        }
    }
}
