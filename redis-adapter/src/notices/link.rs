//! The notices' connection and the task that keeps it: subscriptions as the registry asks,
//! notices into the registry, a `PING` every health-check interval, a subscription the
//! server dropped made again (its key's waiters read the record again once it is live), and
//! a new connection (every key subscribed again, every waiter woken) whenever the old one
//! fails.

use std::collections::HashMap;
use std::sync::Weak;
use std::sync::atomic::Ordering;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};

use super::{Request, Settings, Shared};

/// Where the notices come from.
#[derive(Clone)]
pub(crate) enum Source {
    /// A standalone server: plain pub/sub on one RESP3 connection.
    Standalone(redis::Client),
    /// A Cluster: sharded pub/sub, each key's channel on its slot's node. The client must
    /// speak RESP3.
    Cluster(Box<ClusterClient>),
}

impl Source {
    /// A standalone server at `client`'s address, spoken to in RESP3 (pub/sub pushes and
    /// commands on one connection).
    pub(crate) fn standalone(client: &redis::Client) -> RedisResult<Self> {
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        Ok(Self::Standalone(redis::Client::open(
            info.set_redis_settings(settings),
        )?))
    }

    /// The command that publishes a notice where this source listens.
    pub(super) fn publish_command(&self) -> &'static str {
        match self {
            Self::Standalone(_) => "PUBLISH",
            Self::Cluster(_) => "SPUBLISH",
        }
    }

    async fn connect(&self, pushes: mpsc::UnboundedSender<PushInfo>) -> RedisResult<Link> {
        match self {
            Self::Standalone(client) => {
                let config = AsyncConnectionConfig::new().set_push_sender(pushes);
                let connection = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Link::Standalone(connection))
            }
            Self::Cluster(client) => {
                let config = redis::cluster::ClusterConfig::new().set_push_sender(pushes);
                let connection = client.get_async_connection_with_config(config).await?;
                Ok(Link::Cluster(connection))
            }
        }
    }
}

/// A live connection of the notices.
enum Link {
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Link {
    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Self::Standalone(connection) => connection.subscribe(channel).await,
            Self::Cluster(connection) => {
                let subscribed = connection.ssubscribe(channel).await;
                redirected(connection, subscribed, "SSUBSCRIBE", channel).await
            }
        }
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Self::Standalone(connection) => connection.unsubscribe(channel).await,
            Self::Cluster(connection) => {
                let unsubscribed = connection.sunsubscribe(channel).await;
                redirected(connection, unsubscribed, "SUNSUBSCRIBE", channel).await
            }
        }
    }

    /// A `PING` on the connection (on a Cluster, on every node's).
    async fn ping(&mut self) -> RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            Self::Standalone(connection) => ping.query_async::<Value>(connection).await,
            Self::Cluster(connection) => ping.query_async::<Value>(connection).await,
        }
        .map(drop)
    }
}

/// A sharded (un)subscription the Cluster answered with a redirection (the channel's slot
/// moved to another node since the connection learned the slot map): the client hands such an
/// answer back as it is, without following it. Sent again as a plain command, which the
/// client follows to the slot's new owner, learning the new slot map on the way; its one
/// reply is the server's confirmation.
async fn redirected(
    connection: &mut ClusterConnection,
    answer: RedisResult<()>,
    command: &str,
    channel: &str,
) -> RedisResult<()> {
    match answer {
        Err(error) if error.redirect_node().is_some() => redis::cmd(command)
            .arg(channel)
            .query_async::<Value>(connection)
            .await
            .map(drop),
        answer => answer,
    }
}

/// Why a connection ended.
enum Ended {
    /// The store is gone.
    StoreDropped,
    /// The connection failed (a dropped connection, a failed `PING` or subscription).
    Failed,
}

/// The task: connect, subscribe what the registry wants, serve, and start over after a
/// failure, one health-check interval later. Ends when the store is dropped.
pub(super) async fn run(
    shared: Weak<Shared>,
    source: Source,
    settings: Settings,
    mut requests: mpsc::UnboundedReceiver<Request>,
    connected: oneshot::Sender<()>,
) {
    let mut connected = Some(connected);
    loop {
        let (pushes, mut received) = mpsc::unbounded_channel();
        let connecting = tokio::time::timeout(settings.connect_timeout, source.connect(pushes));
        let ended = match connecting.await {
            Ok(Ok(mut link)) => {
                if let Some(connected) = connected.take() {
                    let _ = connected.send(());
                }
                let ended = serve(&shared, &mut link, settings, &mut requests, &mut received).await;
                if let (Ended::Failed, Some(shared)) = (&ended, shared.upgrade()) {
                    shared
                        .counters
                        .connections_lost
                        .fetch_add(1, Ordering::Relaxed);
                }
                ended
            }
            _ => {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                shared
                    .counters
                    .connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                Ended::Failed
            }
        };
        {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if matches!(ended, Ended::Failed) {
                shared.lost();
            }
        }
        if matches!(ended, Ended::StoreDropped) {
            return;
        }
        // Requests made meanwhile are served by the next connection, which subscribes
        // every key the registry holds then.
        tokio::time::sleep(settings.health_check).await;
        while requests.try_recv().is_ok() {}
    }
}

/// Whether `call` succeeded within the reply timeout.
async fn answered(settings: Settings, call: impl Future<Output = RedisResult<()>>) -> bool {
    matches!(
        tokio::time::timeout(settings.reply_timeout, call).await,
        Ok(Ok(()))
    )
}

/// The unsubscriptions this task sent on one connection whose confirmations have not been
/// read yet: an unsubscribe push that is not one of them comes from the server.
#[derive(Default)]
struct Unsubscribes(HashMap<Vec<u8>, usize>);

impl Unsubscribes {
    /// An unsubscription of `channel` was sent.
    fn sent(&mut self, channel: &str) {
        *self.0.entry(channel.as_bytes().to_vec()).or_default() += 1;
    }

    /// Whether an unsubscribe push for `channel` confirms one this task sent (and takes it).
    fn confirmed(&mut self, channel: &[u8]) -> bool {
        let Some(count) = self.0.get_mut(channel) else {
            return false;
        };
        *count -= 1;
        if *count == 0 {
            self.0.remove(channel);
        }
        true
    }
}

/// Serves one connection until it fails or the store is dropped.
async fn serve(
    shared: &Weak<Shared>,
    link: &mut Link,
    settings: Settings,
    requests: &mut mpsc::UnboundedReceiver<Request>,
    received: &mut mpsc::UnboundedReceiver<PushInfo>,
) -> Ended {
    // What the registry wanted before this connection: subscribe it all again.
    let wanted = match shared.upgrade() {
        Some(shared) => shared.wanted(),
        None => return Ended::StoreDropped,
    };
    for (key, generation) in wanted {
        if !answered(settings, link.subscribe(&key)).await {
            return Ended::Failed;
        }
        match shared.upgrade() {
            Some(shared) => shared.subscribed(&key, generation),
            None => return Ended::StoreDropped,
        }
    }
    let mut own = Unsubscribes::default();
    let mut health = tokio::time::interval(settings.health_check);
    health.tick().await;
    loop {
        tokio::select! {
            biased;
            push = received.recv() => {
                let Some(push) = push else { return Ended::Failed };
                match push.kind {
                    PushKind::Disconnection => return Ended::Failed,
                    PushKind::Message | PushKind::SMessage => {
                        let Some(shared) = shared.upgrade() else { return Ended::StoreDropped };
                        if let Some(Value::BulkString(channel)) = push.data.first() {
                            shared.notice(channel);
                        }
                    }
                    PushKind::Unsubscribe | PushKind::SUnsubscribe => {
                        let Some(Value::BulkString(channel)) = push.data.first() else {
                            continue;
                        };
                        if own.confirmed(channel) {
                            continue;
                        }
                        // Not ours: the server dropped the subscription.
                        let Some(shared) = shared.upgrade() else { return Ended::StoreDropped };
                        let Some(generation) = shared.dropped(channel) else { continue };
                        shared.counters.resubscribes.fetch_add(1, Ordering::Relaxed);
                        let key = String::from_utf8_lossy(channel);
                        if !answered(settings, link.subscribe(&key)).await {
                            return Ended::Failed;
                        }
                        shared.subscribed(&key, generation);
                    }
                    _ => {}
                }
            }
            request = requests.recv() => {
                let Some(request) = request else { return Ended::StoreDropped };
                let Some(shared) = shared.upgrade() else { return Ended::StoreDropped };
                match request {
                    Request::Subscribe { key, generation } => {
                        if !answered(settings, link.subscribe(&key)).await {
                            return Ended::Failed;
                        }
                        shared.subscribed(&key, generation);
                    }
                    Request::Release { key } => {
                        if shared.release(&key) {
                            own.sent(&key);
                            if !answered(settings, link.unsubscribe(&key)).await {
                                return Ended::Failed;
                            }
                        }
                    }
                }
            }
            _ = health.tick() => {
                if !answered(settings, link.ping()).await {
                    return Ended::Failed;
                }
            }
        }
    }
}
