-- The fast complete: the owner completes its own pending record that no waiter marked, the
-- end of every uncontended call. ARGV: the value that record has (the owner's unmarked pending
-- record), the completed record's value, retention - 1 (ms). One GET and one SET, relative
-- expiry, no clock: answers 1 if it completed the record, 0 if the key holds anything else, in
-- which case it changed nothing and the complete script decides.
-- A fenced reservation (version 3) is the same record with its fence after the header.
local held = redis.pcall('GET', KEYS[1])
if held ~= ARGV[1] and not (type(held) == 'string' and #held == 60
    and string.sub(held, 1, 4) == 'id' .. string.char(3, 1)
    and string.sub(held, 5, 52) == string.sub(ARGV[1], 5, 52)) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
