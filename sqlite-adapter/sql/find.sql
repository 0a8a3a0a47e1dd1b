-- find(?1 operation, ?2 key)
--
-- One row, always: the record of (operation, key) if there is one (`found`), the SQLite
-- type of each of its columns (so that a value of another type is reported, never decoded
-- into something it is not), its columns, and the last fence granted (`last_fence`).
SELECT
    r.operation IS NOT NULL AS found,
    typeof(r.state) AS state_type,
    typeof(r.owner) AS owner_type,
    typeof(r.fingerprint) AS fingerprint_type,
    typeof(r.body) AS body_type,
    typeof(r.expires_at) AS expires_at_type,
    typeof(r.fence) AS fence_type,
    r.state, r.owner, r.fingerprint, r.body, r.expires_at, r.fence,
    (SELECT f.last FROM {fences} AS f WHERE f.id = 1) AS last_fence
FROM (SELECT 1) AS one
LEFT JOIN {records} AS r ON r.operation = ?1 AND r.key = ?2
