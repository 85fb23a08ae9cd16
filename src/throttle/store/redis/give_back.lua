
-- GIVE BACK: returns tokens (a rollback, an upstream failure, a reservation given up), capped
-- at each bucket's capacity. KEYS[i], ARGV[1]: '' or a test's instant, 5 parameters per charge.
local now = clock(ARGV[1])
for i = 1, #KEYS do
  local p = params(1 + (i - 1) * 5)
  local a, b = load(KEYS[i])
  a, b = give_back(p, a, b, now)
  store(KEYS[i], p, a, b, now)
end
return {0}
