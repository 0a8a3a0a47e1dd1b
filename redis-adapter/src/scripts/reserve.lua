if not rec then
  local lease_until = later(now, ARGV[3])
  if ARGV[5] ~= '1' then
    put(KEYS[1], 1, ARGV[1], ARGV[2], lease_until)
    return {'R', now, lease_until}
  end
  -- F1: the grant's fence is the server's clock in microseconds; the script then waits for
  -- the clock to move on from it, so every later script on this server, which runs after
  -- this one returns, reads a later clock and grants a greater fence. It waits for any other
  -- reading, not a greater one: a clock stepped back ends the wait at once (the fences are
  -- then out of order, MODEL.md says so) instead of holding the server until it catches up.
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  repeat
    t = redis.call('TIME')
  until tonumber(t[1]) * 1000000 + tonumber(t[2]) ~= us
  -- 8 bytes, big-endian: exact, as the clock in microseconds stays below 2^53 (year 2255).
  local fence = struct.pack('>i8', us)
  put(KEYS[1], 1, ARGV[1], ARGV[2], lease_until, nil, fence)
  return {'R', now, lease_until, fence}
end
if rec.fp ~= ARGV[2] then return {'K', now, rec.fp} end
local ends = rec.deadline
if rec.state == 1 then
  if rec.owner == ARGV[1] then return {'R', now, ends, rec.fence} end
  if ARGV[4] == '1' and not rec.watched then
    -- The waiter mark: the same record (its version and fence too), state 4, its expiry kept.
    redis.call('SET', KEYS[1], string.sub(rec.raw, 1, 3) .. string.char(4) .. string.sub(rec.raw, 5), 'KEEPTTL')
  end
  return {'F', now, ends}
end
if rec.state == 3 then return {'P', now, ends, rec.body} end
if rec.state == 6 then return {'U', now, ends} end
return {'P', now, ends}
