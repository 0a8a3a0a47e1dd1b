//! The store's settings and how it connects: [`RedisStoreBuilder`], a standalone server
//! (through a reconnecting connection manager, at once or on the first command) or a
//! Cluster.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use thiserror::Error;

use super::connection::Connection;
use super::health::{self, PolicyReadError, Unreachable};
use super::stats::Counters;
use super::{Inner, RedisStore};
use crate::layout::{KeyLayout, PrefixError};
use crate::notices::{self, Notices, Source};
use crate::scripts::Scripts;

pub use idem::store::DEFAULT_COMMAND_TIMEOUT;

/// The connect timeout used when none is configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the notices' connection is checked when nothing else is configured.
pub const DEFAULT_NOTICE_HEALTH_CHECK: Duration = Duration::from_secs(1);

/// The store could not be set up.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL or client configuration was refused.
    #[error("invalid Redis configuration: {0}")]
    Config(#[source] RedisError),
    /// The first connection could not be made.
    #[error("could not connect to Redis: {0}")]
    Connect(#[source] RedisError),
    /// The first connection did not complete within the connect timeout.
    #[error("connecting to Redis took longer than {0:?}")]
    ConnectTimeout(Duration),
    /// The key prefix is refused ([`crate::layout`]).
    #[error(transparent)]
    Prefix(#[from] PrefixError),
    /// A node's `maxmemory-policy` can evict idem's keys, and an evicted key runs its action
    /// again (under [`EvictionCheck::Refuse`]).
    #[error(
        "Redis node {node} has maxmemory-policy {policy}, which can evict idem's keys (they all \
         have a TTL) and so run an action a second time; run `CONFIG SET maxmemory-policy \
         noeviction` on it (and set it in its configuration file)"
    )]
    EvictingPolicy {
        /// The node, `host:port`.
        node: String,
        /// Its policy, lower case.
        policy: String,
    },
    /// A node did not tell its `maxmemory-policy`, so the store cannot know that its keys are
    /// kept (under [`EvictionCheck::Refuse`]).
    #[error(
        "could not check that Redis node {node} never evicts idem's keys: {source}; if CONFIG is \
         disabled or renamed (managed Redis), check by hand that its maxmemory-policy is \
         noeviction, then connect with EvictionCheck::Warn or EvictionCheck::Skip"
    )]
    EvictionPolicyUnknown {
        /// The node, `host:port`.
        node: String,
        /// What it answered.
        #[source]
        source: PolicyReadError,
    },
}

/// What connecting does about a server that may evict idem's keys (see
/// [`RedisStoreBuilder::eviction_check`]).
///
/// Every key the store writes has a TTL, so under any `maxmemory-policy` but `noeviction`
/// (every `volatile-*` and `allkeys-*` policy) Redis may drop a live reservation or a stored
/// result when memory runs short, and the next call for that key runs the action again.
/// Connecting reads `CONFIG GET maxmemory-policy` from the server, or from every master of a
/// Cluster, unless the check is [`Skip`](Self::Skip). The lazy connects
/// ([`RedisStoreBuilder::connect_lazy`], [`RedisStoreBuilder::from_client_lazy`]) never check;
/// [`RedisStore::health`] checks again at any time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionCheck {
    /// Connecting fails with [`ConnectError::EvictingPolicy`] if any node's policy may evict,
    /// and with [`ConnectError::EvictionPolicyUnknown`] if a node does not tell its policy
    /// (`CONFIG` disabled or renamed, as on many managed services; check the policy by hand,
    /// then use [`Warn`](Self::Warn) or [`Skip`](Self::Skip)). The default.
    #[default]
    Refuse,
    /// Connecting succeeds, and logs a `tracing` warning naming each node whose policy may
    /// evict, or whose policy it could not read, and the policy.
    Warn,
    /// Connecting does not read the policy.
    Skip,
}

/// Settings for [`RedisStore`]; see [`RedisStore::builder`].
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    layout: Result<KeyLayout, PrefixError>,
    command_timeout: Duration,
    connect_timeout: Duration,
    reply_timeout: Duration,
    health_check: Duration,
    watch: bool,
    fast_reserve: bool,
    fast_complete: bool,
    replay_time_left: bool,
    fences: bool,
    eviction_check: EvictionCheck,
}

impl Default for RedisStoreBuilder {
    fn default() -> Self {
        Self {
            layout: Ok(KeyLayout::default()),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            reply_timeout: idem_core::Options::default().reply_timeout(),
            health_check: DEFAULT_NOTICE_HEALTH_CHECK,
            watch: true,
            fast_reserve: true,
            fast_complete: true,
            replay_time_left: false,
            fences: false,
            eviction_check: EvictionCheck::Refuse,
        }
    }
}

impl RedisStoreBuilder {
    /// The prefix of every record key (default `idem:`); see [`crate::layout`]. A prefix
    /// with a brace is refused when the store is built ([`ConnectError::Prefix`]).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.layout = KeyLayout::new(prefix);
        self
    }

    /// The backstop on one command, round trips and script loading included (default
    /// [`DEFAULT_COMMAND_TIMEOUT`], 1 s, the same for every store; [`options`](Self::options)
    /// derives it from a coordinator's options). A command that takes longer fails with
    /// [`StoreError::Unavailable`], and may still have run on the server. Zero is raised to
    /// one millisecond. A reserve that the single-command path hands to the script is two
    /// commands, each with this timeout.
    ///
    /// This is not how long a call waits for Redis: the attempt's own reply deadline
    /// (`Options::reply_timeout` of `idem`, 500 ms by default) governs, and the driver drops
    /// a command whose deadline passed, then retries it as the attempt's policy says
    /// (rule 12). The driver sends its commands with [`Store::apply_bounded`], which arms
    /// no timer of the store's; the backstop bounds only commands sent with no deadline of
    /// their own ([`Store::apply`], an operator's commands). Keep it above the reply
    /// timeout, so that where both run it never decides for the attempt.
    ///
    /// [`StoreError::Unavailable`]: idem::StoreError::Unavailable
    /// [`Store::apply_bounded`]: idem::Store::apply_bounded
    /// [`Store::apply`]: idem::Store::apply
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The backstop derived from the options of the coordinator this store serves
    /// ([`idem::store::command_timeout`]: twice its reply timeout), so that the two never
    /// disagree.
    #[must_use]
    pub fn options(self, options: &idem::Options) -> Self {
        self.command_timeout(idem::store::command_timeout(options))
    }

    /// How long making a connection may take (default 1 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Whether the store announces completes and releases of records a waiter was told
    /// about, on a channel named like the record's key (`PUBLISH`, or `SPUBLISH` on a
    /// Cluster), and wakes that key's waiters with them (default on); see
    /// [`crate::notices`] and [`Store::changed`]. Without it, waiters reserve again at their
    /// backoff.
    ///
    /// [`Store::changed`]: idem::Store::changed
    #[must_use]
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// The attempt's reply timeout (`Options::reply_timeout` of `idem`; default that of
    /// `Options::default()`, 500 ms): how long the notices' connection may take to answer a
    /// `PING` or a subscription before it is given up, its waiters woken, and the
    /// connection made again. Give the one the coordinator uses. Zero is raised to one
    /// millisecond.
    #[must_use]
    pub fn reply_timeout(mut self, timeout: Duration) -> Self {
        self.reply_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How often the notices' connection is checked with a `PING`, so that a half-open
    /// connection is noticed, and how long the store waits before connecting it again after
    /// a failure (default [`DEFAULT_NOTICE_HEALTH_CHECK`], 1 s). Zero is raised to one
    /// millisecond.
    #[must_use]
    pub fn notice_health_check(mut self, every: Duration) -> Self {
        self.health_check = every.max(Duration::from_millis(1));
        self
    }

    /// Whether a reserve is first tried as one plain command, `SET key <pending record> NX
    /// PX <lease-1> GET` (default on; see [`crate::fast_reserve`]). It answers a fresh key, a
    /// replay and key reuse without a script, and hands the rest ("in flight", a value this
    /// adapter did not write) to the reserve script, at the cost of a second request. Off,
    /// every reserve is the script. A grant made by the fast reserve reports no lease end
    /// ([`idem_core::Reservation::lease_until`] is `None`), and a replay it answers does not
    /// say how long its record has left (so a driver's replay cache does not keep it). On a
    /// store with [`fences`](Self::fences), the same reserve is sent as the smallest script
    /// that can put the server's clock in it as the fence, and decided the same way.
    #[must_use]
    pub fn single_command_reserve(mut self, on: bool) -> Self {
        self.fast_reserve = on;
        self
    }

    /// Whether every grant carries a fence (MODEL.md `F1`; default off): a grant of a free
    /// key is made under the server's clock in microseconds, and the script that made it
    /// waits for the clock to read anything else, so every later grant on the server is
    /// fenced above; the reservation is written as a version-3 record that keeps its fence
    /// ([`crate::codec`]), which renewals and the holder's repeated reserve answer. On, the
    /// single-command reserve becomes the fenced fast reserve, the smallest script that
    /// writes the server's clock into the reservation (`TIME`, then `SET … NX … GET`;
    /// [`crate::scripts`]): still one round trip, at a cost to the server that BENCHMARKS.md
    /// measures. Turn it on once every process of the service runs a version that reads
    /// version-3 records. Where its monotonicity ends (a server whose
    /// clock steps back, a failover to a node whose clock is behind): MODEL.md, "Which
    /// stores hand out fences".
    #[must_use]
    pub fn fences(mut self, on: bool) -> Self {
        self.fences = on;
        self
    }

    /// Whether the fast reserve also says how long a completed record it replays has left
    /// (default off). On, the fast reserve is sent as `MULTI`, `SET … NX … GET`, `PTTL`,
    /// `EXEC`: still one round trip and one atomic step, at a cost to the server (a replay
    /// takes about 18,200 instructions instead of 8,200, BENCHMARKS.md). Turn it on with the driver's replay
    /// cache (`Coordinator::with_replay_cache`): the cache keeps only replays whose time left
    /// the store said, so without it a record completed by another process and replayed
    /// through the fast reserve is never kept (one this process completed is).
    #[must_use]
    pub fn replay_time_left(mut self, on: bool) -> Self {
        self.replay_time_left = on;
        self
    }

    /// Whether a complete is first tried as the fast complete (default on; see
    /// [`crate::scripts`]): a script without a clock or a prelude that completes the owner's
    /// own pending record if no waiter marked it, and otherwise changes nothing and hands the
    /// complete to the complete script, at the cost of a second request. Off, every complete
    /// is the complete script.
    #[must_use]
    pub fn fast_complete(mut self, on: bool) -> Self {
        self.fast_complete = on;
        self
    }

    /// What connecting does when a node's `maxmemory-policy` may evict idem's keys, or
    /// cannot be read (default [`EvictionCheck::Refuse`]).
    ///
    /// An evicted reservation or result lets the next call for its key run the action a
    /// second time, and nothing reports it: so by default a store refuses to connect to
    /// such a server, rather than serve with a guarantee it does not have. Choose
    /// [`EvictionCheck::Warn`] or [`EvictionCheck::Skip`] where `CONFIG` is disabled and the
    /// policy was checked by hand, or where the risk is accepted. Either way, an operator
    /// may change the policy later: [`RedisStore::health`] reads it again.
    #[must_use]
    pub fn eviction_check(mut self, check: EvictionCheck) -> Self {
        self.eviction_check = check;
        self
    }

    /// Connects to a standalone server at `url` (`redis://host:port/db`), and checks its
    /// `maxmemory-policy` as [`eviction_check`](Self::eviction_check) says.
    pub async fn connect(self, url: &str) -> Result<RedisStore, ConnectError> {
        let client = redis::Client::open(url).map_err(ConnectError::Config)?;
        self.from_client(client).await
    }

    /// Uses `client` for a standalone server, through a reconnecting connection manager
    /// configured with this builder's timeouts, and checks the server's `maxmemory-policy`
    /// as [`eviction_check`](Self::eviction_check) says.
    pub async fn from_client(self, client: redis::Client) -> Result<RedisStore, ConnectError> {
        let layout = self.layout.clone()?;
        let config = self.manager_config();
        let manager = self
            .first_connection(ConnectionManager::new_with_config(client.clone(), config))
            .await?;
        let address = Some(client.get_connection_info().addr().to_string());
        let connection = Connection::Standalone(manager);
        self.check_eviction(&connection, address.as_deref()).await?;
        let notices = match self.notice_source(&client)? {
            Some(source) => Some(Notices::start(source, self.notice_settings()).await),
            None => None,
        };
        Ok(self.build(layout, connection, notices, address))
    }

    /// A standalone store that connects on its first command, so that a service can start
    /// while Redis is down: its calls then fail open or closed as configured, and succeed
    /// once the server is up. Only a malformed URL is refused. Must be called inside a
    /// tokio runtime.
    ///
    /// It cannot check the server's `maxmemory-policy`, whatever
    /// [`eviction_check`](Self::eviction_check) says: the service should call
    /// [`RedisStore::health`] once the server is up (and from its health check), and treat a
    /// store that [can evict](crate::Health::can_evict) as a fault.
    pub fn connect_lazy(self, url: &str) -> Result<RedisStore, ConnectError> {
        let client = redis::Client::open(url).map_err(ConnectError::Config)?;
        self.from_client_lazy(client)
    }

    /// As [`connect_lazy`](Self::connect_lazy), with an existing client; it does not check
    /// the server's `maxmemory-policy` either (call [`RedisStore::health`]).
    pub fn from_client_lazy(self, client: redis::Client) -> Result<RedisStore, ConnectError> {
        let layout = self.layout.clone()?;
        let address = Some(client.get_connection_info().addr().to_string());
        let manager =
            ConnectionManager::new_lazy_with_config(client.clone(), self.manager_config())
                .map_err(ConnectError::Config)?;
        let notices = self
            .notice_source(&client)?
            .map(|source| Notices::spawn(source, self.notice_settings()).0);
        Ok(self.build(layout, Connection::Standalone(manager), notices, address))
    }

    /// Where a standalone store's notices come from, if it has them.
    fn notice_source(&self, client: &redis::Client) -> Result<Option<Source>, ConnectError> {
        if !self.watch {
            return Ok(None);
        }
        Source::standalone(client)
            .map(Some)
            .map_err(ConnectError::Config)
    }

    fn notice_settings(&self) -> notices::Settings {
        notices::Settings {
            connect_timeout: self.connect_timeout,
            reply_timeout: self.reply_timeout,
            health_check: self.health_check,
        }
    }

    fn manager_config(&self) -> ConnectionManagerConfig {
        // No response timeout of the manager's own: every command the store sends is
        // already bounded, by its caller's deadline or by the command timeout (`within`),
        // and a second timer per command is measurable client work at high concurrency. A
        // timed-out reply never made the manager reconnect either way.
        ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(self.connect_timeout))
            .set_number_of_retries(2)
            .set_max_delay(self.connect_timeout)
    }

    /// Connects to a Cluster through any of its nodes (`redis://host:port` each).
    ///
    /// The Cluster client is built with no request retries of its own (redis-rs retries a
    /// failed or redirected request up to 16 times by default): a command that fails,
    /// times out or meets a redirection (`MOVED`, `ASK`, `TRYAGAIN`) comes back as
    /// [`StoreError::Unavailable`] at once, and the attempt's retry policy, with its
    /// backoff and its count, is the only one (rule 12). The client still refreshes its
    /// slot map after a redirection, so the attempt's retry goes to the right node.
    ///
    /// [`StoreError::Unavailable`]: idem::StoreError::Unavailable
    ///
    /// Notices go over a second Cluster client of their own, in RESP3 (sharded pub/sub).
    ///
    /// Connecting reads the `maxmemory-policy` of every master the client knows, as
    /// [`eviction_check`](Self::eviction_check) says.
    pub async fn connect_cluster<I, U>(self, nodes: I) -> Result<RedisStore, ConnectError>
    where
        I: IntoIterator<Item = U>,
        U: redis::IntoConnectionInfo,
    {
        let nodes = nodes
            .into_iter()
            .map(redis::IntoConnectionInfo::into_connection_info)
            .collect::<Result<Vec<_>, _>>()
            .map_err(ConnectError::Config)?;
        let builder = |protocol| {
            ClusterClientBuilder::new(nodes.clone())
                .connection_timeout(self.connect_timeout)
                .response_timeout(self.command_timeout)
                .overall_response_timeout(Some(self.command_timeout))
                .retries(0)
                .use_protocol(protocol)
                .build()
                .map_err(ConnectError::Config)
        };
        let client = builder(redis::ProtocolVersion::RESP2)?;
        let notices = if self.watch {
            Some(builder(redis::ProtocolVersion::RESP3)?)
        } else {
            None
        };
        self.cluster(client, notices).await
    }

    /// Uses an existing Cluster client. Whatever timeouts it was built with, each command
    /// is also bounded by this builder's command timeout. Its request retries are its own:
    /// build it with `ClusterClientBuilder::retries(0)`, as
    /// [`connect_cluster`](Self::connect_cluster) does, so that the attempt's retry policy
    /// is the only one.
    ///
    /// Its notices subscribe through the same client, which must then speak RESP3
    /// (`ClusterClientBuilder::use_protocol`); over RESP2 every subscription fails, is
    /// counted in [`StoreStats::notice_connect_failures`](crate::StoreStats), and waiters
    /// rely on their backoff. Turn [`watch`](Self::watch) off for such a client.
    ///
    /// Connecting reads the `maxmemory-policy` of every master, as
    /// [`eviction_check`](Self::eviction_check) says.
    pub async fn from_cluster_client(
        self,
        client: ClusterClient,
    ) -> Result<RedisStore, ConnectError> {
        let notices = self.watch.then(|| client.clone());
        self.cluster(client, notices).await
    }

    async fn cluster(
        self,
        client: ClusterClient,
        notices: Option<ClusterClient>,
    ) -> Result<RedisStore, ConnectError> {
        let layout = self.layout.clone()?;
        let connection = self
            .first_connection(async move { client.get_async_connection().await })
            .await?;
        let connection = Connection::Cluster(connection);
        self.check_eviction(&connection, None).await?;
        let notices = match notices {
            Some(client) => {
                let source = Source::Cluster(Box::new(client));
                Some(Notices::start(source, self.notice_settings()).await)
            }
            None => None,
        };
        Ok(self.build(layout, connection, notices, None))
    }

    async fn first_connection<C>(
        &self,
        connecting: impl Future<Output = Result<C, RedisError>>,
    ) -> Result<C, ConnectError> {
        // Room for the connection manager's own retries.
        let limit = self.connect_timeout.saturating_mul(4);
        match tokio::time::timeout(limit, connecting).await {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(error)) => Err(ConnectError::Connect(error)),
            Err(_) => Err(ConnectError::ConnectTimeout(limit)),
        }
    }

    /// Reads every node's `maxmemory-policy` on the connection just made, and refuses,
    /// warns about or ignores a policy that may evict, as the builder's [`EvictionCheck`]
    /// says. A connection that fails meanwhile fails the connect, as the first one would.
    async fn check_eviction(
        &self,
        connection: &Connection,
        address: Option<&str>,
    ) -> Result<(), ConnectError> {
        let refuse = match self.eviction_check {
            EvictionCheck::Skip => return Ok(()),
            EvictionCheck::Refuse => true,
            EvictionCheck::Warn => false,
        };
        let readings = health::read_policies(connection, address, self.command_timeout)
            .await
            .map_err(|unreachable| match unreachable {
                Unreachable::Failed(error) => ConnectError::Connect(error),
                Unreachable::Timeout(timeout) => ConnectError::ConnectTimeout(timeout),
            })?;
        for (node, reading) in readings {
            match reading {
                Ok(policy) if policy == health::NO_EVICTION => {}
                Ok(policy) if refuse => return Err(ConnectError::EvictingPolicy { node, policy }),
                Ok(policy) => tracing::warn!(
                    node = %node,
                    policy = %policy,
                    "Redis node {node} has maxmemory-policy {policy}, which can evict idem's \
                     keys and so run an action a second time; run `CONFIG SET \
                     maxmemory-policy noeviction` on it"
                ),
                Err(source) if refuse => {
                    return Err(ConnectError::EvictionPolicyUnknown { node, source });
                }
                Err(source) => tracing::warn!(
                    node = %node,
                    error = %source,
                    "could not read the maxmemory-policy of Redis node {node} ({source}); \
                     check by hand that it is noeviction, or idem's keys may be evicted and \
                     actions run a second time"
                ),
            }
        }
        Ok(())
    }

    fn build(
        self,
        layout: KeyLayout,
        connection: Connection,
        notices: Option<Notices>,
        address: Option<String>,
    ) -> RedisStore {
        RedisStore {
            inner: Arc::new(Inner {
                connection,
                address,
                notices,
                layout,
                command_timeout: self.command_timeout,
                fast_reserve: self.fast_reserve,
                fences: self.fences,
                fast_complete: self.fast_complete,
                replay_time_left: self.replay_time_left,
                scripts: Scripts::new(),
                counters: Counters::default(),
            }),
        }
    }
}
