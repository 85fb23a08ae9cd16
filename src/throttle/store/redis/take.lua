
-- TAKE: every charge of one message, all or nothing, on Redis's clock.
-- KEYS[i]: the bucket of charge i. ARGV[1]: max_wait (microseconds); ARGV[2]: '' (use TIME)
-- or a test's instant; then 5 parameters per charge (see params).
-- Answers {0}: granted now; {1, wait}: reserved, taken now as of instant now + wait (the
-- caller sleeps until then: a later take of the same bucket, from any replica, queues after
-- it); {2, charge, retry_after}: refused, nothing written; {3, charge, capacity}: the cost
-- exceeds a bucket's capacity. Charges are 0-based in the answers.
local n = #KEYS
local max_wait = tonumber(ARGV[1])
local now = clock(ARGV[2])
local P = {}
for i = 1, n do
  P[i] = params(2 + (i - 1) * 5)
  if P[i].cost > P[i].cap then return {3, i - 1, P[i].cap} end
end
local orig = {}
for i = 1, n do
  if not orig[KEYS[i]] then
    local a, b = load(KEYS[i])
    orig[KEYS[i]] = {a, b}
  end
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
    if T == now then return {0} end
    return {1, T - now}
  end
  T = T + worst
  if T - now > max_wait then return {2, wi - 1, T - now} end
end
return {2, 0, T - now}
