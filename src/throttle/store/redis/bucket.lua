-- Bucket math of src/throttle/bucket/ in Lua, on integer microseconds. Shared by the take,
-- give-back and peek scripts (prepended to each). Why it is exact: Lua numbers are doubles,
-- exact for integers below 2^53; times are unix microseconds (~1.8e15), and the drip's scaled
-- time line is never used absolutely: a state is (a, b) as in bucket/mod.rs (a = the microsecond
-- the bucket is full again, b = a*L - S in [0, L)), and only differences from now are scaled,
-- bounded by capacity*interval (config validation keeps that below 2^53; L and I arrive
-- divided by their gcd, which changes no decision).
--
-- A charge's parameters: { mode = 'd' | 'w' | 'n', cost, cap, p1, p2 }:
-- drip 'd': p1 = L (tokens per interval), p2 = I (interval in microseconds), both / gcd;
-- fixed window 'w': p1 = the window in microseconds; lifetime 'n': p1 = idle_ttl microseconds.

local function divmod(x, y)
  local q = math.floor(x / y)
  local r = x - q * y
  if r < 0 then
    q, r = q - 1, r + y
  elseif r >= y then
    q, r = q + 1, r - y
  end
  return q, r
end

local function ceil_div(x, y)
  local q, r = divmod(x, y)
  if r > 0 then q = q + 1 end
  return q
end

-- Redis's clock in microseconds, unless a test passes its own instant.
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function params(base)
  return {
    mode = ARGV[base + 1],
    cost = tonumber(ARGV[base + 2]),
    cap = tonumber(ARGV[base + 3]),
    p1 = tonumber(ARGV[base + 4]),
    p2 = tonumber(ARGV[base + 5]),
  }
end

-- A stored state, or (0, 0): a fresh (full) bucket, as State::default().
local function load(key)
  local v = redis.call('GET', key)
  if not v then return 0, 0 end
  local a, b = string.match(v, '^(%d+) (%d+)$')
  if not a then return 0, 0 end
  return tonumber(a), tonumber(b)
end

-- Tokens used at t (fixed window, lifetime): 0 once the window ended or the key is forgotten.
local function used(a, b, t)
  if b > 0 and a > t then return b end
  return 0
end

-- Bucket::take at instant t: true, a, b (the state after) | false, wait (microseconds).
-- One rule bucket/mod.rs does not need: a state anchored in the future by a reservation (a window
-- that starts at T, a lifetime cap last taken at T) grants nothing before T. Local states are
-- never so anchored, so the two agree on every state the local store can hold.
local function take(p, a, b, t)
  local k, cap = p.cost, p.cap
  if k == 0 then return true, a, b end
  if p.mode == 'd' then
    local L, I = p.p1, p.p2
    if a <= t then a, b = t, 0 end
    local debt = (a - t) * L - b + k * I
    if debt <= cap * I then
      local q, r = divmod(k * I, L)
      if r > b then return true, a + q + 1, L - (r - b) end
      return true, a + q, b - r
    end
    return false, ceil_div(debt - cap * I, L)
  elseif p.mode == 'w' then
    local I = p.p1
    if a <= t then return true, t + I, k end
    if b + k <= cap then
      if a - I > t then return false, a - I - t end
      return true, a, b + k
    end
    return false, a - t
  else
    local ttl = p.p1
    local u = used(a, b, t)
    if u + k <= cap then
      if u > 0 and a - ttl > t then return false, a - ttl - t end
      return true, math.max(t + ttl, a), u + k
    end
    return false, a - t
  end
end

-- Bucket::give_back at t, capped at the capacity.
local function give_back(p, a, b, t)
  local k = p.cost
  if p.mode == 'd' then
    local L = p.p1
    local q, r = divmod(k * p.p2, L)
    if b + r < L then
      a, b = a - q, b + r
    else
      a, b = a - q - 1, b + r - L
    end
    if a <= t then return t, 0 end
    return a, b
  end
  if used(a, b, t) > 0 then return a, math.max(b - k, 0) end
  return a, b
end

-- Bucket::full_at: from then on the bucket reads as fresh, so its key can go.
local function full_at(p, a, b)
  if p.mode == 'n' and b == 0 then return 0 end
  return a
end

-- Writes a state, expiring when the bucket is full again; a full bucket needs no key.
local function store(key, p, a, b, t)
  local at = full_at(p, a, b)
  if at <= t then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%d %d', a, b), 'PX', ceil_div(at - t, 1000))
  end
end
