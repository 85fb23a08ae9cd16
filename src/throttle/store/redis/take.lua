
-- TAKE: every charge of one message, all or nothing, on Redis's clock.
-- KEYS[i]: the bucket of charge i. ARGV[1]: max_wait (microseconds); ARGV[2]: '' (use TIME)
-- or a test's instant; then 5 parameters per charge (see params).
-- Answers {0}: granted now; {1, wait}: reserved, taken now as of instant now + wait (the
-- caller sleeps until then: a later take of the same bucket, from any replica, queues after
-- it); {2, charge, retry_after}: refused, nothing written; {3, charge, capacity}: the cost
-- exceeds a bucket's capacity; {4, charge}: upstream's throttle reply was the charge's tenant's
-- alone in its adaptive layer (blame.lua): nothing taken, the other layers' cuts applied, the
-- message is to wait before it asks again. Charges are 0-based in the answers. The learned
-- and blame keys of adaptive charges follow the n bucket keys (see adaptive.lua); every
-- answer but {3, ...} ends with the limit in force of each adaptive charge, in order.
local n = (#ARGV - 2) / 5
local max_wait = tonumber(ARGV[1])
local now = clock(ARGV[2])
local P = {}
for i = 1, n do
  P[i] = params(2 + (i - 1) * 5)
  if P[i].cost > P[i].cap then return {3, i - 1, P[i].cap} end
end
resolve(P, n, now)
local orig = {}
for i = 1, n do
  if not orig[KEYS[i]] then
    local a, b = load_at(KEYS[i], P[i], now)
    orig[KEYS[i]] = {a, b}
  end
end
-- The answer, with the limits in force; writes the learned states (applied: whether the
-- buckets were written at the limit in force).
local function answer(r, applied)
  for i = 1, n do
    local p = P[i]
    if p.learned then
      if applied then
        count_granted(p, now)
        learned_store(p, p.p1, now)
        blame_granted(p, now)
      elseif p.learned.written then
        learned_store(p, p.learned.l.applied, now)
      end
      r[#r + 1] = p.p1
    end
  end
  return r
end
for i = 1, n do
  if P[i].blamed then return answer({4, i - 1}, false) end
end
-- Try every charge at instant T (now first); when some must wait, move T to the latest of
-- their earliest instants and try again. One retry suffices unless one bucket is charged twice.
local T = now
for _ = 1, 8 do
  local st, worst, wi = {}, 0, 1
  for i = 1, n do
    local s = st[KEYS[i]] or orig[KEYS[i]]
    local ok, a, b = take(P[i], s[1], s[2], T)
    if ok then
      st[KEYS[i]] = {a, b}
    elseif a > worst then
      worst, wi = a, i
    end
  end
  if worst == 0 then
    for i = 1, n do
      local s = st[KEYS[i]]
      if s then
        store(KEYS[i], P[i], s[1], s[2], now)
        st[KEYS[i]] = nil
      end
    end
    if T == now then return answer({0}, true) end
    return answer({1, T - now}, true)
  end
  T = T + worst
  if T - now > max_wait then return answer({2, wi - 1, T - now}, false) end
end
return answer({2, 0, T - now}, false)
