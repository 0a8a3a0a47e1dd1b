//! idem's records in an SQLite file: the store for a single-node service whose idempotency
//! records must survive a restart of its process, with no server to run.
//!
//! [`SqliteStore`] implements the driver's [`idem::Store`]: the record machine of
//! `idem-core`, one row per record in one table of a file opened in WAL mode. Each command
//! that may write is **one `BEGIN IMMEDIATE` transaction**: the file's write lock is taken
//! before the row is read, the host's clock is read once, the core's
//! [`apply_fenced`](idem_core::record::apply_fenced) decides, and exactly its write is made
//! and committed. With group commit (the default) the store's writer task runs the
//! commands queued meanwhile in one such transaction, each still decided alone and
//! answered after the commit. A reserve of a live record (a replay, key reuse, "in flight") is answered
//! from a plain read, which WAL runs beside the writer. [`in_transaction`] runs an action
//! whose effect is writes in the same file inside a transaction that the record's complete
//! joins: the writes commit together with the record of their result, or not at all.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem::{Coordinator, Fingerprint, Options};
//! use idem_sqlite::SqliteStore;
//!
//! let store = SqliteStore::open("payments.db").await?; // created if missing
//! store.migrate().await?; // once, at start-up: creates `idem_records` if it is missing
//! let payments = Coordinator::new(store, Options::default());
//! let fingerprint = Fingerprint::builder().field("amount", 100).finish()?;
//! let charge = payments
//!     .execute("payment.charge", "key-1", fingerprint, |claim| async move {
//!         Ok::<_, std::io::Error>(format!("ch_for_{}", claim.key()))
//!     })
//!     .await?;
//! # let _ = charge;
//! # Ok(())
//! # }
//! ```
//!
//! # The table
//!
//! `idem_records` (or the [`TableName`] given), `STRICT`, created by
//! [`SqliteStore::migrate`] from `sql/migrate.sql`:
//!
//! | column | type | holds |
//! |---|---|---|
//! | `operation`, `key` | `BLOB`, the primary key | the record's name, byte for byte (I12) |
//! | `state` | `INTEGER` | 1 pending, 2 completed with a value, 3 completed without it, 4 panicked |
//! | `owner` | `BLOB`, 16 bytes | the owner token |
//! | `fingerprint` | `BLOB`, 32 bytes | the request's SHA-256 |
//! | `body` | `BLOB`, NULL unless state 2 | the stored value |
//! | `expires_at` | `INTEGER` | the lease's or the retention's end, in milliseconds since the Unix epoch on the host's clock |
//! | `fence` | `INTEGER`, pending records only | the grant's fence (MODEL.md F1) |
//!
//! an index on `expires_at` for the sweeper, and the fence counter `{table}_fence` (one
//! row: the last fence granted in the file, written in each grant's transaction).
//!
//! # What it guarantees
//!
//! - **Atomic per key, by the file's write lock.** No other writer, in this process or
//!   another on the same host, can change a row between a command's read and its write.
//!   Writers of one process queue on the store's own lock; writers of other processes meet
//!   SQLite's lock and the busy timeout.
//! - **The host's clock** judges leases and retention (rule 10): every process sharing the
//!   file reads the same clock. A step of the wall clock moves every lease at once.
//! - **Fences on every grant** (F1), rising across releases, expiries and reopening.
//! - **Durability per [`Synchronous`]:** `Full` (the default) survives a power loss,
//!   `Normal` a process crash only.
//! - A row the adapter did not write is [`idem::StoreError::Corrupt`] for every command and
//!   is never changed; `SQLITE_BUSY` past the busy timeout, an I/O error, a missing table
//!   or the command timeout is [`idem::StoreError::Unavailable`].
//!
//! **The operator's tools:** [`SqliteStore`] implements [`idem::admin::AdminStore`] with
//! the same statements, row decoder and clock: `inspect` shows a pending record whose lease
//! ran out as expired, `list` pages by (operation, key), `forget` is one `DELETE` that
//! checks the owner and never takes a live lease, `stats` counts in one `GROUP BY`, and
//! `health` checks the clock, WAL, `synchronous` (NORMAL a warning), the table and the
//! pool. Its `stats` is called as `AdminStore::stats(&store)`: [`SqliteStore::stats`] is
//! the store's own counters.
//!
//! **Change notices:** this store does not implement [`idem::Store::changed`]: a caller
//! waiting for an identical request reserves again at its jittered backoff, which is
//! correct, only slower.
//!
//! The whole account (single writer, durability, multi-process, what differs from
//! PostgreSQL) is in MODEL.md, section "SQLite (idem-sqlite)".
//!
//! # For tests of the store
//!
//! - [`SqliteStore::apply_timed`] answers a command and the instant of the store's clock it
//!   was judged by; step the record machine at that instant to compare. The clock is the
//!   host's wall clock ([`SqliteStore::now`]); there is no clock to inject, so let real time
//!   pass (leases of a few milliseconds) to see expiry.
//! - Every grant carries a fence ([`idem::record::Reservation::fence`] is always `Some`).
//! - To plant a row the store did not write, insert it with plain SQL on
//!   [`SqliteStore::pool`]: `operation` and `key` are the names' UTF-8 bytes bound as
//!   `BLOB`s (`Vec<u8>`), e.g. `INSERT INTO idem_records (operation, key, state, owner,
//!   fingerprint, body, expires_at) VALUES (?1, ?2, 9, ?3, ?4, NULL, 0)` with a 16-byte owner
//!   and a 32-byte fingerprint gives a row of unknown state. The table is `STRICT`, so a
//!   value of another type needs a table created without `STRICT` (given to the builder with
//!   [`SqliteStoreBuilder::table`] before `migrate`).

mod error;
mod row;
pub mod sql;
mod store;
pub mod table;
mod transaction;

/// The sqlx this crate is built on, re-exported: the transaction an action writes on
/// dereferences to this sqlx's `SqliteConnection`.
pub use sqlx;

pub use error::{CommandTimeout, SqliteError};
pub use row::VALID;
pub use store::{
    DEFAULT_COMMAND_TIMEOUT, MAX_BATCH, SqliteStore, SqliteStoreBuilder, StoreStats, Synchronous,
};
pub use table::{DEFAULT_TABLE, TableName, TableNameError};
pub use transaction::{RecordTransaction, in_transaction, in_transaction_with_provenance};
