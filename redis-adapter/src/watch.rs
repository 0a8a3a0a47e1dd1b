//! Change notices on a standalone server: waking waiters when a record stops being pending.
//!
//! The complete and release scripts publish the record's Redis key on one channel,
//! `{prefix}changed`, in the same atomic step as their write. Each store keeps one
//! subscription to it and fans the keys out to its waiters ([`idem::Store::changed`]), so a
//! caller waiting on an identical request reserves again as soon as the holder is done,
//! instead of at its next backoff.
//!
//! Notices are a speed-up, never a correctness condition: a waiter that misses one (the
//! subscription was down, the waiter lagged) reserves again at its backoff, as without a
//! watch. A lease that simply runs out is not announced. After every (re)subscription all
//! waiters are woken once, spuriously, since notices may have been missed meanwhile.
//! Every waiter sees every notice of its store and ignores the others'; that is cheap for
//! the few waiters a store has at once.
//!
//! A Cluster store has no watch (publishing from a script would be broadcast to every
//! node); its waiters rely on their backoff.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

/// Sent to every waiter after a (re)subscription. Never a record key: those always hold a
/// ':' after the operation.
const EVERYONE: &str = "*";

/// How long to wait before subscribing again after the subscription was lost.
const RESUBSCRIBE_AFTER: Duration = Duration::from_millis(100);

/// The subscription and its waiters.
#[derive(Debug)]
pub(crate) struct Watch {
    channel: String,
    changes: broadcast::Sender<Arc<str>>,
    task: JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watch {
    /// Subscribes to `channel` on `client`'s server, waiting up to `connect_timeout` for
    /// the first subscription (later ones happen in the background).
    pub(crate) async fn start(
        client: redis::Client,
        channel: String,
        connect_timeout: Duration,
    ) -> Self {
        let (changes, _) = broadcast::channel(1024);
        let (subscribed, first) = oneshot::channel();
        let task = tokio::spawn(listen(
            client,
            channel.clone(),
            changes.clone(),
            connect_timeout,
            subscribed,
        ));
        // A store without its first subscription still works; it wakes no one until the
        // subscription is made.
        let _ = tokio::time::timeout(connect_timeout, first).await;
        Self {
            channel,
            changes,
            task,
        }
    }

    /// The channel the scripts publish on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    /// Resolves when `redis_key` is announced (or on a spurious wake-up). The watch starts
    /// now, at the call, so a notice that lands before the first poll is not lost.
    pub(crate) fn changed(&self, redis_key: String) -> impl Future<Output = ()> + Send + 'static {
        let mut changes = self.changes.subscribe();
        async move {
            loop {
                match changes.recv().await {
                    Ok(key) if *key == *redis_key || &*key == EVERYONE => return,
                    Ok(_) => {}
                    // Missed notices might have been ours.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }
}

async fn listen(
    client: redis::Client,
    channel: String,
    changes: broadcast::Sender<Arc<str>>,
    connect_timeout: Duration,
    subscribed: oneshot::Sender<()>,
) {
    let mut subscribed = Some(subscribed);
    loop {
        let connecting = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        if let Ok(Ok(mut pubsub)) = tokio::time::timeout(connect_timeout, connecting).await {
            if let Some(subscribed) = subscribed.take() {
                let _ = subscribed.send(());
            }
            let _ = changes.send(Arc::from(EVERYONE));
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                if let Ok(key) = std::str::from_utf8(message.get_payload_bytes()) {
                    let _ = changes.send(Arc::from(key));
                }
            }
        }
        tokio::time::sleep(RESUBSCRIBE_AFTER).await;
    }
}
