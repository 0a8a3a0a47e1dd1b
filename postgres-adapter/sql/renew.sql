-- renew($1 operation, $2 key, $3 owner, $4 lease ms)
--
-- One statement: the newest version of the row locked, the clock read after the lock, the
-- owner checked here; only the owner's live reservation is extended, to
-- max(lease end, now + lease) (I10).
WITH cur AS (
    SELECT r.state, r.owner, r.fingerprint, r.body, r.expires_at, r.fence, {valid} AS valid
    FROM {records} AS r
    WHERE r.operation = $1 AND r.key = $2
    FOR UPDATE
),
clock AS MATERIALIZED (
    SELECT {now} AS now FROM (SELECT count(*) FROM cur) AS locked_first
),
decided AS MATERIALIZED (
    SELECT
        CASE
            WHEN cur.state IS NULL THEN 'lease_lost'
            WHEN NOT cur.valid THEN 'corrupt'
            WHEN cur.expires_at <= clock.now THEN 'lease_lost'
            WHEN cur.owner <> $3 THEN 'not_owner'
            WHEN cur.state = 1 THEN 'renewed'
            ELSE 'already_completed'
        END AS reply
    FROM clock LEFT JOIN cur ON TRUE
),
put AS (
    UPDATE {records} AS r
    SET expires_at = greatest(r.expires_at, clock.now + $4)
    FROM clock, decided
    WHERE r.operation = $1 AND r.key = $2 AND decided.reply = 'renewed'
    RETURNING r.expires_at
)
SELECT
    CASE
        WHEN decided.reply = 'renewed' AND put.expires_at IS NULL THEN 'raced'
        ELSE decided.reply
    END AS reply,
    clock.now,
    coalesce(put.expires_at, cur.expires_at) AS expires_at,
    cur.fence,
    cur.state, cur.owner, cur.fingerprint, cur.body
FROM clock CROSS JOIN decided LEFT JOIN cur ON TRUE LEFT JOIN put ON TRUE
