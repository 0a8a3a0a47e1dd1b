//! [`RedisStore`]: the record machine on Redis, standalone or Cluster.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idem::{Store, StoreError};
use idem_core::record::{Command, Completion, Refusal, Reply, Reservation, StoredResult};
use idem_core::{Body, Fingerprint, Key, Operation, OwnerToken, Timestamp};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, RedisResult, Script, Value};
use thiserror::Error;

use crate::claim::{self, Decision};
use crate::codec::{self, MAX_DEADLINE_MS};
use crate::layout::KeyLayout;
use crate::scripts::Scripts;
use crate::watch::Watch;

/// The per-command timeout used when none is configured: a backstop, not a decision.
///
/// How long a store reply is awaited is the attempt's to say (rule 12): every command the
/// driver sends carries the attempt's reply deadline (`Options::reply_timeout`, 500 ms by
/// default), and the driver drops the command when it passes, long before this backstop.
/// The backstop only bounds a command that nothing else bounds (a caller of
/// [`Store::apply`] that sets no deadline of its own), so it is set well above any reply
/// timeout an attempt uses.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// The connect timeout used when none is configured.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest lease the single-command reserve takes, 2^52 ms (some 142,000 years): its
/// end stays below [`MAX_DEADLINE_MS`] while the server's clock is below 2^52 ms. A longer
/// lease goes to the reserve script, which caps its end.
pub const MAX_CLAIM_LEASE_MS: u64 = 1 << 52;

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
}

/// A command did not answer within the per-command timeout; it may still run on the server.
#[derive(Debug, Error)]
#[error("no reply within {0:?}; the command may still have run")]
pub struct CommandTimeout(pub Duration);

/// A script answered with something that is not one of its replies.
#[derive(Debug, Error)]
#[error("unexpected reply from the {script} script: {detail}")]
pub struct UnexpectedReply {
    script: &'static str,
    detail: String,
}

/// Counters of what the store has seen since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Commands sent.
    pub commands: u64,
    /// Commands that ended in [`StoreError::Unavailable`] (timeout, I/O error, server
    /// error): their outcome is unknown.
    pub unavailable: u64,
    /// Commands refused because the key holds a value this adapter did not write.
    pub corrupt: u64,
}

#[derive(Default)]
struct Counters {
    commands: AtomicU64,
    unavailable: AtomicU64,
    corrupt: AtomicU64,
}

#[derive(Clone)]
enum Connection {
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

/// Settings for [`RedisStore`]; see [`RedisStore::builder`].
#[derive(Debug, Clone)]
pub struct RedisStoreBuilder {
    layout: KeyLayout,
    command_timeout: Duration,
    connect_timeout: Duration,
    watch: bool,
    claim: bool,
}

impl Default for RedisStoreBuilder {
    fn default() -> Self {
        Self {
            layout: KeyLayout::default(),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            watch: true,
            claim: true,
        }
    }
}

impl RedisStoreBuilder {
    /// The prefix of every record key (default `idem:`); see [`crate::layout`].
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.layout = KeyLayout::new(prefix);
        self
    }

    /// The backstop on one command, round trips and script loading included (default
    /// [`DEFAULT_COMMAND_TIMEOUT`], 5 s). A command that takes longer fails with
    /// [`StoreError::Unavailable`], and may still have run on the server. Zero is raised to
    /// one millisecond. A reserve that the single-command path hands to the script is two
    /// commands, each with this timeout.
    ///
    /// This is not how long a call waits for Redis: the attempt's own reply deadline
    /// (`Options::reply_timeout` of `idem`, 500 ms by default) governs, and the driver drops
    /// a command whose deadline passed, then retries it as the attempt's policy says
    /// (rule 12). Keep the backstop above the reply timeout, so that it never decides for
    /// the attempt; it bounds only commands sent with no deadline of their own.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How long making a connection may take (default 1 s).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Whether a standalone store announces completes and releases on the channel
    /// `{prefix}changed` and wakes its waiters with them (default on); see
    /// [`Store::changed`]. Without it, waiters reserve again at their backoff. A Cluster
    /// store never watches.
    #[must_use]
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Whether a reserve is first tried as one plain command, `SET key <claim> NX PX
    /// <lease-1> GET` (default on; see [`crate::claim`]). It answers a fresh key, a
    /// replay, key reuse and a waiter's repeated reserve without a script, and hands the
    /// rest to the reserve script, at the cost of a second request. Off, every reserve is
    /// the script. A grant made by the claim reports no lease end
    /// ([`idem_core::Reservation::lease_until`] is `None`).
    ///
    /// The claim is a record state (5) that a store from before this option existed reads
    /// as corrupt: while such stores share a server with this one, turn the option off, and
    /// on once every instance runs a version that has it.
    #[must_use]
    pub fn single_command_reserve(mut self, on: bool) -> Self {
        self.claim = on;
        self
    }

    /// Connects to a standalone server at `url` (`redis://host:port/db`).
    pub async fn connect(self, url: &str) -> Result<RedisStore, ConnectError> {
        let client = redis::Client::open(url).map_err(ConnectError::Config)?;
        self.from_client(client).await
    }

    /// Uses `client` for a standalone server, through a reconnecting connection manager
    /// configured with this builder's timeouts.
    pub async fn from_client(self, client: redis::Client) -> Result<RedisStore, ConnectError> {
        let config = self.manager_config();
        let manager = self
            .first_connection(ConnectionManager::new_with_config(client.clone(), config))
            .await?;
        let watch = if self.watch {
            let channel = format!("{}changed", self.layout.prefix());
            Some(Watch::start(client, channel, self.connect_timeout).await)
        } else {
            None
        };
        Ok(self.build(Connection::Standalone(manager), watch))
    }

    /// A standalone store that connects on its first command, so that a service can start
    /// while Redis is down: its calls then fail open or closed as configured, and succeed
    /// once the server is up. Only a malformed URL is refused. Must be called inside a
    /// tokio runtime.
    pub fn connect_lazy(self, url: &str) -> Result<RedisStore, ConnectError> {
        let client = redis::Client::open(url).map_err(ConnectError::Config)?;
        self.from_client_lazy(client)
    }

    /// As [`connect_lazy`](Self::connect_lazy), with an existing client.
    pub fn from_client_lazy(self, client: redis::Client) -> Result<RedisStore, ConnectError> {
        let manager =
            ConnectionManager::new_lazy_with_config(client.clone(), self.manager_config())
                .map_err(ConnectError::Config)?;
        let watch = self.watch.then(|| {
            let channel = format!("{}changed", self.layout.prefix());
            Watch::spawn(client, channel, self.connect_timeout).0
        });
        Ok(self.build(Connection::Standalone(manager), watch))
    }

    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.command_timeout))
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
    pub async fn connect_cluster<I, U>(self, nodes: I) -> Result<RedisStore, ConnectError>
    where
        I: IntoIterator<Item = U>,
        U: redis::IntoConnectionInfo,
    {
        let client = ClusterClientBuilder::new(nodes)
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.command_timeout)
            .overall_response_timeout(Some(self.command_timeout))
            .retries(0)
            .build()
            .map_err(ConnectError::Config)?;
        self.from_cluster_client(client).await
    }

    /// Uses an existing Cluster client. Whatever timeouts it was built with, each command
    /// is also bounded by this builder's command timeout. Its request retries are its own:
    /// build it with `ClusterClientBuilder::retries(0)`, as
    /// [`connect_cluster`](Self::connect_cluster) does, so that the attempt's retry policy
    /// is the only one.
    pub async fn from_cluster_client(
        self,
        client: ClusterClient,
    ) -> Result<RedisStore, ConnectError> {
        let connection = self
            .first_connection(async move { client.get_async_connection().await })
            .await?;
        Ok(self.build(Connection::Cluster(connection), None))
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

    fn build(self, connection: Connection, watch: Option<Watch>) -> RedisStore {
        RedisStore {
            inner: Arc::new(Inner {
                connection,
                watch,
                layout: self.layout,
                command_timeout: self.command_timeout,
                claim: self.claim,
                scripts: Scripts::new(),
                counters: Counters::default(),
            }),
        }
    }
}

/// The record machine on Redis: a [`Store`] for a standalone server or a Cluster.
///
/// Every command is one Lua script on one key ([`crate::scripts`]), judged by the server's
/// clock, except that a reserve is first tried as one plain `SET … NX … GET`
/// ([`crate::claim`]); records are laid out as in [`crate::codec`] under the keys of
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
    watch: Option<Watch>,
    layout: KeyLayout,
    command_timeout: Duration,
    claim: bool,
    scripts: Scripts,
    counters: Counters,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("connection", &self.connection)
            .field("layout", &self.layout)
            .field("command_timeout", &self.command_timeout)
            .field("watch", &self.watch.as_ref().map(Watch::channel))
            .field("single_command_reserve", &self.claim)
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

    /// What the store has counted so far.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.counters;
        StoreStats {
            commands: c.commands.load(Ordering::Relaxed),
            unavailable: c.unavailable.load(Ordering::Relaxed),
            corrupt: c.corrupt.load(Ordering::Relaxed),
        }
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
        let result = self.run(operation, key, &command).await;
        self.count(result)
    }

    /// Counts one request and how it ended.
    fn count<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let counters = &self.inner.counters;
        counters.commands.fetch_add(1, Ordering::Relaxed);
        match &result {
            Err(StoreError::Corrupt { .. }) => {
                counters.corrupt.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                counters.unavailable.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
        }
        result
    }

    async fn run(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let redis_key = self.inner.layout.record_key(operation, key);
        let scripts = &self.inner.scripts;
        let channel = || {
            self.inner
                .watch
                .as_ref()
                .map_or_else(Vec::new, |watch| watch.channel().as_bytes().to_vec())
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
                    if self.inner.watch.is_some() {
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
        let mut invocation = script.key(&redis_key);
        for arg in args {
            invocation.arg(arg);
        }
        let call = async {
            match &self.inner.connection {
                Connection::Standalone(manager) => {
                    invocation.invoke_async::<Value>(&mut manager.clone()).await
                }
                Connection::Cluster(cluster) => {
                    invocation.invoke_async::<Value>(&mut cluster.clone()).await
                }
            }
        };
        let value = self.within_timeout(command, call).await?;
        parse_reply(command, &redis_key, value)
    }

    /// The lease of `command` in milliseconds if it is a reserve to try as a claim. The key
    /// expires one millisecond before the lease end, so a lease under two milliseconds
    /// (only a test sends one) is left to the script; so is one over [`MAX_CLAIM_LEASE_MS`],
    /// whose end could pass the largest deadline a record holds, where the script caps it.
    fn claim_lease(&self, command: &Command) -> Option<u64> {
        let Command::Reserve { lease, .. } = command else {
            return None;
        };
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        (self.inner.claim && (2..=MAX_CLAIM_LEASE_MS).contains(&lease_ms)).then_some(lease_ms)
    }

    /// The single-command reserve ([`crate::claim`]) with a lease of `lease_ms`: the record
    /// machine's reply, or `None` when the reserve script must decide.
    async fn claim(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
        lease_ms: u64,
    ) -> Result<Option<Reply>, StoreError> {
        let Command::Reserve {
            owner, fingerprint, ..
        } = command
        else {
            return Ok(None);
        };
        let redis_key = self.inner.layout.record_key(operation, key);
        let mut set = redis::cmd("SET");
        set.arg(&redis_key)
            .arg(codec::encode_claim(*owner, *fingerprint))
            .arg("NX")
            .arg("PX")
            .arg(lease_ms - 1)
            .arg("GET");
        let call = async {
            let reply = match &self.inner.connection {
                Connection::Standalone(manager) => {
                    set.query_async::<Value>(&mut manager.clone()).await
                }
                Connection::Cluster(cluster) => {
                    set.query_async::<Value>(&mut cluster.clone()).await
                }
            };
            match reply {
                // The server refused the command, so it changed nothing: a key of another
                // type (`WRONGTYPE`), or a write refused where the script may still answer
                // by reading (`OOM` under `maxmemory`, which refuses `SET … NX` even when
                // it would not write). The script decides, or reports the error itself.
                Err(error) if error.code().is_some() => Ok(None),
                other => other.map(Some),
            }
        };
        let held = match self.within_timeout(command, call).await? {
            None => return Ok(None),
            Some(Value::Nil) => None,
            Some(Value::BulkString(bytes)) => Some(bytes),
            Some(other) => {
                return Err(StoreError::unavailable(
                    command,
                    UnexpectedReply {
                        script: "claim",
                        detail: format!("{other:?}"),
                    },
                ));
            }
        };
        let watch = self.inner.watch.is_some();
        Ok(
            match claim::decide(held.as_deref(), *owner, *fingerprint, watch) {
                Decision::Answer(reply) => Some(reply),
                Decision::Script => None,
            },
        )
    }

    /// Awaits `call` within the backstop timeout; every failure is `Unavailable`. A driver
    /// that gives the command up at the attempt's reply deadline drops this future first.
    async fn within_timeout<T>(
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

impl Store for RedisStore {
    async fn apply(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<Reply, StoreError> {
        if let Some(lease_ms) = self.claim_lease(&command)
            && let Some(reply) = self.count(self.claim(operation, key, &command, lease_ms).await)?
        {
            return Ok(reply);
        }
        self.apply_timed(operation, key, command)
            .await
            .map(|(reply, _)| reply)
    }

    /// On a standalone store with its watch on, resolves when a complete or release of
    /// this record is announced (see [`crate::watch`]); otherwise never, and the waiter's
    /// backoff governs.
    fn changed(&self, operation: &Operation, key: &Key) -> impl Future<Output = ()> + Send {
        let watch = self.inner.watch.as_ref().map(|watch| {
            let redis_key = self.inner.layout.record_key(operation, key);
            watch.changed(redis_key)
        });
        async move {
            match watch {
                Some(changed) => changed.await,
                None => std::future::pending().await,
            }
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

/// Turns a script's `{tag, now, …}` array into the record machine's reply.
fn parse_reply(
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
                    let reservation = Reservation {
                        owner,
                        lease_until: Some(Timestamp::from_millis(until)),
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
                lease_until: Timestamp::from_millis(until),
            },
            None => return Err(unexpected(format!("lease {field:?}"))),
        },
        (Command::Reserve { .. }, b'P') => match field {
            None => Reply::Replay {
                result: StoredResult::NotStored,
            },
            Some(Value::BulkString(body)) => Reply::Replay {
                result: StoredResult::Value(Body::new(body)),
            },
            Some(other) => return Err(unexpected(format!("body {other:?}"))),
        },
        (Command::Reserve { .. }, b'U') if field.is_none() => Reply::Replay {
            result: StoredResult::Panicked,
        },
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
        (Command::Read, b'V') => match field {
            Some(Value::BulkString(raw)) => match codec::decode(&raw) {
                Ok(record) => Reply::Read(Some(record)),
                Err(error) => {
                    return Err(StoreError::Corrupt {
                        key: redis_key.to_owned(),
                        detail: error.to_string(),
                    });
                }
            },
            other => return Err(unexpected(format!("record {other:?}"))),
        },
        (_, tag) => return Err(unexpected(format!("tag {:?}", char::from(tag)))),
    };
    Ok((reply, now))
}
