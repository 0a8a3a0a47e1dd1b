-- peek($1 operation, $2 key, $3 owner, $4 fingerprint)
--
-- The reserve's read-only first step: one primary-key read, no lock, nothing written, the
-- clock read in the same statement (after its snapshot was taken, as every expression of a
-- statement is). A live record is answered from it, as the reserve statement would (a
-- replay, key reuse, "in flight", the owner's own retry), since a reserve of a live record
-- changes nothing and its answer needs no clock (record::reserve_live). An absent or
-- expired key is `free`: the adapter then runs the reserve statement, which decides again.
SELECT
    CASE
        WHEN r.state IS NULL THEN 'free'
        WHEN NOT {valid} THEN 'corrupt'
        WHEN r.expires_at <= clock.now THEN 'free'
        WHEN r.fingerprint <> $4 THEN 'key_reuse'
        WHEN r.state = 1 AND r.owner = $3 THEN 'reserved'
        WHEN r.state = 1 THEN 'in_flight'
        ELSE 'replay'
    END AS reply,
    clock.now,
    r.expires_at,
    r.fence,
    r.state, r.owner, r.fingerprint, r.body
FROM (SELECT {now} AS now) AS clock
LEFT JOIN {records} AS r ON r.operation = $1 AND r.key = $2
