-- Counts for one tenant, in one atomic step: drops the slots of its hash that left the
-- window, adds to the current slot, keeps the tenants' index (bounded: past the bound the
-- tenant used longest ago is forgotten, hash and all), and remembers the message's tenant
-- for the window. Answers the tenant's hash, which the relay sums (`ledger::in_window`).
--
-- KEYS: 1 the tenant's hash, 2 the tenants' index, 3 (optional) the message's id
-- ARGV: 1 slot, 2 sent, 3 bounces, 4 complaints, 5 the hash's ttl (ms), 6 now (unix ms),
--       7 window (ms), 8 max tenants, 9 tenant, 10 the tenant hash's key prefix, 11 slots
local h, index = KEYS[1], KEYS[2]
local slot = tonumber(ARGV[1])
local slots = tonumber(ARGV[11])
local held = redis.call('HGETALL', h)
for i = 1, #held, 2 do
  local n = tonumber(string.sub(held[i], 2))
  if n and slot - n >= slots then
    redis.call('HDEL', h, held[i])
  end
end
for i, kind in ipairs({'s', 'b', 'c'}) do
  local n = tonumber(ARGV[1 + i])
  if n > 0 then
    redis.call('HINCRBY', h, kind .. ARGV[1], n)
  end
end
redis.call('PEXPIRE', h, ARGV[5])
local now = tonumber(ARGV[6])
redis.call('ZADD', index, now, ARGV[9])
redis.call('ZREMRANGEBYSCORE', index, '-inf', now - tonumber(ARGV[7]))
local over = redis.call('ZCARD', index) - tonumber(ARGV[8])
if over > 0 then
  local gone = redis.call('ZPOPMIN', index, over)
  for i = 1, #gone, 2 do
    redis.call('DEL', ARGV[10] .. gone[i])
  end
end
if KEYS[3] then
  redis.call('SET', KEYS[3], ARGV[9], 'PX', ARGV[7])
end
return redis.call('HGETALL', h)
