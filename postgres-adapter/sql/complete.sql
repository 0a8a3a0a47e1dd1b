-- complete($1 operation, $2 key, $3 owner, $4 fingerprint, $5 state (2, 3 or 4), $6 body,
--          $7 retention ms)
--
-- One statement. `cur` locks the newest version of the row (FOR UPDATE), and the clock is
-- read after the lock, so the record and the instant it is judged at belong together;
-- inside a caller's transaction the lock is held until that transaction ends, so a takeover
-- that comes after it waits for the commit and then finds the record completed. The owner
-- is checked here: only the owner's live reservation becomes its result (`in_time`, the
-- reservation's fingerprint kept); an absent or expired key records the result under the
-- command's fingerprint (`after_expiry`); the owner's own completed record is left as it is
-- (`repeated`); another owner's live record, or a value this adapter did not write, is left
-- untouched. A key that was absent from the snapshot but inserted since is `raced`: nothing
-- is written and the adapter runs the statement again.
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
            WHEN cur.state IS NULL THEN 'after_expiry'
            WHEN NOT cur.valid THEN 'corrupt'
            WHEN cur.expires_at <= clock.now THEN 'after_expiry'
            WHEN cur.owner <> $3 THEN 'not_owner'
            WHEN cur.state = 1 THEN 'in_time'
            ELSE 'repeated'
        END AS reply
    FROM clock LEFT JOIN cur ON TRUE
),
put AS (
    INSERT INTO {records} AS r (operation, key, state, owner, fingerprint, body, expires_at)
    SELECT $1, $2, $5, $3,
           CASE WHEN decided.reply = 'in_time' THEN cur.fingerprint ELSE $4 END,
           $6, clock.now + $7
    FROM clock CROSS JOIN decided LEFT JOIN cur ON TRUE
    WHERE decided.reply IN ('in_time', 'after_expiry')
    ON CONFLICT (operation, key) DO UPDATE
    SET state = excluded.state, owner = excluded.owner, fingerprint = excluded.fingerprint,
        body = excluded.body, expires_at = excluded.expires_at
    -- Only the row this statement locked and judged; a row inserted since is `raced`.
    WHERE EXISTS (SELECT FROM cur)
    RETURNING r.expires_at
)
SELECT
    CASE
        WHEN decided.reply IN ('in_time', 'after_expiry') AND put.expires_at IS NULL
            THEN 'raced'
        ELSE decided.reply
    END AS reply,
    clock.now,
    coalesce(put.expires_at, cur.expires_at) AS expires_at,
    cur.fence,
    cur.state, cur.owner, cur.fingerprint, cur.body
FROM clock CROSS JOIN decided LEFT JOIN cur ON TRUE LEFT JOIN put ON TRUE
