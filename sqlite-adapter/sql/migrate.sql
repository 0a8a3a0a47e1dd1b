-- migrate
--
-- The records table, its expiry index and the fence counter. STRICT, so that SQLite itself
-- refuses a value of another type in any column; the adapter checks every row it reads all
-- the same (a table created by someone else is not STRICT).
CREATE TABLE IF NOT EXISTS {records} (
    operation   BLOB    NOT NULL,
    key         BLOB    NOT NULL,
    state       INTEGER NOT NULL,
    owner       BLOB    NOT NULL,
    fingerprint BLOB    NOT NULL,
    body        BLOB,
    expires_at  INTEGER NOT NULL,
    fence       INTEGER,
    PRIMARY KEY (operation, key)
) STRICT;
CREATE INDEX IF NOT EXISTS {index} ON {records} (expires_at);
CREATE TABLE IF NOT EXISTS {fences} (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
) STRICT;
