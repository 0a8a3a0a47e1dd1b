local HEADER = 52
local FENCED = 60
local MAX_MS = 9007199254740991

local function later(now, ms)
  return math.min(now + tonumber(ms), MAX_MS)
end

-- The record under KEYS[1]: nil if the key is absent, false and a reason if its value is not
-- ours. Layout 2: a record is live exactly while its key exists; its value holds no deadline.
local function load(key)
  -- One GET: absent is false, another type an error (named, on that rare path, by TYPE).
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then
    return false, 'a Redis ' .. redis.call('TYPE', key)['ok'] .. ', not a string'
  end
  if not raw then return nil end
  if #raw < HEADER then return false, #raw .. ' bytes, shorter than the record header' end
  if string.sub(raw, 1, 2) ~= 'id' then return false, 'no record magic' end
  local version = string.byte(raw, 3)
  if version ~= 2 and version ~= 3 then return false, 'unknown record version ' .. version end
  local state = string.byte(raw, 4)
  if state < 1 or state > 6 or state == 5 then
    return false, 'unknown record state ' .. state
  end
  -- Version 3 is a pending record that carries its grant's fence (F1), 8 bytes after the
  -- header, kept as the bytes it is: no script computes with a stored fence.
  local fence = nil
  if version == 3 then
    fence = string.sub(raw, HEADER + 1)
    if (state ~= 1 and state ~= 4) or #raw ~= FENCED or fence == string.rep('\0', 8) then
      return false, 'a fenced record is a pending one of ' .. FENCED .. ' bytes with a fence'
    end
  end
  -- State 4 is a pending record that a waiter was told about: its complete or release is
  -- announced; it is pending (state 1) below. States 2, 3 and 6 are completed (6: the action
  -- panicked, replayed as 'U'); every script but reserve treats them alike (state ~= 1), and
  -- only state 3 carries a body.
  local watched = state == 4
  if watched then state = 1 end
  if version == 2 and state ~= 3 and #raw ~= HEADER then
    return false, 'a record without a body is ' .. #raw .. ' bytes'
  end
  local rec = {
    state = state,
    owner = string.sub(raw, 5, 20),
    fp = string.sub(raw, 21, 52),
    watched = watched,
    fence = fence,
    raw = raw,
  }
  if state == 3 then rec.body = string.sub(raw, HEADER + 1) end
  return rec
end

-- The deadline of the live record under `key`: its expiry plus one millisecond, or MAX_MS for
-- a key without an expiry (which never ends).
local function deadline(key)
  local expiry = redis.call('PEXPIRETIME', key)
  if expiry < 0 or expiry >= MAX_MS then return MAX_MS end
  return expiry + 1
end

-- `fence`, 8 bytes, makes a fenced pending record (version 3); `body` a completed one's.
local function put(key, state, owner, fp, ends, body, fence)
  local value
  if fence then
    value = 'id' .. string.char(3, state) .. owner .. fp .. fence
  else
    value = 'id' .. string.char(2, state) .. owner .. fp .. (body or '')
  end
  -- Formatted as an integer here: Redis would print a Lua number with '%.17g'.
  redis.call('SET', key, value, 'PXAT', string.format('%d', ends - 1))
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local rec, why = load(KEYS[1])
if rec == false then return {'!', now, why} end
-- The record's deadline, from its key's expiry, judged at this script's own `now`: Redis
-- keeps a key for the whole script by the clock of the script's start, which may lag `TIME`
-- by a millisecond boundary, and the record machine treats a record as absent from its
-- deadline on (I9).
if rec then
  rec.deadline = deadline(KEYS[1])
  if now >= rec.deadline then rec = nil end
end
