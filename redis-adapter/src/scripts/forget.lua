-- An operator's forget (idem::admin::AdminStore::forget): delete the record under KEYS[1] if
-- it is still ARGV[1]'s and completed. A pending record is never deleted here: a live one is
-- released by release.lua, and one whose lease ran out is already gone (its key expired).
if not rec or rec.owner ~= ARGV[1] or rec.state == 1 then return {'N', now} end
redis.call('DEL', KEYS[1])
return {'D', now}
