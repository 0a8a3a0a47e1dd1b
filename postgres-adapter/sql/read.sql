-- read($1 operation, $2 key)
--
-- One statement, which writes nothing. It takes the weakest row lock (FOR KEY SHARE), which
-- waits for a transaction that holds the row for a complete: the attempt reads the record
-- when a commit's reply was lost, and must see that commit's outcome, not the state before.
WITH cur AS (
    SELECT r.state, r.owner, r.fingerprint, r.body, r.expires_at, r.fence, {valid} AS valid
    FROM {records} AS r
    WHERE r.operation = $1 AND r.key = $2
    FOR KEY SHARE
),
clock AS MATERIALIZED (
    SELECT {now} AS now FROM (SELECT count(*) FROM cur) AS locked_first
)
SELECT
    CASE
        WHEN cur.state IS NULL THEN 'absent'
        WHEN NOT cur.valid THEN 'corrupt'
        WHEN cur.expires_at <= clock.now THEN 'absent'
        ELSE 'read'
    END AS reply,
    clock.now,
    cur.expires_at,
    cur.fence,
    cur.state, cur.owner, cur.fingerprint, cur.body
FROM clock LEFT JOIN cur ON TRUE
