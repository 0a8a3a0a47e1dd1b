//! The store: where records live, as the record machine's commands over async I/O.
//!
//! A [`Store`] is an implementation of exactly the record machine of `idem-core`
//! ([`idem_core::record::apply`]): for every command it must give the reply that machine
//! gives for the key's current state at the store's own `now`, and leave the key in the
//! state that machine leaves it in, atomically with respect to every other command on the
//! same key. Leases and retention are judged by the store's clock, never the caller's
//! (MODEL.md, rule 10). One latitude: a store that grants a free key without reading its
//! clock may leave the grant's lease end unsaid (`Reservation::lease_until` is `None`); the
//! attempt never reads it. `MemoryStore` calls `apply` under a lock; the Redis adapter runs
//! one server-side script per command, after a single-command reserve that needs no clock,
//! and is tested step for step against `apply`.

use std::error::Error as StdError;
use std::future::Future;

use idem_core::record::{Command, CommandKind, Reply};
use idem_core::{Key, Operation};
use thiserror::Error;

/// A boxed error from a store's backend (a Redis error, an I/O error).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Every store's own command timeout by default, 1 s: [`command_timeout`] of the default
/// [`Options`](idem_core::Options). One default for every store crate.
pub const DEFAULT_COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// The command timeout a store should use under a coordinator with `options`: twice the
/// attempt's reply deadline ([`Options::reply_timeout`](idem_core::Options::reply_timeout)).
///
/// It is a backstop, derived from the one source of timers, the core's options (rule 12):
/// under a coordinator, the attempt gives a command up at its reply deadline and the driver
/// drops it, so the store's timeout never decides for the attempt; it bounds only a command
/// that nothing else bounds (a caller of [`Store::apply`] with no deadline of its own, an
/// operator's tool), and a store closes what such a command left in flight. Store builders
/// take it with their `options` setting.
pub fn command_timeout(options: &idem_core::Options) -> std::time::Duration {
    options.reply_timeout().saturating_mul(2)
}

/// A store command did not answer within its store's own command timeout (the backstop under
/// the attempt's reply deadline): its effect is unknown, as for any
/// [`StoreError::Unavailable`]. Shared by every store crate.
#[derive(Debug, Error)]
#[error("no reply within {0:?}; the command may still have run")]
pub struct CommandTimeout(pub std::time::Duration);

/// A backend that keeps records: one implementation of the record machine per key.
///
/// Records are scoped by operation: the same key under two operations names two
/// independent records (rule 8).
pub trait Store: Send + Sync + 'static {
    /// Applies `command` to the record of `key` under `operation`, atomically, at the
    /// store's `now`, and returns the record machine's reply.
    ///
    /// On [`StoreError::Unavailable`] the command may or may not have been applied; the
    /// attempt machine only sends commands that are safe to repeat.
    fn apply<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send + 'a;

    /// As [`apply`](Self::apply), sent by a caller that bounds the command itself: it drops
    /// the returned future at a deadline of its own. The driver sends every command this
    /// way when the attempt's reply deadline is one a timer can hold, and drops it there
    /// (rule 12), so the store's own command timeout, a backstop for callers with no
    /// deadline, could never fire: a store may leave it out here, one timer fewer per
    /// command. Every other guarantee of `apply` holds.
    ///
    /// The provided implementation is `apply`.
    fn apply_bounded<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
        command: Command,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send + 'a {
        self.apply(operation, key, command)
    }

    /// A future that resolves when the record of `key` under `operation` may have stopped
    /// being pending: it was completed or released, or its lease ran out.
    ///
    /// A caller whose reserve was answered `InFlight` (policy `Wait`) waits on this future
    /// together with its backoff timer, so it reserves again as soon as the holder is done
    /// instead of polling. The watch must start when this method is *called*, not when the
    /// future is first polled: a change that lands between the call and the first poll must
    /// still resolve it (no lost wake-up). If the key holds no live pending record at the
    /// call, the future may resolve at once. Spurious resolutions are allowed: the caller
    /// reserves again and, finding the key still held, waits again.
    ///
    /// Called right after a reserve was answered `InFlight`, so it must also see a change
    /// that landed between that reply and the call: a store whose watch is not live at once
    /// (Redis must subscribe first) checks the record once its watch is live, and resolves
    /// if the key no longer holds a pending record.
    ///
    /// The provided implementation never resolves: the attempt's jittered backoff then
    /// governs when a waiter reserves again, which is correct, only slower.
    fn changed<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        let _ = (operation, key);
        std::future::pending()
    }

    /// A watch registered *before* a reserve that may be answered `InFlight`: it resolves on
    /// a change after this call (or spuriously), so a change that lands between the
    /// reserve's reply and the wait that follows is never lost. The driver calls it before
    /// every reserve a waiting call sends again, and waits on it if the reply is `InFlight`;
    /// a store whose watch is live at the call needs no check of the record then.
    ///
    /// The provided implementation is [`changed`](Self::changed), which sees changes from
    /// the call on too, and more.
    fn watch<'a>(
        &'a self,
        operation: &'a Operation,
        key: &'a Key,
    ) -> impl Future<Output = ()> + Send + 'a {
        self.changed(operation, key)
    }
}

/// Why a store could not answer a command.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or did not answer in time. The command's effect is
    /// unknown: it may have been applied.
    #[error("store unavailable during {command}: {source}")]
    Unavailable {
        /// The command that failed.
        command: CommandKind,
        /// What the backend reported.
        #[source]
        source: BoxError,
    },
    /// The key holds a value this store did not write (another type, garbage bytes, an
    /// unknown encoding version). Nothing was changed: the value is left for a person to
    /// look at, never overwritten silently.
    #[error("the record under {key} is not one this store wrote: {detail}")]
    Corrupt {
        /// The key (as the backend names it).
        key: String,
        /// What is wrong with the value.
        detail: String,
    },
}

impl StoreError {
    /// An [`Unavailable`](Self::Unavailable) error for `command`.
    pub fn unavailable(command: &Command, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            command: command.kind(),
            source: source.into(),
        }
    }

    /// Whether the failed command may have been applied.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}
