-- reserve($1 operation, $2 key, $3 owner, $4 fingerprint, $5 lease ms)
--
-- One statement. `cur` reads the record without locking it, so a replay, key reuse, an
-- in-flight answer and the owner's own retry change nothing and take no lock (the live
-- record's answer needs no clock: record::reserve_live). Only a key that is absent, or
-- whose record has expired on the server's clock, is written: inserted, or taken over by
-- ON CONFLICT DO UPDATE, which locks the newest version of the row and judges it again at
-- the clock read after the lock. If that newest version is live (another caller took the
-- key after this statement's snapshot), nothing is written and the reply is `raced`: the
-- adapter runs the statement again, with a fresh snapshot.
--
-- A grant's fence (F1) comes from the sequence `{fences}`: an insert draws it as it forms
-- its row; a takeover draws it after the row lock, once the previous holder's grant has
-- committed, so its draw comes after that holder's, and `greatest` keeps it above the
-- row's own fence whatever wrote it. The owner's own retry answers with the fence it holds.
WITH cur AS (
    SELECT r.state, r.owner, r.fingerprint, r.body, r.expires_at, r.fence, {valid} AS valid
    FROM {records} AS r
    WHERE r.operation = $1 AND r.key = $2
),
clock AS MATERIALIZED (
    SELECT {now} AS now FROM (SELECT count(*) FROM cur) AS read_first
),
put AS (
    INSERT INTO {records} AS r
        (operation, key, state, owner, fingerprint, body, expires_at, fence)
    SELECT $1, $2, 1, $3, $4, NULL, clock.now + $5, nextval('{fences}')
    FROM clock
    WHERE NOT EXISTS (SELECT FROM cur WHERE NOT cur.valid OR cur.expires_at > clock.now)
    ON CONFLICT (operation, key) DO UPDATE
    SET state = 1, owner = excluded.owner, fingerprint = excluded.fingerprint, body = NULL,
        expires_at = {now} + $5, fence = greatest(nextval('{fences}'), r.fence + 1)
    WHERE {valid} AND r.expires_at <= {now}
    RETURNING r.expires_at, r.fence
)
SELECT
    CASE
        WHEN put.expires_at IS NOT NULL THEN 'reserved'
        WHEN cur.state IS NULL THEN 'raced'
        WHEN NOT cur.valid THEN 'corrupt'
        WHEN cur.expires_at <= clock.now THEN 'raced'
        WHEN cur.fingerprint <> $4 THEN 'key_reuse'
        WHEN cur.state = 1 AND cur.owner = $3 THEN 'reserved'
        WHEN cur.state = 1 THEN 'in_flight'
        ELSE 'replay'
    END AS reply,
    -- The instant judged by: a takeover's own clock reading, else the statement's.
    coalesce(put.expires_at - $5, clock.now) AS now,
    coalesce(put.expires_at, cur.expires_at) AS expires_at,
    CASE WHEN put.expires_at IS NOT NULL THEN put.fence ELSE cur.fence END AS fence,
    cur.state, cur.owner, cur.fingerprint, cur.body
FROM clock LEFT JOIN cur ON TRUE LEFT JOIN put ON TRUE
