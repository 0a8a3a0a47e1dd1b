if not rec then return {'E', now} end
if rec.bare then
  return {'V', now, 'id' .. string.char(1, 1) .. rec.owner .. rec.fp .. u64be(rec.deadline)}
end
return {'V', now, rec.raw}
