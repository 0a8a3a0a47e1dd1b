-- The one table of idem-postgres. `{records}` is the table's (optionally schema-qualified,
-- quoted) name; `{index}` the name of its expiry index; `{fences}` the sequence the fences
-- are drawn from (F1). Run by `PostgresStore::migrate`,
-- which takes an advisory lock around it, so running it again, or from several processes
-- at once, changes nothing.
--
-- One row per record, keyed by (operation, key) byte for byte (collation "C": equality is
-- byte equality, and keys are never rewritten, I12).
--   state        1 pending, 2 completed with a value, 3 completed without its value
--                (StoredResult::NotStored), 4 completed: the action panicked
--   owner        the owner token, 16 bytes
--   fingerprint  the request's SHA-256, 32 bytes
--   body         the value's bytes when state = 2, else NULL
--   expires_at   milliseconds since the Unix epoch on the server's clock: the lease's end
--                (pending) or the retention's (completed); the record reads as absent
--                from that instant on (I9), and the sweeper deletes it
--   fence        the fence of the grant that wrote the row (F1), kept when it completes;
--                NULL for a result recorded without a grant, and for rows written before
--                the column was added (which `ADD COLUMN IF NOT EXISTS` adds in place)
CREATE TABLE IF NOT EXISTS {records} (
    operation   text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    state       smallint NOT NULL,
    owner       bytea NOT NULL,
    fingerprint bytea NOT NULL,
    body        bytea,
    expires_at  bigint NOT NULL,
    PRIMARY KEY (operation, key)
);
CREATE INDEX IF NOT EXISTS {index} ON {records} (expires_at);
ALTER TABLE {records} ADD COLUMN IF NOT EXISTS fence bigint;
CREATE SEQUENCE IF NOT EXISTS {fences} AS bigint MINVALUE 1;
