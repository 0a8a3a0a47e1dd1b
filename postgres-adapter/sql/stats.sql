-- stats()
--
-- The operator's counts: per operation, the records by state at one reading of the
-- server's clock (pending with a live lease, pending past it, completed, panicked), and
-- the stored bodies' total and largest size, counted in the server without reading a body.
-- A completed record past its retention reads as absent (I9) and is not counted; rows this
-- adapter did not write are not counted either.
SELECT r.operation,
       count(*) FILTER (WHERE r.state = 1 AND r.expires_at > clock.now) AS pending,
       count(*) FILTER (WHERE r.state = 1 AND r.expires_at <= clock.now) AS expired,
       count(*) FILTER (WHERE r.state IN (2, 3) AND r.expires_at > clock.now) AS completed,
       count(*) FILTER (WHERE r.state = 4 AND r.expires_at > clock.now) AS panicked,
       coalesce(sum(octet_length(r.body)) FILTER (WHERE r.expires_at > clock.now), 0)::bigint
           AS body_bytes,
       coalesce(max(octet_length(r.body)) FILTER (WHERE r.expires_at > clock.now), 0)::bigint
           AS largest_body
FROM (SELECT {now} AS now) AS clock
JOIN {records} AS r ON {valid}
GROUP BY r.operation
HAVING count(*) FILTER (WHERE r.state = 1 OR r.expires_at > clock.now) > 0
ORDER BY r.operation
