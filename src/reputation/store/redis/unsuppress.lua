-- Lifts one suppression (KEYS: the hash, the index; ARGV[1] the address); answers 1 when it
-- was there.
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
