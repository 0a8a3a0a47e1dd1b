//! idem's records in PostgreSQL: the store for services whose data already lives there, and
//! the one whose records can commit in the caller's own transaction, together with the writes
//! they protect.
//!
//! [`PostgresStore`] implements the driver's [`idem::Store`]: the record machine of
//! `idem-core`, one row per record in one table, and **one statement per command**, each
//! judged by the server's clock and checking the owner in SQL. [`in_transaction`] runs an
//! action whose effect is writes in the same database inside a transaction that the
//! record's complete joins: the writes commit together with the record of their result, or
//! not at all (MODEL.md, "Effects that commit with the record").
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem::{Coordinator, Fingerprint, Options};
//! use idem_postgres::PostgresStore;
//!
//! let store = PostgresStore::connect("postgres://app@127.0.0.1:5432/app").await?;
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
//! `idem_records` (or the [`TableName`] given, schema-qualified or not), created by
//! [`PostgresStore::migrate`] from `sql/migrate.sql`:
//!
//! | column | type | holds |
//! |---|---|---|
//! | `operation`, `key` | `text COLLATE "C"`, the primary key | the record's name, byte for byte (I12) |
//! | `state` | `smallint` | 1 pending, 2 completed with a value, 3 completed without it, 4 panicked |
//! | `owner` | `bytea`, 16 bytes | the owner token |
//! | `fingerprint` | `bytea`, 32 bytes | the request's SHA-256 |
//! | `body` | `bytea`, NULL unless state 2 | the stored value |
//! | `expires_at` | `bigint` | the lease's or the retention's end, in milliseconds since the Unix epoch on the server's clock |
//!
//! and an index on `expires_at` for the sweeper. Nothing else is created.
//!
//! # The statements
//!
//! Each command is one statement, shipped as SQL in `sql/` ([`sql`]); each returns the
//! reply it decided, the server instant it judged by ([`PostgresStore::apply_timed`]) and
//! the record it found:
//!
//! - **reserve** reads the row without a lock; a live record is answered from it (a
//!   replay, key reuse, "in flight", the owner's own retry) and nothing is written, so a
//!   replay costs one read. A free or expired key is claimed with `INSERT … ON CONFLICT DO
//!   UPDATE … WHERE` the newest version of the row has expired, judged again after its lock.
//! - **complete**, **renew** and **release** lock the newest version of the row
//!   (`SELECT … FOR UPDATE`), read the clock after the lock, check the owner, and write
//!   exactly what the record machine writes.
//! - **read** takes the weakest row lock, so that it waits for a commit in progress.
//!
//! Time is `clock_timestamp()`, the instant the statement runs, never `now()` (the start of
//! the transaction, stale inside a long caller transaction). A statement that found its row
//! changed since its snapshot writes nothing and answers `raced`; it is run again (at most
//! [`MAX_RACES`] times). A row the adapter did not write (an unknown state, wrong byte
//! lengths, a body where none belongs) is answered [`idem::StoreError::Corrupt`] by every
//! command and never changed. A connection error, a timeout (the store's own, or the
//! server's `statement_timeout`) or a terminated backend is
//! [`idem::StoreError::Unavailable`]: the command may have been applied, and every command
//! the attempt sends is safe to repeat.
//!
//! Expired records read as absent already; [`PostgresStore::sweep`] deletes them in
//! batches so the table stays bounded.
//!
//! **The operator's tools:** [`PostgresStore`] implements [`idem::admin::AdminStore`] with
//! these same statements, row decoder and clock: `inspect` shows a pending record whose
//! lease ran out as expired, `list` pages by (operation, key), `forget` is one `DELETE`
//! that checks the owner and never takes a live lease, `stats` counts in one `GROUP BY`,
//! and `health` checks the clock, the server (PostgreSQL 12 or later, not a standby), the
//! table's layout and the pools. Its `stats` is called as `AdminStore::stats(&store)`:
//! [`PostgresStore::stats`] is the store's own counters.
//!
//! **Change notices:** this store does not implement [`idem::Store::changed`] (no
//! `LISTEN`/`NOTIFY`): a caller waiting for an identical request reserves again at its
//! jittered backoff (10 ms doubling to 500 ms by default), which is correct, only slower.
//!
//! What PostgreSQL guarantees and what it does not (synchronous commit, failover, the
//! isolation level) is in MODEL.md, section "PostgreSQL (idem-postgres)".

mod error;
mod fence_guard;
mod row;
pub mod sql;
mod store;
pub mod table;

/// The sqlx this crate is built on, re-exported: the pool a store is built from
/// ([`PostgresStoreBuilder::build`]), the transaction the action writes on
/// ([`PgTransaction`]) and the errors the action meets are this sqlx's types, so a service
/// that uses them through `idem_postgres::sqlx` always has the version they must match,
/// without finding it in this crate's manifest (two sqlx versions in one build are two
/// sets of types that do not mix).
///
/// ```no_run
/// use idem_postgres::{PostgresStore, sqlx};
///
/// # async fn run() -> Result<(), sqlx::Error> {
/// let pool = sqlx::postgres::PgPoolOptions::new()
///     .max_connections(8)
///     .connect("postgres://postgres@127.0.0.1/shop")
///     .await?;
/// let store = PostgresStore::builder().build(pool.clone());
/// let mut tx = pool.begin().await?;
/// sqlx::query("SELECT 1").execute(&mut *tx).await?;
/// # drop(store);
/// # Ok(())
/// # }
/// ```
pub use sqlx;

pub use error::{CommandTimeout, PostgresError};
pub use fence_guard::{Admission, DEFAULT_FENCE_TABLE, FenceGuard};
pub use store::{
    DEFAULT_COMMAND_TIMEOUT, MAX_DURATION_MS, MAX_RACES, PostgresStore, PostgresStoreBuilder,
    StoreStats,
};
pub use table::{DEFAULT_TABLE, TableName, TableNameError};
mod transaction;
pub use transaction::{
    BEGIN, PgTransaction, RecordTransaction, in_transaction, in_transaction_with_provenance,
};
