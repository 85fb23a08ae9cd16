-- Sets a tenant's `over` flag to ARGV[1] ('1' or '0') unless it is so already; answers 1 when
-- it changed, so that of all the replicas that see a change, one logs it. A tenant whose hash
-- is gone (resumed, expired) is left alone.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local old = redis.call('HGET', KEYS[1], 'over') or '0'
if old == ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'over', ARGV[1])
return 1
