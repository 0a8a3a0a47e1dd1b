-- sweep($1 batch size)
--
-- Deletes at most $1 records that have expired on the server's clock (they read as absent
-- already, I9, so no reply changes). Rows locked by anyone (a complete inside a caller's
-- transaction, a takeover) are skipped, and so is every value this adapter did not write.
WITH clock AS MATERIALIZED (
    SELECT {now} AS now
),
gone AS (
    DELETE FROM {records} AS r
    USING clock
    WHERE r.ctid IN (
        SELECT r.ctid
        FROM {records} AS r, clock
        WHERE r.expires_at <= clock.now AND {valid}
        LIMIT $1
        FOR UPDATE OF r SKIP LOCKED
    )
    AND r.expires_at <= clock.now AND {valid}
    RETURNING 1
)
SELECT count(*) AS removed FROM gone
