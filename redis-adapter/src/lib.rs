//! idem's records in Redis or Redis Cluster: the store for services that run in more than
//! one process, so that a retry that reaches another process still finds the first
//! attempt's reservation or result under its idempotency key.
//!
//! [`RedisStore`] implements the driver's [`idem::Store`]: the record machine of
//! `idem-core`, one atomic server-side step per command.
//!
//! - [`layout`]: the Redis key of a record, `{prefix}{}{operation}:{key}` (default prefix
//!   `idem:`): hashed whole on a Cluster, so no client chooses a slot, and never shared by two
//!   prefixes.
//! - [`fast_reserve`]: the single-command reserve, `SET … NX … GET`, which answers a fresh key,
//!   a replay and key reuse without a script.
//! - [`codec`]: the compact, versioned record encoding (52 bytes plus the body); a record is
//!   live exactly while its key exists, and its deadline is the key's expiry.
//! - [`scripts`]: the Lua scripts, one per command, each on one key and judged by the
//!   server's `TIME`, so they run unchanged on a Cluster.
//! - [`notices`]: change notices, per key, that wake waiters on a standalone server and on
//!   a Cluster (sharded pub/sub).
//!
//! ```no_run
//! # async fn demo() -> Result<(), idem_redis::ConnectError> {
//! use idem::{Coordinator, Options};
//! use idem_redis::RedisStore;
//!
//! let store = RedisStore::builder()
//!     .prefix("billing:")
//!     .connect("redis://127.0.0.1:6379")
//!     .await?;
//! let payments = Coordinator::new(store, Options::default());
//! # let _ = payments;
//! # Ok(())
//! # }
//! ```
//!
//! # Timers and retries are the attempt's
//!
//! How long a reply is awaited, and whether and when a command is sent again, is decided by
//! the attempt machine of `idem-core` (rule 12): each command carries the attempt's reply
//! deadline (`Options::reply_timeout`, 500 ms by default), the driver drops a command whose
//! deadline passed, and the attempt retries it with its own backoff. The store adds no
//! policy of its own: its per-command timeout
//! ([`RedisStoreBuilder::command_timeout`], 1 s by default, twice the default reply deadline
//! as for every store) is only a backstop for commands sent without a deadline
//! (`Store::apply`; the driver sends with `Store::apply_bounded`, and the store arms no timer
//! for those), the standalone connection never resends a command (it only
//! reconnects), and the Cluster client is built with no request retries.
//!
//! # A server that may evict is refused
//!
//! Every key the store writes has a TTL, so any `maxmemory-policy` but `noeviction` lets
//! Redis evict a live record, and the next call for its key runs the action again.
//! Connecting reads the policy (of every master, on a Cluster) and by default refuses such a
//! server ([`EvictionCheck`], [`ConnectError::EvictingPolicy`]); [`RedisStore::health`]
//! reads it again at any time.
//!
//! Needs Redis 7.0 or later (`SET … NX … GET`, `PEXPIRETIME`); tested on Redis 7.0.
//!
//! What Redis guarantees and what it does not (a restart without persistence, asynchronous
//! replication and failover) is in MODEL.md, section "Redis".

pub mod codec;
pub mod fast_reserve;
pub mod layout;
pub mod notices;
pub mod scripts;
mod store;

pub use codec::DecodeError;
pub use layout::{DEFAULT_PREFIX, KeyLayout, PrefixError};
pub use store::{
    CommandTimeout, ConnectError, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_NOTICE_HEALTH_CHECK, EvictionCheck, Health, HealthError, MAX_FAST_RESERVE_LEASE_MS,
    NO_EVICTION, NodePolicy, PolicyReadError, RedisStore, RedisStoreBuilder, StoreStats,
    UnexpectedReply,
};
