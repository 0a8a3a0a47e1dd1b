local HEADER = 60
local MAX_MS = 9007199254740991
local TWO_32 = 4294967296

-- Eight big-endian bytes of n (below 2^53): two 32-bit halves, packed in C.
local function u64be(n)
  local low = n % TWO_32
  return struct.pack('>I4I4', (n - low) / TWO_32, low)
end

local function later(now, ms)
  return math.min(now + tonumber(ms), MAX_MS)
end

-- The record under KEYS[1]: nil if absent, false and a reason if it is not ours.
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
  if version ~= 1 then return false, 'unknown record version ' .. version end
  local state = string.byte(raw, 4)
  if state < 1 or state > 6 then
    return false, 'unknown record state ' .. state
  end
  -- State 4 is a pending record that a waiter was told about: its complete or release is
  -- announced. State 5 is a bare reservation: pending, its lease end the key's expiry. Both are
  -- pending (state 1) below. States 2, 3 and 6 are completed (6: the action panicked,
  -- replayed as 'U'); every script but reserve treats them alike (state ~= 1), and only
  -- state 3 carries a body.
  local watched = state == 4
  local bare = state == 5
  if watched or bare then state = 1 end
  if state ~= 3 and #raw ~= HEADER then
    return false, 'a record without a body is ' .. #raw .. ' bytes'
  end
  local high, low = struct.unpack('>I4I4', raw, 53)
  local deadline = high * TWO_32 + low
  if bare then
    if deadline ~= 0 then return false, 'a bare reservation with a deadline' end
    local expiry = redis.call('PEXPIRETIME', key)
    if expiry < 0 then return false, 'a bare reservation without an expiry' end
    deadline = expiry + 1
  end
  if deadline > MAX_MS then return false, 'deadline out of range' end
  local rec = {
    state = state,
    owner = string.sub(raw, 5, 20),
    fp = string.sub(raw, 21, 52),
    deadline = deadline,
    watched = watched,
    bare = bare,
    raw = raw,
  }
  if state == 3 then rec.body = string.sub(raw, HEADER + 1) end
  return rec
end

local function put(key, state, owner, fp, deadline, body)
  local value = 'id' .. string.char(1, state) .. owner .. fp .. u64be(deadline) .. (body or '')
  -- Formatted as an integer here: Redis would print a Lua number with '%.17g'.
  redis.call('SET', key, value, 'PXAT', string.format('%d', deadline - 1))
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local rec, why = load(KEYS[1])
if rec == false then return {'!', now, why} end
if rec and now >= rec.deadline then rec = nil end
