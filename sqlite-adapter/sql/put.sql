-- put(?1 operation, ?2 key, ?3 state, ?4 owner, ?5 fingerprint, ?6 body, ?7 expires_at, ?8 fence)
--
-- Writes the record the record machine decided, over whatever the key held (the command
-- read that row in the same write transaction, and found it well-formed or absent).
INSERT INTO {records} (operation, key, state, owner, fingerprint, body, expires_at, fence)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (operation, key) DO UPDATE SET
    state = excluded.state,
    owner = excluded.owner,
    fingerprint = excluded.fingerprint,
    body = excluded.body,
    expires_at = excluded.expires_at,
    fence = excluded.fence
