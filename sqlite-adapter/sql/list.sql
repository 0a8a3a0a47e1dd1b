-- list(?1 now in ms, ?2 after operation, ?3 after key, ?4 operation, ?5 its upper bound
--      (the operation followed by `~u`), ?6 its tenant-scoped prefix (`operation~t-`),
--      ?7 every record, ?8 at most this many rows)
--
-- The operator's listing: one keyset page of records in (operation, key) order (byte
-- order: names are BLOBs), after the cursor's when one is given, with each column's type
-- as `find` returns them, so that the same decoder reads them. Writes nothing. ?4 keeps
-- the records of one operation and of its tenants; the range lets the primary key serve
-- it. Without ?7, pending records only (live or past their lease); with it, every record
-- but a completed one past its retention at ?1, which reads as absent (I9).
SELECT
    r.operation, r.key,
    typeof(r.state) AS state_type,
    typeof(r.owner) AS owner_type,
    typeof(r.fingerprint) AS fingerprint_type,
    typeof(r.body) AS body_type,
    typeof(r.expires_at) AS expires_at_type,
    typeof(r.fence) AS fence_type,
    r.state, r.owner, r.fingerprint, r.body, r.expires_at, r.fence
FROM {records} AS r
WHERE (?2 IS NULL OR (r.operation, r.key) > (?2, ?3))
  AND (?4 IS NULL OR (r.operation >= ?4 AND r.operation < ?5
       AND (r.operation = ?4 OR substr(r.operation, 1, length(?6)) = ?6)))
  AND (r.state = 1 OR (?7 AND r.expires_at > ?1))
ORDER BY r.operation, r.key
LIMIT ?8
