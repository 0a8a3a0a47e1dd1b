if not rec then return {'X', now, 2} end
if rec.owner ~= ARGV[1] then return {'X', now, 1} end
if rec.state ~= 1 then return {'X', now, 3} end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' and rec.watched then redis.call(ARGV[2], KEYS[1], '') end
return {'D', now}
