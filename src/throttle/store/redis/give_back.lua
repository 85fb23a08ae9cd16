
-- GIVE BACK: returns tokens (a rollback, an upstream failure, a reservation given up), capped
-- at each bucket's capacity. KEYS[i], ARGV[1]: '' or a test's instant, 5 parameters per charge.
-- Adaptive charges: their learned keys follow (adaptive.lua); tokens go back at the limit
-- the bucket is stored at.
local now = clock(ARGV[1])
local n = (#ARGV - 1) / 5
local P = {}
for i = 1, n do P[i] = params(1 + (i - 1) * 5) end
resolve(P, n, now)
for i = 1, n do
  local p = P[i]
  if p.learned then
    p.p1 = p.learned.l.applied
    p.cap = burst_at(p, p.p1)
    p.cost = math.min(p.asked, p.cap)
  end
  local a, b = load(KEYS[i])
  a, b = give_back(p, a, b, now)
  store(KEYS[i], p, a, b, now)
end
return {0}
