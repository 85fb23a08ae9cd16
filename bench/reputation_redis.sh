#!/usr/bin/env bash
# Memory the reputation guard's state takes in Redis, per message, per tenant and per
# suppressed address: a private redis-server is filled with N keys of exactly the shapes
# src/reputation/store/redis/calls.rs writes (the scripts' own writes, replayed with redis-cli), and
# `INFO memory` used_memory is read before and after each kind; the delta over N is the cost.
#   message:   SET {mailsluice:rep}:m:<SES id, 60 bytes> <tenant> PX <window>   (attribution)
#              SET {mailsluice:rep}:f:<feedback id, 60 bytes> 1 PX <window>   (only for an
#              event: one per bounced/complained message, not per message sent)
#   tenant:    its hash, 24 slots x (s, b, c) + over, and its entry in the tenants' index
#   address:   HSET {mailsluice:rep}:sup <addr> 'bounce|2026-12-01|<ms>' + ZADD ...:sup:at
# Needs redis-server and redis-cli.
# Usage: bench/reputation_redis.sh [n]   (default 100000)
set -euo pipefail
source "$(dirname "$0")/common.sh"
n=${1:-100000}
for p in redis-server redis-cli python3; do
  command -v $p >/dev/null || { echo "$p missing: install redis-server redis-tools" >&2; exit 1; }
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no >/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
used() { redis-cli -p "$port" info memory | awk -F: '/^used_memory:/{print $2+0}'; }
measure() { # name, python that prints redis-cli commands, count
  local before after
  before=$(used)
  python3 -c "$2" | redis-cli -p "$port" --pipe >/dev/null
  after=$(used)
  printf '%-34s %8d keys  %7.1f bytes each\n' "$1" "$3" "$(echo "($after - $before) / $3" | bc -l)"
}
w=86400000
measure "message (attribution)" "
for i in range($n):
    print('SET {mailsluice:rep}:m:%s tenant-%d PX $w' % (('0100019a%052d' % i)[:60], i % 1000))
" "$n"
measure "event (feedback id)" "
for i in range($n):
    print('SET {mailsluice:rep}:f:%s 1 PX $w' % ('0100019a%052d' % i)[:60])
" "$n"
t=$(( n / 10 ))
measure "tenant (24 slots full + index)" "
for i in range($t):
    k = '{mailsluice:rep}:t:$w:tenant-%06d' % i
    fields = ' '.join('%s%d %d' % (c, 500000 + s, 12345) for s in range(24) for c in 'sbc')
    print('HSET %s %s over 0' % (k, fields))
    print('PEXPIRE %s 90000000' % k)
    print('ZADD {mailsluice:rep}:tenants:$w 1796083200000 tenant-%06d' % i)
" "$t"
measure "suppressed address" "
for i in range($n):
    a = 'user%07d@example.com' % i
    print('HSET {mailsluice:rep}:sup %s bounce|2026-12-01|1796083200000' % a)
    print('ZADD {mailsluice:rep}:sup:at 1796083200000 %s' % a)
" "$n"
redis-server --version
