//! idem's records in MariaDB: the store for services whose data already lives there, and
//! the one whose records can commit in the caller's own InnoDB transaction, together with
//! the writes they protect.
//!
//! [`MySqlStore`] implements the driver's [`idem::Store`]: the record machine of
//! `idem-core`, one row per record in one InnoDB table, every command judged by the
//! **server's** clock, the owner checked under the row's lock. [`in_transaction`] runs an
//! action whose effect is writes in the same database inside a transaction that the
//! record's complete joins: the writes commit together with the record of their result, or
//! not at all (MODEL.md, "Effects that commit with the record").
//!
//! **Servers.** MariaDB 10.5 or later (tested on 10.11): the statements use MariaDB's
//! `INSERT … RETURNING` and sequences. MySQL is not supported yet;
//! [`MySqlStore::migrate`] refuses it by name ([`MySqlError::Unsupported`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem::{Coordinator, Fingerprint, Options};
//! use idem_mysql::MySqlStore;
//!
//! let store = MySqlStore::connect("mysql://app@127.0.0.1:3306/app").await?;
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
//! `idem_records` (or the [`TableName`] given, `database.table` or not), created by
//! [`MySqlStore::migrate`] ([`sql::MIGRATE`]), `ENGINE = InnoDB`:
//!
//! | column | type | holds |
//! |---|---|---|
//! | `operation`, `key` | `VARBINARY(255)`, the primary key | the record's name, byte for byte (I12) |
//! | `state` | `SMALLINT` | 1 pending, 2 completed with a value, 3 completed without it, 4 panicked |
//! | `owner` | `VARBINARY(16)` | the owner token |
//! | `fingerprint` | `VARBINARY(32)` | the request's SHA-256 |
//! | `body` | `LONGBLOB`, NULL unless state 2 | the stored value |
//! | `expires_at` | `BIGINT` | the lease's or the retention's end, in ms since the Unix epoch on the server's clock |
//! | `fence` | `BIGINT` | the grant's fence (MODEL.md `F1`), drawn from the sequence `{table}_fence` |
//!
//! and an index on `expires_at` for the sweeper. A body is limited by the server's
//! `max_allowed_packet` (16 MiB by default on MariaDB 10.11): a larger one fails its
//! complete as unavailable. Keep the coordinator's body limit below it.
//!
//! # The commands
//!
//! Each command's decision is the core's own record machine
//! ([`idem_core::record::apply_fenced`]), applied in Rust to the row as the database holds
//! it under its lock, at the server's clock read after that lock; or, for the two common
//! cases, one statement whose `WHERE` is that same decision ([`sql`]):
//!
//! - **reserve** reads the row without a lock ([`sql::PEEK`]); a live record is answered
//!   from it (a replay, key reuse, "in flight", the owner's own retry) and nothing is
//!   written. A free key is granted by one `INSERT` ([`sql::INSERT_PENDING`]) that the
//!   primary key makes atomic: of two callers one inserts, the other meets a duplicate and
//!   reads again. An expired record is taken over the locked way. With
//!   [`read_first(false)`](MySqlStoreBuilder::read_first) the `INSERT` is tried first, and a
//!   duplicate is then read: a fresh call one statement shorter, a replay one longer.
//! - **complete** of the caller's own live reservation is one `UPDATE` whose `WHERE` checks
//!   the owner and the lease ([`sql::COMPLETE_HELD`]; inside a caller's transaction
//!   [`sql::COMPLETE_HELD_IN_TRANSACTION`], which also checks that the transaction is open at
//!   READ COMMITTED); anything else goes the locked way.
//! - **the locked way** (renew, release, read, and what the above left): `BEGIN`, the row
//!   read `FOR UPDATE` (`LOCK IN SHARE MODE` for a read, which then waits for a caller's
//!   transaction holding the row) with the clock read after the lock, the record machine's
//!   decision, its write, `COMMIT`.
//!
//! A try that finds the key changed under it (a duplicate insert, a deadlock InnoDB broke)
//! wrote nothing and is run again (at most [`MAX_RACES`] times). A row the adapter did not
//! write (an unknown state, wrong byte lengths, a body where none belongs) is answered
//! [`idem::StoreError::Corrupt`] by every command and never changed. A connection error or
//! a timeout (the store's own, or the server's `max_statement_time`) is
//! [`idem::StoreError::Unavailable`]: the command may have been applied, and every command
//! the attempt sends is safe to repeat.
//!
//! **Fences** (MODEL.md `F1`): every grant carries a fence drawn from the sequence
//! `{table}_fence` (a fresh grant in its insert, a takeover after the row's lock), above
//! every earlier grant of the key; renewals and the owner's own retried reserve carry the
//! grant's fence. A result recorded without a grant has none.
//!
//! Expired records read as absent already; [`MySqlStore::sweep`] deletes them in batches
//! so the table stays bounded.
//!
//! **The operator's tools:** [`MySqlStore`] implements [`idem::admin::AdminStore`] with
//! these same statements, row decoder and clock: `inspect` shows a pending record whose
//! lease ran out as expired, `list` pages by (operation, key), `forget` is one `DELETE`
//! that checks the owner and never takes a live lease, `stats` counts in one `GROUP BY`,
//! and `health` checks the clock, the server (MariaDB 10.5 or later, writable), the table
//! and its fence sequence, and the pools. Its `stats` is called as
//! `AdminStore::stats(&store)`: [`MySqlStore::stats`] is the store's own counters.
//!
//! **Change notices:** this store does not implement [`idem::Store::changed`]: a caller
//! waiting for an identical request reserves again at its jittered backoff, which is
//! correct, only slower.
//!
//! What MariaDB guarantees and what it does not is in MODEL.md, section "MySQL/MariaDB
//! (idem-mysql)".

mod error;
mod row;
pub mod sql;
mod store;
pub mod table;
mod transaction;

/// The sqlx this crate is built on, re-exported: the pool a store is built from
/// ([`MySqlStoreBuilder::build`]) and the transaction the action writes on
/// ([`MySqlTransaction`]) are this sqlx's types.
pub use sqlx;

pub use error::{CommandTimeout, MySqlError};
pub use store::{
    DEFAULT_COMMAND_TIMEOUT, MAX_DURATION_MS, MAX_RACES, MySqlStore, MySqlStoreBuilder, StoreStats,
};
pub use table::{DEFAULT_TABLE, TableName, TableNameError};
pub use transaction::{
    MySqlTransaction, RecordTransaction, SET_ISOLATION, in_transaction,
    in_transaction_with_provenance,
};
