-- The learned limit of adaptive layers, src/throttle/adaptive/ in Lua (microseconds of
-- Redis's clock), so every replica reads and cuts the same limit in its one take call.
-- An adaptive charge has mode 'a:<min>:<rule>:<tenant>' ('A:...' when its message was just
-- throttled by upstream: the cut happens in this same call, unless the reply is the tenant's
-- alone (blame.lua); rule 'm' measured, 'x' multiplicative),
-- cap = the configured burst, p1 = the configured limit, p2 = the interval in microseconds
-- (not reduced: the limit in force changes). Its learned state is the key KEYS[n + j] (the
-- j-th adaptive charge), "value since cut applied window granted refused prev_granted
-- prev_refused": the limit at `since` (0: never cut), the last throttle reply, the last cut,
-- the limit the bucket's state is stored at, and the measurement windows (Aimd::granted).
-- resolve() turns each into a plain drip charge at the limit in force and its burst.

local QUIET = 10
local MARGIN_PCT = 90
local MIN_SAMPLE = 10

local function learned_load(key, limit)
  local v = redis.call('GET', key)
  if v then
    local f = {}
    for x in string.gmatch(v, '%d+') do f[#f + 1] = tonumber(x) end
    if #f == 9 then
      return {value = f[1], since = f[2], cut = f[3], applied = f[4], window = f[5],
              granted = f[6], refused = f[7], prev_granted = f[8], prev_refused = f[9]}
    end
  end
  return {value = 0, since = 0, cut = 0, applied = limit, window = 0,
          granted = 0, refused = 0, prev_granted = 0, prev_refused = 0}
end

local function effective(p, l, t)
  if l.value == 0 then return p.limit end
  local steps = math.max(math.floor((t - l.since) / p.p2) - (QUIET - 1), 0)
  local step = math.max(math.floor(p.limit / 20), 1)
  return math.min(l.value + steps * step, p.limit)
end

-- The burst at limit `limit` in force: spec::learned_burst.
local function burst_at(p, limit)
  if limit >= p.limit then return p.burst end
  return math.min(math.max(math.floor(p.burst * limit / p.limit), 1), p.burst)
end

-- Aimd::rolled: the measurement windows moved on to t's.
local function rolled(p, l, t)
  local window = t - t % p.p2
  if window <= l.window then return end
  if l.window + p.p2 == window then
    l.prev_granted, l.prev_refused = l.granted, l.refused
  else
    l.prev_granted, l.prev_refused = 0, 0
  end
  l.window, l.granted, l.refused = window, 0, 0
end

-- Aimd::granted, in place.
local function count_granted(p, t)
  local l = p.learned.l
  rolled(p, l, t)
  l.granted = l.granted + p.asked
end

-- Aimd::measured: what upstream accepted over the last interval, or nil (too few tokens).
local function measured(p, l, t)
  rolled(p, l, t)
  local inside = p.p2 - math.min(math.max(t - l.window, 0), p.p2)
  local granted = l.granted + math.floor(l.prev_granted * inside / p.p2)
  local refused = l.refused + math.floor(l.prev_refused * inside / p.p2)
  if granted < math.min(MIN_SAMPLE, p.limit) then return nil end
  return math.max(granted - refused, 0)
end

-- Aimd::throttled, in place.
local function throttled(p, l, t, cost)
  rolled(p, l, t)
  l.refused = l.refused + cost
  local old = effective(p, l, t)
  local new = nil
  if p.rule == 'x' then
    if l.value == 0 or t >= l.cut + p.p2 then new = math.floor(old * 7 / 10) end
  else
    local m = measured(p, l, t)
    if m then
      m = math.floor(m * MARGIN_PCT / 100)
      if m < old then new = m end
    end
  end
  l.value, l.since = old, t
  if new then
    l.value, l.cut = math.min(math.max(new, math.max(p.min, 1)), old), t
  elseif l.value == p.limit and l.cut == 0 then
    l.value = 0
  end
end

-- A drip state stored at limit `from` as a state at limit `to` (same interval), holding the
-- same tokens at t, at most the burst at `to` (Bucket::converted).
local function convert(p, a, b, from, to, t)
  if from == to or a <= t then return a, b end
  local debt = (a - t) * from - b
  local shrink = math.max(burst_at(p, from) - burst_at(p, to), 0)
  debt = math.max(debt - shrink * p.p2, 0)
  if debt == 0 then return 0, 0 end
  local q = ceil_div(debt, to)
  return t + q, q * to - debt
end

-- Turns the adaptive charges of P (the first n keys) into drip charges at their limit in
-- force; each keeps its learned state in p.learned. The learned keys follow the n bucket
-- keys, then (take only) the blame keys, one each per adaptive charge. A throttled charge
-- whose reply is its tenant's alone is marked p.blamed and cuts nothing.
local function resolve(P, n, t)
  local m = 0
  for i = 1, n do
    if string.match(P[i].mode, '^[aA]:') then m = m + 1 end
  end
  local j = 0
  for i = 1, n do
    local p = P[i]
    local flag, min, rule, tenant = string.match(p.mode, '^([aA]):(%d+):([mx]):(.*)$')
    if flag then
      j = j + 1
      p.limit, p.min, p.rule, p.burst, p.asked = p.p1, tonumber(min), rule, p.cap, p.cost
      p.tenant, p.blame = tenant, KEYS[n + m + j]
      local l = learned_load(KEYS[n + j], p.limit)
      if flag == 'A' then
        if p.blame and blame_replied(p, t) then
          p.blamed = true
        else
          throttled(p, l, t, p.cost)
        end
      end
      p.mode, p.p1 = 'd', effective(p, l, t)
      p.cap = burst_at(p, p.p1)
      p.cost = math.min(p.cost, p.cap)
      p.learned = {key = KEYS[n + j], l = l, written = flag == 'A' and not p.blamed}
    end
  end
end

-- The state of charge p's bucket, at the limit in force.
local function load_at(key, p, t)
  local a, b = load(key)
  if p.learned then return convert(p, a, b, p.learned.l.applied, p.p1, t) end
  return a, b
end

-- Writes a learned state; it expires once the limit is back, any bucket would be full and
-- its measurement windows are past.
local function learned_store(p, applied, t)
  local l = p.learned.l
  local step = math.max(math.floor(p.limit / 20), 1)
  local back = l.since + (QUIET - 1 + ceil_div(p.limit - math.max(l.value, 0), step)) * p.p2
  if l.value == 0 then back = t end
  local ttl = math.max(back - t, 2 * p.p2) + ceil_div(p.burst * p.p2, math.max(p.min, 1))
  local v = string.format('%d %d %d %d %d %d %d %d %d', l.value, l.since, l.cut, applied,
    l.window, l.granted, l.refused, l.prev_granted, l.prev_refused)
  redis.call('SET', p.learned.key, v, 'PX', ceil_div(ttl, 1000) + 1)
end
