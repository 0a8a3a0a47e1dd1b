//! Change notices: waking a waiter when the record it waits on stops being pending.
//!
//! **Per key.** A notice is published on a channel named exactly like the record's Redis key,
//! so it hashes to the key's slot. On a standalone server the complete and release scripts
//! `PUBLISH` it; on a Cluster they `SPUBLISH` it (sharded pub/sub, Redis 7), which reaches the
//! subscribers on the key's own shard only. A store subscribes to the channel of a key only
//! while one of its callers waits on that key, and each notice wakes the waiters of its key
//! alone.
//!
//! **Only what a waiter was told about.** The reserve that answers "in flight" writes the
//! waiter's mark on the pending record (MODEL.md, "Redis": the record machine's `InFlight`
//! with its store-side mark), in the same atomic step; the complete or release of a marked
//! record publishes. An uncontended call publishes nothing.
//!
//! **None lost.** A registration is made in this process before the reserve that may answer
//! "in flight" ([`idem::Store::watch`], which the driver calls before each reserve it sends
//! again while it waits); if the key's channel was already subscribed, every notice after the
//! registration reaches it. A registration that is not live at once (its subscription is
//! still being made), or one made after the "in flight" reply ([`idem::Store::changed`], the
//! first wait of a call), reads the record once the subscription is live and wakes at once if
//! the key no longer holds a pending record: a completion between the reply and the
//! subscription is seen by that read, one after it by the subscription.
//!
//! **Checked.** One task keeps the subscriptions of a store on their own connection (one
//! multiplexed RESP3 connection, or one per Cluster node), sends a `PING` on it every
//! [`health check`](crate::RedisStoreBuilder::notice_health_check) interval and gives it the
//! reply timeout; a failed `PING`, a dropped connection or a failed subscription
//! ends the connection: every waiter is woken (it reserves again, so nothing is lost), and
//! the task connects and subscribes again after one interval.
//!
//! **Followed.** When the server drops a subscription the store still wants (on a Cluster,
//! the node that loses a slot to another master unsubscribes its clients from the slot's
//! sharded channels), the channel is subscribed again, on the slot's new owner, and once it is
//! live each of the key's waiters reads the record again, as a registration that was not live
//! at once does; a failed subscription ends the connection as above.
//!
//! **A hint, never a result.** A notice carries no data and is never trusted for the result:
//! a woken waiter reserves again and reads the record. A missed notice (the subscription
//! down) only delays a waiter to its backoff; a lease that simply runs out is not announced.

mod link;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

pub(crate) use self::link::Source;

/// What a waiter's registration sees of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Signal {
    /// Notices and wake-ups of the key so far.
    wakes: u64,
    /// Whether the key's channel is subscribed on a live connection.
    live: bool,
}

/// One key's subscription in this process.
struct Entry {
    /// Registrations alive.
    refs: usize,
    /// Which entry of this key this is: an entry removed and made again is another one.
    generation: u64,
    signal: watch::Sender<Signal>,
}

/// What the registrations ask of the connection task.
#[derive(Debug)]
enum Request {
    /// Subscribe to the key's channel; then the entry of this generation is live.
    Subscribe { key: String, generation: u64 },
    /// The key's last registration went: unsubscribe unless someone registered again.
    Release { key: String },
}

/// Settings of the notices' connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// How long connecting may take.
    pub(crate) connect_timeout: Duration,
    /// How long a `PING` or a subscription may take before the connection is given up.
    pub(crate) reply_timeout: Duration,
    /// How often the connection is checked, and how long to wait before connecting again.
    pub(crate) health_check: Duration,
}

/// What the notices count, for [`crate::StoreStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) connections_lost: AtomicU64,
    pub(crate) connect_failures: AtomicU64,
    pub(crate) rechecks: AtomicU64,
    pub(crate) resubscribes: AtomicU64,
}

/// The registry and its connection's task.
struct Shared {
    registry: Mutex<HashMap<String, Entry>>,
    requests: mpsc::UnboundedSender<Request>,
    generations: AtomicU64,
    counters: Counters,
}

impl Shared {
    fn registry(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // The registry's state stays consistent at every step: a panic elsewhere leaves it
        // usable.
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the waiters of `key` (a notice).
    fn notice(&self, key: &[u8]) {
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        if let Some(entry) = self.registry().get(key) {
            entry.signal.send_modify(|signal| signal.wakes += 1);
        }
    }

    /// The entry of `key` of `generation` is subscribed.
    fn subscribed(&self, key: &str, generation: u64) {
        if let Some(entry) = self.registry().get(key)
            && entry.generation == generation
        {
            entry.signal.send_modify(|signal| signal.live = true);
        }
    }

    /// The server dropped the subscription of `key`'s channel (a Cluster slot moved to
    /// another node): if the key is still wanted, it is no longer live, so each of its
    /// waiters reads the record again once it is subscribed again (a notice published
    /// meanwhile is missed, and the read sees what it announced), and the entry's generation is
    /// returned for that subscription. `None` if nobody waits on the key any more.
    fn dropped(&self, key: &[u8]) -> Option<u64> {
        let key = std::str::from_utf8(key).ok()?;
        let registry = self.registry();
        let entry = registry.get(key).filter(|entry| entry.refs > 0)?;
        entry.signal.send_modify(|signal| signal.live = false);
        Some(entry.generation)
    }

    /// The connection is gone: no key is subscribed, and every waiter is woken, since
    /// notices may be missed from now on.
    fn lost(&self) {
        for entry in self.registry().values() {
            entry.signal.send_modify(|signal| {
                signal.live = false;
                signal.wakes += 1;
            });
        }
    }

    /// Every key with registrations, with its generation, to subscribe on a new connection;
    /// entries nobody holds any more are dropped.
    fn wanted(&self) -> Vec<(String, u64)> {
        let mut registry = self.registry();
        registry.retain(|_, entry| entry.refs > 0);
        registry
            .iter()
            .map(|(key, entry)| (key.clone(), entry.generation))
            .collect()
    }

    /// Removes `key`'s entry if nobody holds it; whether it was removed.
    fn release(&self, key: &str) -> bool {
        let mut registry = self.registry();
        if registry.get(key).is_some_and(|entry| entry.refs == 0) {
            registry.remove(key);
            true
        } else {
            false
        }
    }
}

/// A store's notices: the per-key registry and the task that keeps its subscriptions.
pub(crate) struct Notices {
    shared: Arc<Shared>,
    publish: &'static str,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notices")
            .field("publish", &self.publish)
            .finish_non_exhaustive()
    }
}

impl Drop for Notices {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Notices {
    /// Starts the connection task and waits up to the connect timeout for its first
    /// connection (a store without it still works; its waiters re-read once it is made).
    pub(crate) async fn start(source: Source, settings: Settings) -> Self {
        let (notices, first) = Self::spawn(source, settings);
        let _ = tokio::time::timeout(settings.connect_timeout, first).await;
        notices
    }

    /// Starts the connection task in the background; the receiver hears of its first
    /// connection. Must be called inside a tokio runtime.
    pub(crate) fn spawn(source: Source, settings: Settings) -> (Self, oneshot::Receiver<()>) {
        let (requests, received) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            registry: Mutex::new(HashMap::new()),
            requests,
            generations: AtomicU64::new(0),
            counters: Counters::default(),
        });
        let publish = source.publish_command();
        let (connected, first) = oneshot::channel();
        let task = tokio::spawn(link::run(
            Arc::downgrade(&shared),
            source,
            settings,
            received,
            connected,
        ));
        let notices = Self {
            shared,
            publish,
            task,
        };
        (notices, first)
    }

    /// The command the scripts publish a notice with: `PUBLISH` or `SPUBLISH`.
    pub(crate) fn publish_command(&self) -> &'static str {
        self.publish
    }

    /// What the notices counted.
    pub(crate) fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Registers a waiter on `key` (a record's Redis key) from now on.
    pub(crate) fn register(&self, key: String) -> Registration {
        let mut registry = self.shared.registry();
        let entry = registry.entry(key.clone()).or_insert_with(|| {
            let generation = self.shared.generations.fetch_add(1, Ordering::Relaxed);
            let _ = self.shared.requests.send(Request::Subscribe {
                key: key.clone(),
                generation,
            });
            Entry {
                refs: 0,
                generation,
                signal: watch::Sender::new(Signal {
                    wakes: 0,
                    live: false,
                }),
            }
        });
        entry.refs += 1;
        let signal = entry.signal.subscribe();
        let at_call = *signal.borrow();
        Registration {
            shared: Arc::clone(&self.shared),
            generation: entry.generation,
            key,
            signal,
            at_call,
        }
    }
}

/// When a registration reads the record before trusting its subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recheck {
    /// Made after an "in flight" reply: read once the subscription is live.
    Always,
    /// Made before the reserve: read only if the subscription was not live at once.
    IfNotLive,
}

/// One waiter on one key; unregisters when dropped.
pub(crate) struct Registration {
    shared: Arc<Shared>,
    key: String,
    generation: u64,
    signal: watch::Receiver<Signal>,
    at_call: Signal,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut registry = self.shared.registry();
        if let Some(entry) = registry.get_mut(&self.key)
            && entry.generation == self.generation
        {
            entry.refs -= 1;
            if entry.refs == 0 {
                let _ = self.shared.requests.send(Request::Release {
                    key: self.key.clone(),
                });
            }
        }
    }
}

impl Registration {
    /// Resolves at the first notice or wake-up of the key since the registration, or as
    /// soon as a read of the record made once the subscription is live (`pending`, which
    /// answers whether the key still holds a pending record) finds it no longer pending. The
    /// record is read when `recheck` asks for it, and again each time the subscription comes
    /// back after the server dropped it (a Cluster slot moved): a notice published while it
    /// was down is missed, and the read sees what it announced.
    pub(crate) async fn wait<F>(mut self, recheck: Recheck, pending: impl Fn() -> F)
    where
        F: Future<Output = bool>,
    {
        let start = self.at_call;
        let wakes = start.wakes;
        // Whether the record must be read once the subscription is live.
        let mut read = !(start.live && recheck == Recheck::IfNotLive);
        loop {
            // A notice or a wake-up; or the subscription live when a read is due; or
            // dropped when none is.
            let Ok(now) = self
                .signal
                .wait_for(|signal| signal.wakes != wakes || signal.live == read)
                .await
                .map(|signal| *signal)
            else {
                // The store is gone; the waiter's backoff governs.
                return std::future::pending().await;
            };
            if now.wakes != wakes {
                return;
            }
            if !now.live {
                read = true;
                continue;
            }
            let still_pending = pending().await;
            self.shared
                .counters
                .rechecks
                .fetch_add(1, Ordering::Relaxed);
            if !still_pending {
                return;
            }
            read = false;
        }
    }
}
