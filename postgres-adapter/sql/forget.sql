-- forget($1 operation, $2 key, $3 owner)
--
-- The operator's delete of one record, in one statement: only the record of the owner the
-- operator read, only a row this adapter wrote, and only when it is completed or its lease
-- has run out on the server's clock. The clock is `clock_timestamp()`, read again when the
-- row is rechecked after waiting for its lock (a renewal or a takeover committed
-- meanwhile is judged as it now is), so a live lease is never deleted.
DELETE FROM {records} AS r
WHERE r.operation = $1 AND r.key = $2 AND r.owner = $3 AND {valid}
  AND (r.state <> 1 OR r.expires_at <= {now})
