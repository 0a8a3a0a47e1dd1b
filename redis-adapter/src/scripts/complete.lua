-- Announced only when a waiter marked the pending record: an uncontended call publishes
-- nothing.
local function changed()
  if ARGV[6] ~= '' and rec and rec.watched then redis.call(ARGV[6], KEYS[1], '') end
end
local state = 2
local body = nil
if ARGV[3] == '1' then
  state = 3
  body = ARGV[4]
elseif ARGV[3] == '2' then
  state = 6
end
local expires_at = later(now, ARGV[5])
if not rec then
  put(KEYS[1], state, ARGV[1], ARGV[2], expires_at, body)
  changed()
  return {'C', now, 2}
end
if rec.owner ~= ARGV[1] then return {'X', now, 1} end
if rec.state == 1 then
  put(KEYS[1], state, ARGV[1], rec.fp, expires_at, body)
  changed()
  return {'C', now, 1}
end
return {'C', now, 3}
