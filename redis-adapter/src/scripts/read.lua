if not rec then return {'E', now} end
return {'V', now, rec.raw, rec.deadline}
