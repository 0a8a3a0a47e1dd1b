//! One record command: its fast statement where one suffices, else the locked way (the
//! row locked and read with the server's clock after the lock, the record machine's
//! decision, its write, in one transaction), again while the key changed under it.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idem::{BoxError, StoreError};
use idem_core::record::{
    Command, Completion, Record, Reply, Reservation, Write, apply_fenced, reserve_live,
};
use idem_core::{Fence, Key, Operation, OwnerToken, Timestamp};
use sqlx::mysql::MySqlRow;
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection, MySql, MySqlConnection, Row};
use tokio::time::Instant;

use super::{MAX_DURATION_MS, MAX_RACES, MySqlStore};
use crate::error::{CommandTimeout, DEADLOCK, DUPLICATE_KEY, failed, server_errno};
use crate::row::{Found, Unreadable, result_columns};

/// The isolation level a caller's transaction must be at for the record to join it, as
/// `@@tx_isolation` spells it.
pub(crate) const READ_COMMITTED: &str = "READ-COMMITTED";

/// Why a command inside a caller's transaction ends when InnoDB broke a deadlock: the whole
/// transaction was rolled back, and what follows on its connection would commit on its own.
const ROLLED_BACK: &str =
    "InnoDB broke a deadlock and rolled the caller's transaction back: nothing was committed";

/// Where a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// On a connection of the store's pool, in transactions of its own.
    Own,
    /// Inside a caller's open transaction, which the caller commits or rolls back.
    Caller,
}

/// One try of a command: its answer, or "the key changed under it; nothing was written".
enum Try {
    Done(Reply, Timestamp),
    Raced,
}

/// What the locked read found for a command the record machine answers by writing a row
/// where there is none (a grant of a free key, a complete after the row was swept).
enum Locked {
    Decided(Try),
    Insert,
}

impl MySqlStore {
    /// Applies `command` as [`Store::apply`](idem::Store::apply) does, and also returns the
    /// server instant the command was judged by (for a test to step the record machine at
    /// the same instant). A fresh grant's instant is its insert's: its lease end minus the
    /// lease.
    pub async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let counters = &self.inner.counters;
        counters.commands.fetch_add(1, Ordering::Relaxed);
        let result = self.on_pool(operation, key, &command).await;
        self.count(result)
    }

    /// The server's clock now (the store's `now`, MODEL.md rule 10), in milliseconds since
    /// the Unix epoch, within the command timeout.
    pub async fn now(&self) -> Result<Timestamp, StoreError> {
        let timeout = self.inner.command_timeout;
        let unavailable = |source: BoxError| StoreError::unavailable(&Command::Read, source);
        let sql = format!("SELECT {}", crate::sql::NOW);
        let read = sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql)).fetch_one(&self.inner.pool);
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(ms)) => Ok(Timestamp::from_millis(u64::try_from(ms).unwrap_or(0))),
            Ok(Err(error)) => Err(unavailable(failed(error))),
            Err(_) => Err(unavailable(Box::new(CommandTimeout(timeout)))),
        }
    }

    pub(crate) fn count<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let counters = &self.inner.counters;
        match &result {
            Ok(_) => {}
            Err(StoreError::Corrupt { .. }) => {
                counters.corrupt.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                counters.unavailable.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }

    /// Runs `command` on a connection of the pool, within the command timeout.
    async fn on_pool(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let timeout = self.inner.command_timeout;
        let deadline = Instant::now() + timeout;
        let late = || StoreError::unavailable(command, CommandTimeout(timeout));
        let conn = match tokio::time::timeout_at(deadline, self.inner.pool.acquire()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => return Err(StoreError::unavailable(command, failed(error))),
            Err(_) => return Err(late()),
        };
        // Until the command has answered, the connection is closed rather than handed out
        // again: on this timeout, and when the caller drops this future first, as a
        // statement may still be running or a transaction still open.
        let mut conn = InFlight {
            conn,
            answered: false,
        };
        let applied = self.apply_on(&mut conn.conn, Scope::Own, operation, key, command);
        let result = match tokio::time::timeout_at(deadline, applied).await {
            Ok(result) => result,
            Err(_) => return Err(late()),
        };
        conn.answered();
        result
    }

    /// Runs `command` on `conn` (a connection of the pool, or a caller's open transaction),
    /// again while it races.
    pub(crate) async fn apply_on(
        &self,
        conn: &mut MySqlConnection,
        scope: Scope,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        for _ in 0..MAX_RACES {
            let attempt = match scope {
                Scope::Own => self.try_own(conn, operation, key, command).await,
                Scope::Caller => self.try_caller(conn, operation, key, command).await,
            };
            match attempt? {
                Try::Done(reply, now) => return Ok((reply, now)),
                Try::Raced => {
                    self.inner.counters.raced.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(StoreError::unavailable(
            command,
            format!("the key changed under {MAX_RACES} tries in a row"),
        ))
    }

    /// One try on the store's own connection: the fast statement first where there is
    /// one, then the locked way in a transaction of its own.
    async fn try_own(
        &self,
        conn: &mut MySqlConnection,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<Try, StoreError> {
        let counters = &self.inner.counters;
        match command {
            Command::Reserve {
                owner, fingerprint, ..
            } => {
                if !self.inner.read_first {
                    // Insert first: a free key is granted by this one statement; a key that
                    // holds a row is then read as below.
                    if let done @ Try::Done(..) = self
                        .insert(conn, Scope::Own, operation, key, command)
                        .await?
                    {
                        counters.fast.fetch_add(1, Ordering::Relaxed);
                        return Ok(done);
                    }
                }
                let Some(found) = self
                    .read(conn, &self.inner.sql.peek, operation, key, command)
                    .await?
                else {
                    return Ok(Try::Raced);
                };
                match &found.record {
                    None => {
                        let done = self
                            .insert(conn, Scope::Own, operation, key, command)
                            .await?;
                        if let Try::Done(..) = done {
                            counters.fast.fetch_add(1, Ordering::Relaxed);
                        }
                        return Ok(done);
                    }
                    Some(record) if !record.is_expired(found.now) => {
                        // A live record's answer changes nothing and needs no lock.
                        counters.fast.fetch_add(1, Ordering::Relaxed);
                        let reply = reserve_live(record.live(), *owner, *fingerprint)
                            .reply_at(record.expires_at(), found.now);
                        return Ok(Try::Done(reply, found.now));
                    }
                    // Expired: taken over the locked way.
                    Some(_) => {}
                }
            }
            Command::Complete { .. } => {
                let held = &self.inner.sql.complete_held;
                if let Some(done) = self
                    .complete_held(conn, held, operation, key, command)
                    .await?
                {
                    return Ok(done);
                }
            }
            Command::Renew { .. } | Command::Release { .. } | Command::Read => {}
        }
        counters.statements.fetch_add(1, Ordering::Relaxed);
        let mut tx = conn
            .begin()
            .await
            .map_err(|error| StoreError::unavailable(command, failed(error)))?;
        match self
            .locked(&mut tx, Scope::Own, operation, key, command)
            .await?
        {
            Locked::Decided(done) => {
                counters.statements.fetch_add(1, Ordering::Relaxed);
                tx.commit()
                    .await
                    .map_err(|error| StoreError::unavailable(command, failed(error)))?;
                Ok(done)
            }
            Locked::Insert => {
                // The row is absent: give up the locked read (and its gap lock) and insert
                // in autocommit, where a concurrent insert of the same key is a duplicate,
                // never a deadlock.
                counters.statements.fetch_add(1, Ordering::Relaxed);
                tx.rollback()
                    .await
                    .map_err(|error| StoreError::unavailable(command, failed(error)))?;
                self.insert(conn, Scope::Own, operation, key, command).await
            }
        }
    }

    /// One try inside a caller's open transaction: the owner's complete as its one
    /// statement (which also checks that a transaction is open at READ COMMITTED), else
    /// the locked way, which says what is wrong if the transaction is not one the record
    /// can join.
    async fn try_caller(
        &self,
        conn: &mut MySqlConnection,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<Try, StoreError> {
        if let Command::Complete { .. } = command {
            let held = &self.inner.sql.complete_held_in_transaction;
            if let Some(done) = self
                .complete_held(conn, held, operation, key, command)
                .await?
            {
                return Ok(done);
            }
        }
        match self
            .locked(conn, Scope::Caller, operation, key, command)
            .await?
        {
            Locked::Decided(done) => Ok(done),
            Locked::Insert => {
                self.insert(conn, Scope::Caller, operation, key, command)
                    .await
            }
        }
    }

    /// The complete of the caller's own live reservation as one `UPDATE` whose `WHERE` is
    /// the owner and lease check; `None` if it matched no row (anything else: the locked
    /// way decides).
    async fn complete_held(
        &self,
        conn: &mut MySqlConnection,
        statement: &Arc<str>,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<Option<Try>, StoreError> {
        let Command::Complete {
            owner,
            result,
            retention,
            ..
        } = command
        else {
            return Ok(None);
        };
        let counters = &self.inner.counters;
        let (state, body) = result_columns(result);
        let retention = millis(*retention);
        counters.statements.fetch_add(1, Ordering::Relaxed);
        let done = sqlx::query(AssertSqlSafe(Arc::clone(statement)))
            .bind(state)
            .bind(body)
            .bind(retention)
            .bind(operation.as_str().as_bytes())
            .bind(key.as_str().as_bytes())
            .bind(owner.to_bytes().as_slice())
            .execute(&mut *conn)
            .await
            .map_err(|error| StoreError::unavailable(command, failed(error)))?;
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        counters.fast.fetch_add(1, Ordering::Relaxed);
        let expires_at = i64::try_from(done.last_insert_id()).unwrap_or(i64::MAX);
        let now = instant(expires_at, retention);
        Ok(Some(Try::Done(Reply::Completed(Completion::InTime), now)))
    }

    /// The locked way: the row read under its lock with the clock read after the lock, the
    /// record machine's decision, and its write on the same connection.
    async fn locked(
        &self,
        conn: &mut MySqlConnection,
        scope: Scope,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<Locked, StoreError> {
        let sql = &self.inner.sql;
        let statement = match command {
            Command::Read => &sql.shared,
            _ => &sql.locked,
        };
        let Some(found) = self.read(conn, statement, operation, key, command).await? else {
            if scope == Scope::Caller {
                return Err(StoreError::unavailable(command, ROLLED_BACK));
            }
            return Ok(Locked::Decided(Try::Raced));
        };
        if scope == Scope::Caller {
            // The record joins the caller's transaction only if there is one, at the
            // level the mode needs; nothing has been written yet.
            if !found.in_transaction {
                return Err(StoreError::unavailable(
                    command,
                    "the connection is not inside a transaction: the record would commit on its own",
                ));
            }
            if found.isolation != READ_COMMITTED {
                return Err(StoreError::unavailable(
                    command,
                    format!(
                        "the transaction's session is at {}, and the record needs {READ_COMMITTED} \
                         (begin it with MySqlStore::begin)",
                        found.isolation
                    ),
                ));
            }
        }
        let now = found.now;
        let command = &capped(command);
        let Some(stored) = found.record else {
            return Ok(match command {
                Command::Reserve { .. } | Command::Complete { .. } => Locked::Insert,
                _ => {
                    let reply = apply_fenced(None, command.clone(), now, || Fence::MIN).reply;
                    Locked::Decided(Try::Done(reply, now))
                }
            });
        };
        // A fence is drawn only for a grant, after the row's lock: the previous holder's was
        // drawn before its grant committed, so this one is above it (F1).
        let drew = Cell::new(false);
        let mut transition = apply_fenced(Some(&stored), command.clone(), now, || {
            drew.set(true);
            Fence::MIN
        });
        if drew.get() {
            let fence = self.next_fence(conn, command, &stored).await?;
            transition = apply_fenced(Some(&stored), command.clone(), now, || fence);
        }
        let bytes = |op: &Operation, k: &Key| {
            (
                op.as_str().as_bytes().to_vec(),
                k.as_str().as_bytes().to_vec(),
            )
        };
        let (op, k) = bytes(operation, key);
        let write = match &transition.write {
            Write::Unchanged => None,
            Write::Put(Record::Pending {
                owner,
                fingerprint,
                lease_until,
                fence,
            }) => Some(
                sqlx::query(AssertSqlSafe(Arc::clone(&sql.put_pending)))
                    .bind(owner.to_bytes().to_vec())
                    .bind(fingerprint.to_bytes().to_vec())
                    .bind(deadline(*lease_until))
                    .bind(fence.map(|f| i64::try_from(f.get()).unwrap_or(i64::MAX)))
                    .bind(op)
                    .bind(k),
            ),
            Write::Put(Record::Completed {
                owner,
                fingerprint,
                result,
                expires_at,
            }) => {
                let (state, body) = result_columns(result);
                Some(
                    sqlx::query(AssertSqlSafe(Arc::clone(&sql.put_completed)))
                        .bind(state)
                        .bind(owner.to_bytes().to_vec())
                        .bind(fingerprint.to_bytes().to_vec())
                        .bind(body.map(<[u8]>::to_vec))
                        .bind(deadline(*expires_at))
                        .bind(op)
                        .bind(k),
                )
            }
            // A release ends the record in place, so that its row keeps its fence for the
            // next grant; an expired record the machine forgets is left to the sweeper (it
            // reads as absent already, I9).
            Write::Delete if transition.reply == Reply::Released => Some(
                sqlx::query(AssertSqlSafe(Arc::clone(&sql.end)))
                    .bind(deadline(now))
                    .bind(op)
                    .bind(k),
            ),
            Write::Delete => None,
        };
        if let Some(write) = write {
            self.inner
                .counters
                .statements
                .fetch_add(1, Ordering::Relaxed);
            match write.execute(&mut *conn).await {
                Ok(_) => {}
                Err(error) if scope == Scope::Own && server_errno(&error) == Some(DEADLOCK) => {
                    return Ok(Locked::Decided(Try::Raced));
                }
                Err(error) => return Err(StoreError::unavailable(command, failed(error))),
            }
        }
        Ok(Locked::Decided(Try::Done(transition.reply, now)))
    }

    /// A fence above every one drawn before and above the row's own (F1).
    async fn next_fence(
        &self,
        conn: &mut MySqlConnection,
        command: &Command,
        stored: &Record,
    ) -> Result<Fence, StoreError> {
        self.inner
            .counters
            .statements
            .fetch_add(1, Ordering::Relaxed);
        let drawn: i64 = sqlx::query_scalar(AssertSqlSafe(Arc::clone(&self.inner.sql.next_fence)))
            .fetch_one(&mut *conn)
            .await
            .map_err(|error| StoreError::unavailable(command, failed(error)))?;
        let above_row = match stored {
            Record::Pending { fence: Some(f), .. } => f.get().saturating_add(1),
            _ => 1,
        };
        let drawn = u64::try_from(drawn).unwrap_or(0).max(above_row);
        Fence::new(drawn)
            .ok_or_else(|| StoreError::unavailable(command, "the fence sequence answered zero"))
    }

    /// The grant of a free key, or a result recorded where the row is gone: one insert,
    /// which the primary key makes atomic. A duplicate means another caller wrote the key
    /// first: nothing was written, and the command is tried again.
    async fn insert(
        &self,
        conn: &mut MySqlConnection,
        scope: Scope,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<Try, StoreError> {
        let sql = &self.inner.sql;
        self.inner
            .counters
            .statements
            .fetch_add(1, Ordering::Relaxed);
        let (query, duration) = match command {
            Command::Reserve {
                owner,
                fingerprint,
                lease,
            } => (
                sqlx::query(AssertSqlSafe(Arc::clone(&sql.insert_pending)))
                    .bind(operation.as_str().as_bytes())
                    .bind(key.as_str().as_bytes())
                    .bind(owner.to_bytes().to_vec())
                    .bind(fingerprint.to_bytes().to_vec())
                    .bind(millis(*lease)),
                millis(*lease),
            ),
            Command::Complete {
                owner,
                fingerprint,
                result,
                retention,
            } => {
                let (state, body) = result_columns(result);
                (
                    sqlx::query(AssertSqlSafe(Arc::clone(&sql.insert_completed)))
                        .bind(operation.as_str().as_bytes())
                        .bind(key.as_str().as_bytes())
                        .bind(state)
                        .bind(owner.to_bytes().to_vec())
                        .bind(fingerprint.to_bytes().to_vec())
                        .bind(body.map(<[u8]>::to_vec))
                        .bind(millis(*retention)),
                    millis(*retention),
                )
            }
            Command::Renew { .. } | Command::Release { .. } | Command::Read => {
                return Err(StoreError::unavailable(
                    command,
                    "only a reserve or a complete inserts a record",
                ));
            }
        };
        let row: MySqlRow = match query.fetch_one(&mut *conn).await {
            Ok(row) => row,
            Err(error) if server_errno(&error) == Some(DUPLICATE_KEY) => return Ok(Try::Raced),
            Err(error) if server_errno(&error) == Some(DEADLOCK) && scope == Scope::Own => {
                return Ok(Try::Raced);
            }
            Err(error) => return Err(StoreError::unavailable(command, failed(error))),
        };
        let expires_at: i64 = row
            .try_get("expires_at")
            .map_err(|error| StoreError::unavailable(command, failed(error)))?;
        let now = instant(expires_at, duration);
        let reply = match command {
            Command::Reserve { owner, .. } => {
                let fence: Option<i64> = row
                    .try_get("fence")
                    .map_err(|error| StoreError::unavailable(command, failed(error)))?;
                Reply::Reserved(grant(*owner, expires_at, fence))
            }
            _ => Reply::Completed(Completion::AfterLeaseExpiry),
        };
        Ok(Try::Done(reply, now))
    }

    /// One read of the key (a peek or a locked read), decoded; `None` if InnoDB broke a
    /// deadlock on it (a race: nothing was written). A row this adapter did not write is
    /// [`StoreError::Corrupt`].
    async fn read(
        &self,
        conn: &mut MySqlConnection,
        statement: &Arc<str>,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<Option<Found>, StoreError> {
        self.inner
            .counters
            .statements
            .fetch_add(1, Ordering::Relaxed);
        let row = match sqlx::query(AssertSqlSafe(Arc::clone(statement)))
            .bind(operation.as_str().as_bytes())
            .bind(key.as_str().as_bytes())
            .fetch_one(&mut *conn)
            .await
        {
            Ok(row) => row,
            Err(error) if server_errno(&error) == Some(DEADLOCK) => return Ok(None),
            Err(error) => return Err(StoreError::unavailable(command, failed(error))),
        };
        match Found::from_row(&row) {
            Ok(found) => Ok(Some(found)),
            Err(Unreadable::Corrupt(detail)) => Err(StoreError::Corrupt {
                key: self.describe(operation, key),
                detail,
            }),
            Err(Unreadable::Unexpected(error)) => {
                Err(StoreError::unavailable(command, failed(error)))
            }
        }
    }

    /// How a record is named in errors and logs: the table, the operation and the key.
    pub(crate) fn describe(&self, operation: &Operation, key: &Key) -> String {
        format!("{} ({operation}, {key})", self.inner.table)
    }
}

/// The reservation a fresh grant made.
fn grant(owner: OwnerToken, expires_at: i64, fence: Option<i64>) -> Reservation {
    Reservation {
        owner,
        lease_until: Some(Timestamp::from_millis(
            u64::try_from(expires_at).unwrap_or(0),
        )),
        fence: fence
            .and_then(|f| u64::try_from(f).ok())
            .and_then(Fence::new),
    }
}

/// The instant a statement that wrote `expires_at` as its clock plus `duration` judged by.
fn instant(expires_at: i64, duration: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(expires_at.saturating_sub(duration)).unwrap_or(0))
}

/// A deadline for the `expires_at` column.
fn deadline(at: Timestamp) -> i64 {
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

/// A pool connection with a command in flight: closed when dropped unless the command
/// answered, so that a command given up (by the command timeout, or by a caller that
/// dropped it) never leaves its connection in the pool, busy or inside a transaction.
struct InFlight {
    conn: PoolConnection<MySql>,
    answered: bool,
}

impl InFlight {
    /// The command answered: the connection goes back to the pool as usual.
    fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.conn.close_on_drop();
        }
    }
}

/// `command` with its lease or retention cut to [`MAX_DURATION_MS`] (and to whole
/// milliseconds), as the single statements cut it, so that every deadline fits its column.
fn capped(command: &Command) -> Command {
    let cap = |d: &Duration| Duration::from_millis(u64::try_from(millis(*d)).unwrap_or(0));
    let mut command = command.clone();
    match &mut command {
        Command::Reserve { lease, .. } | Command::Renew { lease, .. } => *lease = cap(lease),
        Command::Complete { retention, .. } => *retention = cap(retention),
        Command::Release { .. } | Command::Read => {}
    }
    command
}

/// A duration in whole milliseconds, at most [`MAX_DURATION_MS`].
pub(crate) fn millis(duration: Duration) -> i64 {
    let ms = duration.as_millis().min(u128::from(MAX_DURATION_MS));
    i64::try_from(ms).unwrap_or(i64::MAX)
}
