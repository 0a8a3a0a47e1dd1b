-- The fenced fast reserve (MODEL.md F1): the single-command reserve with a fence in it. A
-- grant's fence is the server's clock in microseconds, which only a script can read and write
-- in one step, so this is the smallest script that does: TIME, then `SET … NX … PX … GET` of
-- the caller's version-3 pending record with that fence. No prelude, no decoding: the caller
-- decides a value it finds exactly as it decides the single-command reserve's, and hands what
-- the bytes do not settle to the reserve script.
-- ARGV: the pending record's first 52 bytes (version 3, state 1, owner, fingerprint), the
-- lease - 1 (ms), "1" to answer a found record's PTTL too.
-- Answers {1, fence} for a grant; {0, value} or {0, value, pttl} for a key that held a
-- value (nothing written); {2} if the SET was refused (another type, OOM): nothing written,
-- the reserve script decides or names the error.
local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- 8 bytes, big-endian: exact, as the clock in microseconds stays below 2^53 (year 2255).
local fence = struct.pack('>i8', us)
local held = redis.pcall('SET', KEYS[1], ARGV[1] .. fence, 'NX', 'PX', ARGV[2], 'GET')
if type(held) == 'table' then return {2} end
if held then
  if ARGV[3] == '1' then return {0, held, redis.call('PTTL', KEYS[1])} end
  return {0, held}
end
-- A grant: wait for the clock to read anything other than this fence, so every later script
-- on this server reads a later clock and grants a greater fence (a clock stepped back ends
-- the wait at once; MODEL.md says what that costs).
repeat
  t = redis.call('TIME')
until tonumber(t[1]) * 1000000 + tonumber(t[2]) ~= us
return {1, fence}
