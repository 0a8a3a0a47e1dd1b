if not rec then return {'X', now, 2} end
if rec.owner ~= ARGV[1] then return {'X', now, 1} end
if rec.state ~= 1 then return {'X', now, 3} end
local lease_until = math.max(rec.deadline, later(now, ARGV[2]))
put(KEYS[1], rec.watched and 4 or 1, ARGV[1], rec.fp, lease_until)
return {'N', now, lease_until}
