//! The Redis and Redis Cluster store of idem.
//!
//! [`RedisStore`] implements the driver's [`idem::Store`]: the record machine of
//! `idem-core`, one atomic server-side step per command.
//!
//! - [`layout`]: the Redis key of a record, `{prefix}{operation}:{key}` (default prefix
//!   `idem:`), injective for a fixed prefix.
//! - [`claim`]: the single-command reserve, `SET … NX … GET`, which answers a fresh key,
//!   a replay and key reuse without a script.
//! - [`codec`]: the compact, versioned record encoding (60 bytes plus the body).
//! - [`scripts`]: the Lua scripts, one per command, each on one key and judged by the
//!   server's `TIME`, so they run unchanged on a Cluster.
//! - [`watch`]: change notices that wake waiters on a standalone server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), idem_redis::ConnectError> {
//! use std::time::Duration;
//! use idem_redis::RedisStore;
//!
//! let store = RedisStore::builder()
//!     .prefix("billing:")
//!     .command_timeout(Duration::from_millis(500))
//!     .connect("redis://127.0.0.1:6379")
//!     .await?;
//! # let _ = store;
//! # Ok(())
//! # }
//! ```
//!
//! Needs Redis 7.0 or later (`SET … NX … GET`, `PEXPIRETIME`); tested on Redis 7.0.
//!
//! What Redis guarantees and what it does not (a restart without persistence, asynchronous
//! replication and failover) is in MODEL.md, section "Redis".

pub mod claim;
pub mod codec;
pub mod layout;
pub mod scripts;
mod store;
pub mod watch;

pub use codec::DecodeError;
pub use layout::{DEFAULT_PREFIX, KeyLayout};
pub use store::{
    CommandTimeout, ConnectError, DEFAULT_COMMAND_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    MAX_CLAIM_LEASE_MS, RedisStore, RedisStoreBuilder, StoreStats, UnexpectedReply,
};
