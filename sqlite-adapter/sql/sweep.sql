-- sweep(?1 now in ms, ?2 batch size)
--
-- Deletes at most ?2 records that have expired by ?1 (they read as absent already, I9, so
-- no reply changes), and only rows this adapter wrote: a row of any other shape is left for
-- a person to look at.
DELETE FROM {records}
WHERE rowid IN (
    SELECT r.rowid FROM {records} AS r
    WHERE r.expires_at <= ?1 AND {valid}
    LIMIT ?2
)
