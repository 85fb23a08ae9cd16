-- Whose messages upstream throttles, one tenant's alone or everyone's (src/throttle/blame.rs),
-- for adaptive layers in Redis, so that the grants and replies of every replica count. The
-- hash at an adaptive charge's blame key (it follows the learned keys, see resolve) holds, for
-- grants ('g') and throttle replies ('r'): the last tenant seen ('gl'), when ('ga'), and when
-- another tenant was last seen ('go'). Kept two intervals after its last write.

local function seen_note(key, kind, tenant, t)
  local f = redis.call('HMGET', key, kind .. 'l', kind .. 'a')
  if f[1] == tenant then
    redis.call('HSET', key, kind .. 'a', t)
    return
  end
  if f[2] then redis.call('HSET', key, kind .. 'o', f[2]) end
  redis.call('HSET', key, kind .. 'l', tenant, kind .. 'a', t)
end

-- Whether a tenant other than `tenant` was seen at or after `since`.
local function seen_other_than(key, kind, tenant, since)
  local f = redis.call('HMGET', key, kind .. 'l', kind .. 'a', kind .. 'o')
  if f[1] and f[1] ~= tenant then return tonumber(f[2]) >= since end
  return f[3] and tonumber(f[3]) >= since or false
end

local function blame_touch(p)
  redis.call('PEXPIRE', p.blame, ceil_div(2 * p.p2, 1000) + 1)
end

-- Blame::granted: tokens granted to a message of p.tenant.
local function blame_granted(p, t)
  if not p.blame or p.tenant == '' then return end
  seen_note(p.blame, 'g', p.tenant, t)
  blame_touch(p)
end

-- Blame::replied: a throttle reply to a message of p.tenant; whether it is that tenant's
-- alone (another tenant granted within the interval, no other tenant's message throttled).
local function blame_replied(p, t)
  local since = math.max(t - p.p2, 0)
  local alone = p.tenant ~= '' and seen_other_than(p.blame, 'g', p.tenant, since)
    and not seen_other_than(p.blame, 'r', p.tenant, since)
  seen_note(p.blame, 'r', p.tenant, t)
  blame_touch(p)
  return alone
end
