-- stats(?1 now in ms)
--
-- The operator's counts: per operation, the records by state at ?1 (pending with a live
-- lease, pending past it, completed, panicked), and the stored bodies' total and largest
-- size, counted by SQLite without reading a body out. A completed record past its
-- retention reads as absent (I9) and is not counted; rows this adapter did not write are
-- not counted either.
SELECT
    r.operation,
    SUM(r.state = 1 AND r.expires_at > ?1) AS pending,
    SUM(r.state = 1 AND r.expires_at <= ?1) AS expired,
    SUM(r.state IN (2, 3) AND r.expires_at > ?1) AS completed,
    SUM(r.state = 4 AND r.expires_at > ?1) AS panicked,
    COALESCE(SUM(CASE WHEN r.expires_at > ?1 THEN length(r.body) END), 0) AS body_bytes,
    COALESCE(MAX(CASE WHEN r.expires_at > ?1 THEN length(r.body) END), 0) AS largest_body
FROM {records} AS r
WHERE {valid}
GROUP BY r.operation
HAVING SUM(r.state = 1 OR r.expires_at > ?1) > 0
ORDER BY r.operation
