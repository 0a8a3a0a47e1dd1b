-- forget(?1 operation, ?2 key, ?3 owner, ?4 now in ms)
--
-- The operator's delete of one record, one statement (atomic under the file's write
-- lock): only the owner's record, only a row this adapter wrote, and only when it is
-- completed or its lease has run out by ?4. The store reads ?4 before the statement takes
-- the lock: a stale reading judges a lease live a little longer, never over sooner.
DELETE FROM {records}
WHERE rowid IN (
    SELECT r.rowid FROM {records} AS r
    WHERE r.operation = ?1 AND r.key = ?2 AND r.owner = ?3 AND {valid}
      AND (r.state <> 1 OR r.expires_at <= ?4)
)
