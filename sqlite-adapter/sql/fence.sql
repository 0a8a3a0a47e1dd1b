-- fence(?1 last)
--
-- Remembers the last fence granted, in the grant's own transaction.
INSERT INTO {fences} (id, last) VALUES (1, ?1)
ON CONFLICT (id) DO UPDATE SET last = excluded.last
