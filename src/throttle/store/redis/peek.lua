
-- PEEK: the allowance of one bucket; writes nothing. KEYS[1], ARGV[1]: '' or a test's instant,
-- then its 5 parameters (cost unused). Answers {capacity, remaining, reset}: reset is the
-- microsecond an active fixed window refills, 0 otherwise; an adaptive layer adds its limit
-- in force (its learned key follows, see adaptive.lua).
local now = clock(ARGV[1])
local P = {params(1)}
resolve(P, 1, now)
local p = P[1]
local a, b = load_at(KEYS[1], p, now)
if p.mode == 'd' then
  local debt = 0
  if a > now then debt = (a - now) * p.p1 - b end
  local level = divmod(p.cap * p.p2 - debt, p.p2)
  local limit = 0
  if p.learned then limit = p.p1 end
  return {p.cap, math.max(level, 0), 0, limit}
end
local reset = 0
if p.mode == 'w' and a > now then reset = a end
return {p.cap, p.cap - used(a, b, now), reset}
