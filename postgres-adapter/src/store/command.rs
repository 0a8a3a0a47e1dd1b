//! One record command as its statement: on a connection of the pool within the command
//! timeout (or its caller's deadline), or on a caller's transaction; run again while the row
//! changed under it, and counted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idem::{BoxError, StoreError};
use idem_core::record::{Command, Reply};
use idem_core::{Key, Operation, Timestamp};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, PgConnection, Postgres};
use tokio::time::Instant;

use super::{MAX_DURATION_MS, MAX_RACES, PostgresStore};
use crate::error::{CommandTimeout, failed};
use crate::row::{Answer, Refused, result_columns};

impl PostgresStore {
    /// Applies `command` as [`Store::apply`](idem::Store::apply) does, and also returns the server instant the
    /// statement judged by (for a test to step the record machine at the same instant).
    pub async fn apply_timed(
        &self,
        operation: &Operation,
        key: &Key,
        command: Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let deadline = Instant::now() + self.inner.command_timeout;
        self.on_pool(operation, key, &command, Some(deadline)).await
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

    /// Runs `command` on a connection of the pool, by `deadline` (the command timeout from
    /// now), or with no timer of the store's when the caller bounds it (`None`,
    /// [`Store::apply_bounded`](idem::Store::apply_bounded)); counted.
    pub(super) async fn on_pool(
        &self,
        operation: &Operation,
        key: &Key,
        command: &Command,
        deadline: Option<Instant>,
    ) -> Result<(Reply, Timestamp), StoreError> {
        self.inner.counters.commands.fetch_add(1, Ordering::Relaxed);
        let late = || StoreError::unavailable(command, CommandTimeout(self.inner.command_timeout));
        let result = async {
            let Some(acquired) = by(deadline, self.inner.pool.acquire()).await else {
                return Err(late());
            };
            let conn = match acquired {
                Ok(conn) => conn,
                Err(error) => return Err(StoreError::unavailable(command, failed(error))),
            };
            // Until the statement has answered, the connection is closed rather than handed
            // out again: on this timeout, and when the caller drops this future first (the
            // attempt's reply deadline is usually the shorter), as the statement may still be
            // running.
            let mut conn = InFlight {
                conn,
                answered: false,
            };
            let applied = self.apply_on(conn.connection(), operation, key, command);
            let Some(result) = by(deadline, applied).await else {
                return Err(late());
            };
            conn.answered();
            result
        }
        .await;
        self.count(result)
    }

    /// Runs `command` on `conn` (a connection of the pool, or a caller's transaction): its
    /// one statement, again while it reports `raced`.
    pub(crate) async fn apply_on(
        &self,
        conn: &mut PgConnection,
        operation: &Operation,
        key: &Key,
        command: &Command,
    ) -> Result<(Reply, Timestamp), StoreError> {
        let counters = &self.inner.counters;
        let unavailable = |source: BoxError| StoreError::unavailable(command, source);
        let mut peek = self.inner.read_first && matches!(command, Command::Reserve { .. });
        for _ in 0..MAX_RACES {
            counters.statements.fetch_add(1, Ordering::Relaxed);
            let row = self
                .statement(operation, key, command, peek)
                .fetch_one(&mut *conn)
                .await
                .map_err(|error| unavailable(failed(error)))?;
            let answer = Answer::from_row(&row).map_err(|error| unavailable(Box::new(error)))?;
            let reply = match command {
                Command::Reserve { owner, .. } => answer.reserve(*owner),
                Command::Complete { .. } => answer.complete(),
                Command::Renew { owner, .. } => answer.renew(*owner),
                Command::Release { .. } => answer.release(),
                Command::Read => answer.read(),
            };
            match reply {
                Ok(reply) => return Ok((reply, answer.now)),
                Err(Refused::Free) if peek => peek = false,
                Err(Refused::Raced) => {
                    counters.raced.fetch_add(1, Ordering::Relaxed);
                }
                Err(Refused::Corrupt(detail)) => {
                    return Err(StoreError::Corrupt {
                        key: self.describe(operation, key),
                        detail,
                    });
                }
                Err(Refused::Free) => {
                    return Err(unavailable("a write statement answered `free`".into()));
                }
                Err(Refused::Unexpected(detail)) => return Err(unavailable(detail.into())),
            }
        }
        Err(unavailable(
            format!("the row changed under {MAX_RACES} statements in a row").into(),
        ))
    }

    /// How a record is named in errors and logs: the table, the operation and the key.
    fn describe(&self, operation: &Operation, key: &Key) -> String {
        format!("{} ({operation}, {key})", self.inner.table)
    }

    fn statement<'q>(
        &self,
        operation: &'q Operation,
        key: &'q Key,
        command: &'q Command,
        peek: bool,
    ) -> Query<'q, Postgres, PgArguments> {
        let sql = &self.inner.sql;
        let query = |sql: &Arc<str>| {
            sqlx::query(AssertSqlSafe(Arc::clone(sql)))
                .bind(operation.as_str())
                .bind(key.as_str())
        };
        match command {
            Command::Reserve {
                owner, fingerprint, ..
            } if peek => query(&sql.peek)
                .bind(owner.to_bytes().to_vec())
                .bind(fingerprint.to_bytes().to_vec()),
            Command::Reserve {
                owner,
                fingerprint,
                lease,
            } => query(&sql.reserve)
                .bind(owner.to_bytes().to_vec())
                .bind(fingerprint.to_bytes().to_vec())
                .bind(millis(*lease)),
            Command::Complete {
                owner,
                fingerprint,
                result,
                retention,
            } => {
                let (state, body) = result_columns(result);
                query(&sql.complete)
                    .bind(owner.to_bytes().to_vec())
                    .bind(fingerprint.to_bytes().to_vec())
                    .bind(state)
                    .bind(body)
                    .bind(millis(*retention))
            }
            Command::Renew { owner, lease } => query(&sql.renew)
                .bind(owner.to_bytes().to_vec())
                .bind(millis(*lease)),
            Command::Release { owner } => query(&sql.release).bind(owner.to_bytes().to_vec()),
            Command::Read => query(&sql.read),
        }
    }
}

/// A pool connection with a statement in flight: closed when dropped unless the statement
/// answered, so that a statement given up (by the command timeout, or by a caller that
/// dropped the command) never leaves its connection in the pool, busy or mid-reply.
struct InFlight {
    conn: PoolConnection<Postgres>,
    answered: bool,
}

impl InFlight {
    fn connection(&mut self) -> &mut PgConnection {
        &mut self.conn
    }

    /// The statement answered: the connection goes back to the pool as usual.
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

/// A duration in whole milliseconds, at most [`MAX_DURATION_MS`].
fn millis(duration: Duration) -> i64 {
    let ms = duration.as_millis().min(u128::from(MAX_DURATION_MS));
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// `future`'s output, or `None` if `deadline` passes first; with no deadline (its caller
/// bounds it), whenever it comes.
async fn by<T>(deadline: Option<Instant>, future: impl Future<Output = T>) -> Option<T> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, future).await.ok(),
        None => Some(future.await),
    }
}
