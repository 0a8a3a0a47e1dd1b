if not rec then return {'X', now, 2} end
if rec.owner ~= ARGV[1] then return {'X', now, 1} end
if rec.state ~= 1 then return {'X', now, 3} end
-- A lease is never shortened; the value (and its waiter mark) is unchanged.
local ends = rec.deadline
local lease_until = later(now, ARGV[2])
if lease_until > ends then
  redis.call('PEXPIREAT', KEYS[1], string.format('%d', lease_until - 1))
  ends = lease_until
end
return {'N', now, ends, rec.fence}
