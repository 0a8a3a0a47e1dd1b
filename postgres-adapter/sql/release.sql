-- release($1 operation, $2 key, $3 owner)
--
-- One statement: the newest version of the row locked, the clock read after the lock, the
-- owner checked here; only the owner's live reservation is given up. It is ended in place
-- (its deadline set to the statement's `now`, from which it reads as absent, I9), not
-- deleted: the row keeps its fence, so the next grant is a takeover of the row, drawn after
-- its lock and fenced above it (F1); the sweeper deletes it like any expired row.
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
            WHEN cur.state = 1 THEN 'released'
            ELSE 'already_completed'
        END AS reply
    FROM clock LEFT JOIN cur ON TRUE
),
gone AS (
    UPDATE {records} AS r
    SET expires_at = clock.now
    FROM clock, decided
    WHERE r.operation = $1 AND r.key = $2 AND decided.reply = 'released'
    RETURNING r.expires_at
)
SELECT
    CASE
        WHEN decided.reply = 'released' AND gone.expires_at IS NULL THEN 'raced'
        ELSE decided.reply
    END AS reply,
    clock.now,
    cur.expires_at,
    cur.fence,
    cur.state, cur.owner, cur.fingerprint, cur.body
FROM clock CROSS JOIN decided LEFT JOIN cur ON TRUE LEFT JOIN gone ON TRUE
