if not rec then
  local lease_until = later(now, ARGV[3])
  put(KEYS[1], 1, ARGV[1], ARGV[2], lease_until)
  return {'R', now, lease_until}
end
if rec.fp ~= ARGV[2] then return {'K', now, rec.fp} end
local ends = rec.deadline
if rec.state == 1 then
  if rec.owner == ARGV[1] then return {'R', now, ends} end
  if ARGV[4] == '1' and not rec.watched then
    -- The waiter mark: the same record, state 4, its expiry kept.
    redis.call('SET', KEYS[1], 'id' .. string.char(2, 4) .. string.sub(rec.raw, 5), 'KEEPTTL')
  end
  return {'F', now, ends}
end
if rec.state == 3 then return {'P', now, ends, rec.body} end
if rec.state == 6 then return {'U', now, ends} end
return {'P', now, ends}
