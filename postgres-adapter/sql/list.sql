-- list($1 after operation, $2 after key, $3 operation, $4 its tenant-scoped prefix,
--      $5 pending records only, $6 at most this many rows)
--
-- The operator's listing: one keyset page of records in (operation, key) order, after the
-- cursor's (operation, key) when one is given, read with the clock in the same statement
-- (one row with NULL record columns when the page is empty). Writes and locks nothing.
-- $3 keeps the records of one operation, its tenant-scoped ones (`$3~t-…`) included; the
-- range on `operation` lets the primary key's index serve it. $5 keeps pending records,
-- live or past their lease; without it, every record but a completed one past its
-- retention, which reads as absent (I9).
SELECT clock.now, r.operation, r.key, r.state, r.owner, r.fingerprint, r.body, r.expires_at,
       r.fence
FROM (SELECT {now} AS now) AS clock
LEFT JOIN LATERAL (
    SELECT r.*
    FROM {records} AS r
    WHERE ($1::text IS NULL OR (r.operation, r.key) > ($1::text, $2::text))
      AND ($3::text IS NULL OR (
            r.operation >= $3::text AND r.operation < ($3::text || '~u')
            AND (r.operation = $3::text OR left(r.operation, length($4::text)) = $4::text)))
      AND (r.state = 1 OR (NOT $5::boolean AND r.expires_at > clock.now))
    ORDER BY r.operation, r.key
    LIMIT $6
) AS r ON TRUE
ORDER BY r.operation, r.key
