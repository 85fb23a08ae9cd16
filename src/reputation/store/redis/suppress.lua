-- Suppressed addresses: a hash (address -> 'reason|date|added ms') and an index by when each
-- was added. Drops what is older than the ttl, adds each address not there yet (a second
-- bounce keeps the first one's date), and past the bound drops the oldest. Answers how many
-- are held. With no address given, only drops and counts.
--
-- KEYS: 1 the hash, 2 the index
-- ARGV: 1 now (unix ms), 2 ttl (ms), 3 max, 4 'reason|date', 5.. addresses
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
for _, a in ipairs(old) do
  redis.call('HDEL', KEYS[1], a)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
for i = 5, #ARGV do
  local a = ARGV[i]
  if redis.call('ZSCORE', KEYS[2], a) == false then
    redis.call('HSET', KEYS[1], a, ARGV[4] .. '|' .. ARGV[1])
    redis.call('ZADD', KEYS[2], now, a)
  end
end
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if over > 0 then
  local gone = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #gone, 2 do
    redis.call('HDEL', KEYS[1], gone[i])
  end
end
return redis.call('ZCARD', KEYS[2])
