if not rec then
  local lease_until = later(now, ARGV[3])
  put(KEYS[1], 1, ARGV[1], ARGV[2], lease_until)
  return {'R', now, lease_until}
end
if rec.fp ~= ARGV[2] then return {'K', now, rec.fp} end
if rec.state == 1 then
  if rec.owner == ARGV[1] then return {'R', now, rec.deadline} end
  if ARGV[4] == '1' and not rec.watched then
    put(KEYS[1], 4, rec.owner, rec.fp, rec.deadline)
  end
  return {'F', now, rec.deadline}
end
if rec.state == 3 then return {'P', now, rec.deadline, rec.body} end
if rec.state == 6 then return {'U', now, rec.deadline} end
return {'P', now, rec.deadline}
