-- The learned limit of adaptive layers, src/throttle/adaptive.rs in Lua (microseconds of
-- Redis's clock), so every replica reads and cuts the same limit in its one take call.
-- An adaptive charge has mode 'a:<min>' ('A:<min>' when its message was just throttled by
-- upstream: the cut happens in this same call), p1 = the configured limit, p2 = the interval
-- in microseconds (not reduced: the limit in force changes). Its learned state is the key
-- KEYS[n + j] (the j-th adaptive charge), "value since cut applied": the limit at `since`
-- (0: never cut), the last throttle reply, the last cut, and the limit the bucket's state is
-- stored at. resolve() turns each into a plain drip charge at the limit in force.

local QUIET = 10

local function learned_load(key, limit)
  local v = redis.call('GET', key)
  if v then
    local a, b, c, d = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')
    if a then
      return {value = tonumber(a), since = tonumber(b), cut = tonumber(c), applied = tonumber(d)}
    end
  end
  return {value = 0, since = 0, cut = 0, applied = limit}
end

local function effective(p, l, t)
  if l.value == 0 then return p.limit end
  local steps = math.max(math.floor((t - l.since) / p.p2) - (QUIET - 1), 0)
  local step = math.max(math.floor(p.limit / 20), 1)
  return math.min(l.value + steps * step, p.limit)
end

local function throttled(p, l, t)
  local old = effective(p, l, t)
  if l.value ~= 0 and t < l.cut + p.p2 then
    return {value = old, since = t, cut = l.cut, applied = l.applied}
  end
  local new = math.min(math.max(math.floor(old * 7 / 10), math.max(p.min, 1)), old)
  return {value = new, since = t, cut = t, applied = l.applied}
end

-- A drip state stored at limit `from` as a state at limit `to` (same interval), holding the
-- same tokens at t.
local function convert(a, b, from, to, t)
  if from == to or a <= t then return a, b end
  local debt = (a - t) * from - b
  local q = ceil_div(debt, to)
  return t + q, q * to - debt
end

-- Turns the adaptive charges of P (the first n keys) into drip charges at their limit in
-- force; each keeps its learned state in p.learned.
local function resolve(P, n, t)
  local j = 0
  for i = 1, n do
    local p = P[i]
    local flag, min = string.match(p.mode, '^([aA]):(%d+)$')
    if flag then
      j = j + 1
      p.limit, p.min = p.p1, tonumber(min)
      local l = learned_load(KEYS[n + j], p.limit)
      if flag == 'A' then l = throttled(p, l, t) end
      p.mode, p.p1 = 'd', effective(p, l, t)
      p.learned = {key = KEYS[n + j], l = l, written = flag == 'A'}
    end
  end
end

-- The state of charge p's bucket, at the limit in force.
local function load_at(key, p, t)
  local a, b = load(key)
  if p.learned then return convert(a, b, p.learned.l.applied, p.p1, t) end
  return a, b
end

-- Writes a learned state; it expires once the limit is back and any bucket would be full.
local function learned_store(p, applied, t)
  local l = p.learned.l
  if l.value == 0 and applied == p.limit then
    redis.call('DEL', p.learned.key)
    return
  end
  local step = math.max(math.floor(p.limit / 20), 1)
  local back = l.since + (QUIET - 1 + ceil_div(p.limit - l.value, step)) * p.p2
  local ttl = math.max(back - t, 0) + ceil_div(p.cap * p.p2, math.max(p.min, 1))
  local v = string.format('%d %d %d %d', l.value, l.since, l.cut, applied)
  redis.call('SET', p.learned.key, v, 'PX', ceil_div(ttl, 1000) + 1)
end
