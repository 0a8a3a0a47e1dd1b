//! The statements, written out for one table: the SQL of every record command, readable
//! here as it runs (a reviewer's one place to check the owner checks and the clock).
//!
//! `{records}` is the quoted table, `{fences}` its fence sequence, `{index}` its expiry
//! index. Two clock readings, both in milliseconds since the Unix epoch and both the
//! **server's** (MODEL.md rule 10); neither depends on the session's `time_zone` (the epoch
//! comes from `UTC_TIMESTAMP`):
//!
//! - `{now}`: the statement's start (`UTC_TIMESTAMP(6)`, fixed for the statement as
//!   `NOW()` is), for the statements that lock nothing or judge only in the direction a
//!   stale reading makes safe (see [`COMPLETE_HELD`]);
//! - `{now_locked}`: the statement's start plus the time it spent before its row was
//!   produced (`SYSDATE(6) - NOW(6)`; `SYSDATE` is read when it is evaluated, after the
//!   row's lock was granted), for the locked read every slow path decides from: the
//!   analogue of PostgreSQL's `clock_timestamp()` read after the lock.

use std::sync::Arc;

use crate::table::TableName;

/// The statement's start, in ms since the epoch, on the server's clock.
pub const NOW: &str =
    "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000 AS SIGNED)";

/// The instant a row of a locking read is produced, after its lock was granted.
pub const NOW_LOCKED: &str = "CAST((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) \
     + TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000 AS SIGNED)";

/// Creates the table, its expiry index and its fence sequence if they are missing. Run by
/// [`MySqlStore::migrate`](crate::MySqlStore::migrate) under a named lock.
///
/// One row per record, keyed by (operation, key) byte for byte (`VARBINARY`: equality is
/// byte equality, keys are never rewritten, I12).
/// - `state`: 1 pending, 2 completed with a value, 3 completed without it
///   (`StoredResult::NotStored`), 4 completed: the action panicked
/// - `owner`: the owner token, 16 bytes; `fingerprint`: the request's SHA-256, 32 bytes
/// - `body`: the value's bytes when state = 2, else NULL (`LONGBLOB`: up to 4 GiB, in
///   practice the server's `max_allowed_packet`)
/// - `expires_at`: ms since the Unix epoch on the server's clock: the lease's end (pending)
///   or the retention's (completed); the record reads as absent from then on (I9)
/// - `fence`: the fence of the grant that wrote the row (F1), kept when it completes; NULL
///   for a result recorded without a grant
pub const MIGRATE: [&str; 2] = [
    "CREATE TABLE IF NOT EXISTS {records} (
    operation   VARBINARY(255) NOT NULL,
    `key`       VARBINARY(255) NOT NULL,
    state       SMALLINT NOT NULL,
    owner       VARBINARY(16) NOT NULL,
    fingerprint VARBINARY(32) NOT NULL,
    body        LONGBLOB NULL,
    expires_at  BIGINT NOT NULL,
    fence       BIGINT NULL,
    PRIMARY KEY (operation, `key`),
    KEY {index} (expires_at)
) ENGINE = InnoDB",
    "CREATE SEQUENCE IF NOT EXISTS {fences} START WITH 1 MINVALUE 1 NOCYCLE ENGINE = InnoDB",
];

/// The record's columns, as every read returns them after the clock reading.
const COLUMNS: &str = "r.state, r.owner, r.fingerprint, r.body, r.expires_at, r.fence";

/// peek(operation, key): the reserve's first step, a consistent (lock-free) read of the row
/// and the statement's clock. A live record is answered from it (`record::reserve_live`:
/// a replay, key reuse, "in flight", the owner's own retry), which changes nothing.
pub const PEEK: &str = "SELECT {now} AS now, {columns}, 0 AS in_tx, '' AS iso
FROM (SELECT 1) AS one LEFT JOIN {records} AS r ON r.operation = ? AND r.`key` = ?";

/// locked(operation, key): the newest committed version of the row, locked until the
/// transaction ends (`FOR UPDATE`), with the clock read after the lock, and whether a
/// transaction is open. Every slow path decides from this row with `record::apply_fenced`.
pub const LOCKED: &str =
    "SELECT {now_locked} AS now, {columns}, CAST(@@in_transaction AS SIGNED) AS in_tx,
    CAST(@@tx_isolation AS CHAR) AS iso
FROM (SELECT 1) AS one LEFT JOIN {records} AS r ON r.operation = ? AND r.`key` = ?
FOR UPDATE";

/// shared(operation, key): as [`LOCKED`] with a shared lock, for a read: it waits for a
/// transaction that holds the row for a complete, so a read after a lost commit reply sees
/// that commit's outcome.
pub const SHARED: &str =
    "SELECT {now_locked} AS now, {columns}, CAST(@@in_transaction AS SIGNED) AS in_tx,
    CAST(@@tx_isolation AS CHAR) AS iso
FROM (SELECT 1) AS one LEFT JOIN {records} AS r ON r.operation = ? AND r.`key` = ?
LOCK IN SHARE MODE";

/// insert_pending(operation, key, owner, fingerprint, lease ms): the grant of a free key,
/// one autocommit statement. The primary key makes it atomic: of two callers only one
/// inserts, the other meets `ER_DUP_ENTRY` and reads again. The fence is drawn in the same
/// statement (a sequence above every earlier draw, F1).
pub const INSERT_PENDING: &str = "INSERT INTO {records}
    (operation, `key`, state, owner, fingerprint, body, expires_at, fence)
VALUES (?, ?, 1, ?, ?, NULL, {now} + ?, NEXTVAL({fences}))
RETURNING expires_at, fence";

/// insert_completed(operation, key, state, owner, fingerprint, body, retention ms): a
/// result recorded on a free key (the lease ran out and the row is gone), no fence.
pub const INSERT_COMPLETED: &str = "INSERT INTO {records}
    (operation, `key`, state, owner, fingerprint, body, expires_at, fence)
VALUES (?, ?, ?, ?, ?, ?, {now} + ?, NULL)
RETURNING expires_at";

/// complete_held(state, body, retention ms, operation, key, owner): the complete of the
/// owner's own live reservation, one autocommit statement (its usual case). The `WHERE`
/// is the owner check and the liveness check, made on the newest version of the row under
/// its lock; the reservation's fingerprint and fence are kept. `LAST_INSERT_ID(expr)` hands
/// the new deadline back in the statement's reply, so the instant judged by is known.
///
/// Its clock is the statement's start, read before any wait for the row's lock: a stale
/// reading judges a record live a little longer, never expired sooner. Here that can only
/// turn a late complete ("after expiry") into an in-time one of the same owner's own
/// reservation, whose lock nobody else held meanwhile: the same record results. Any other
/// case matches no row and goes the locked way.
pub const COMPLETE_HELD: &str = "UPDATE {records}
SET state = ?, body = ?, expires_at = LAST_INSERT_ID({now} + ?)
WHERE operation = ? AND `key` = ? AND owner = ? AND state = 1 AND body IS NULL
  AND LENGTH(fingerprint) = 32 AND (fence IS NULL OR fence > 0) AND expires_at > {now}";

/// complete_held_in_transaction: [`COMPLETE_HELD`] inside a caller's transaction, which it
/// joins only if one is open at READ COMMITTED (else it matches no row, and the locked way
/// says what is wrong).
pub const COMPLETE_HELD_IN_TRANSACTION: &str = "UPDATE {records}
SET state = ?, body = ?, expires_at = LAST_INSERT_ID({now} + ?)
WHERE operation = ? AND `key` = ? AND owner = ? AND state = 1 AND body IS NULL
  AND LENGTH(fingerprint) = 32 AND (fence IS NULL OR fence > 0) AND expires_at > {now}
  AND @@in_transaction = 1 AND @@tx_isolation = 'READ-COMMITTED'";

/// put_pending(owner, fingerprint, expires_at, fence, operation, key): a takeover or a
/// renewal, decided on the locked row.
pub const PUT_PENDING: &str = "UPDATE {records}
SET state = 1, owner = ?, fingerprint = ?, body = NULL, expires_at = ?, fence = ?
WHERE operation = ? AND `key` = ?";

/// put_completed(state, owner, fingerprint, body, expires_at, operation, key): a complete
/// decided on the locked row; the row's fence is kept.
pub const PUT_COMPLETED: &str = "UPDATE {records}
SET state = ?, owner = ?, fingerprint = ?, body = ?, expires_at = ?
WHERE operation = ? AND `key` = ?";

/// end(expires_at, operation, key): a release, decided on the locked row. The record ends
/// in place (its deadline set to the instant judged by, from which it reads as absent, I9)
/// rather than being deleted, so the next grant takes the row over and is fenced above it.
pub const END: &str = "UPDATE {records} SET expires_at = ? WHERE operation = ? AND `key` = ?";

/// next_fence(): a fence above every one drawn before (F1), drawn after the row's lock.
pub const NEXT_FENCE: &str = "SELECT CAST(NEXTVAL({fences}) AS SIGNED)";

/// Whether a row of the records table (unaliased) is one this adapter wrote: a known
/// state, a 16-byte owner, a 32-byte fingerprint, a deadline the record machine can hold,
/// a body exactly when the state is "completed with a value", and no fence or a positive
/// one. The statements that touch rows in bulk (the sweeper, the operator's) touch only
/// these.
pub const VALID: &str = "(expires_at >= 0 AND state BETWEEN 1 AND 4 \
     AND LENGTH(owner) = 16 AND LENGTH(fingerprint) = 32 AND (body IS NULL) = (state <> 2) \
     AND (fence IS NULL OR fence > 0))";

/// sweep(batch): deletes at most `batch` records expired on the server's clock, oldest
/// first, and only rows this adapter wrote.
pub const SWEEP: &str = "DELETE FROM {records}
WHERE expires_at <= {now} AND {valid}
ORDER BY expires_at
LIMIT ?";

/// list(after operation ×3, after key, operation ×4, its tenant-scoped prefix ×2, every
/// record, limit): the operator's listing, one keyset page of records in (operation, key)
/// order after the cursor's, read with the statement's clock (one row of NULL record
/// columns when the page is empty), locking nothing. The operation keeps its own records
/// and its tenants' (`operation~t-…`); the range on `operation` lets the primary key serve
/// it. Without "every record", pending records only (live or past their lease); with it,
/// every record but a completed one past its retention, which reads as absent (I9).
pub const LIST: &str = "SELECT {now} AS now, r.operation, r.`key`, {columns}
FROM (SELECT 1) AS one
LEFT JOIN (
    SELECT * FROM {records}
    WHERE (? IS NULL OR operation > ? OR (operation = ? AND `key` > ?))
      AND (? IS NULL OR (operation >= ? AND operation < CONCAT(?, '~u')
           AND (operation = ? OR LEFT(operation, LENGTH(?)) = ?)))
      AND (state = 1 OR (? AND expires_at > {now}))
    ORDER BY operation, `key`
    LIMIT ?
) AS r ON TRUE
ORDER BY r.operation, r.`key`";

/// forget(operation, key, owner): the operator's delete of one record, one autocommit
/// statement: only the owner's record, only a row this adapter wrote, only when completed
/// or past its lease. Its clock is the statement's start, read before any wait for the
/// row's lock: a stale reading judges a lease live a little longer, never over sooner, and
/// the row is judged as its newest version (a renewal committed meanwhile counts).
pub const FORGET: &str = "DELETE FROM {records}
WHERE operation = ? AND `key` = ? AND owner = ? AND {valid}
  AND (state <> 1 OR expires_at <= {now})";

/// stats(): the operator's counts per operation at one reading of the server's clock:
/// pending with a live lease, pending past it, completed, panicked, and the stored bodies'
/// total and largest size, counted in the server without reading a body. A completed
/// record past its retention (absent, I9) and a row this adapter did not write are not
/// counted.
pub const STATS: &str = "SELECT operation,
    CAST(SUM(state = 1 AND expires_at > {now}) AS SIGNED) AS pending,
    CAST(SUM(state = 1 AND expires_at <= {now}) AS SIGNED) AS expired,
    CAST(SUM(state IN (2, 3) AND expires_at > {now}) AS SIGNED) AS completed,
    CAST(SUM(state = 4 AND expires_at > {now}) AS SIGNED) AS panicked,
    CAST(COALESCE(SUM(CASE WHEN expires_at > {now} THEN LENGTH(body) END), 0) AS SIGNED)
        AS body_bytes,
    CAST(COALESCE(MAX(CASE WHEN expires_at > {now} THEN LENGTH(body) END), 0) AS SIGNED)
        AS largest_body
FROM {records}
WHERE {valid}
GROUP BY operation
HAVING SUM(state = 1 OR expires_at > {now}) > 0
ORDER BY operation";

/// The statements written out for one table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) migrate: [Arc<str>; 2],
    pub(crate) peek: Arc<str>,
    pub(crate) locked: Arc<str>,
    pub(crate) shared: Arc<str>,
    pub(crate) insert_pending: Arc<str>,
    pub(crate) insert_completed: Arc<str>,
    pub(crate) complete_held: Arc<str>,
    pub(crate) complete_held_in_transaction: Arc<str>,
    pub(crate) put_pending: Arc<str>,
    pub(crate) put_completed: Arc<str>,
    pub(crate) end: Arc<str>,
    pub(crate) next_fence: Arc<str>,
    pub(crate) sweep: Arc<str>,
    pub(crate) list: Arc<str>,
    pub(crate) forget: Arc<str>,
    pub(crate) stats: Arc<str>,
}

impl Statements {
    pub(crate) fn new(table: &TableName) -> Self {
        let expand = |template: &str| -> Arc<str> { expand(template, table).into() };
        Self {
            migrate: MIGRATE.map(expand),
            peek: expand(PEEK),
            locked: expand(LOCKED),
            shared: expand(SHARED),
            insert_pending: expand(INSERT_PENDING),
            insert_completed: expand(INSERT_COMPLETED),
            complete_held: expand(COMPLETE_HELD),
            complete_held_in_transaction: expand(COMPLETE_HELD_IN_TRANSACTION),
            put_pending: expand(PUT_PENDING),
            put_completed: expand(PUT_COMPLETED),
            end: expand(END),
            next_fence: expand(NEXT_FENCE),
            sweep: expand(SWEEP),
            list: expand(LIST),
            forget: expand(FORGET),
            stats: expand(STATS),
        }
    }
}

/// `template` written out for `table`.
pub fn expand(template: &str, table: &TableName) -> String {
    template
        .replace("{columns}", COLUMNS)
        .replace("{valid}", VALID)
        .replace("{records}", &table.quoted())
        .replace("{index}", &table.quoted_index())
        .replace("{fences}", &table.quoted_fence_sequence())
        .replace("{now_locked}", NOW_LOCKED)
        .replace("{now}", NOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_written_out() {
        let table = TableName::new("s.t").unwrap();
        let all = [
            PEEK,
            LOCKED,
            SHARED,
            INSERT_PENDING,
            INSERT_COMPLETED,
            COMPLETE_HELD,
            COMPLETE_HELD_IN_TRANSACTION,
            PUT_PENDING,
            PUT_COMPLETED,
            END,
            NEXT_FENCE,
            SWEEP,
            LIST,
            FORGET,
            STATS,
        ];
        for template in all.iter().chain(MIGRATE.iter()) {
            let sql = expand(template, &table);
            assert!(!sql.contains('{') && !sql.contains('}'), "{sql}");
            assert!(sql.contains("`s`.`t"), "{sql}");
        }
        // The locked reads judge by the clock read after their lock.
        for template in [LOCKED, SHARED] {
            assert!(expand(template, &table).contains("SYSDATE(6)"));
        }
        // No statement takes a time from the client: every deadline is server time
        // plus a duration, or one decided from a server reading.
        for template in [
            INSERT_PENDING,
            INSERT_COMPLETED,
            COMPLETE_HELD,
            SWEEP,
            PEEK,
            LIST,
            FORGET,
            STATS,
        ] {
            assert!(expand(template, &table).contains("UTC_TIMESTAMP(6)"));
        }
    }
}
