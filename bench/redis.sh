#!/usr/bin/env bash
# Shared store cost, in one run: relay throughput with one non-binding throttle layer
# on store = "local" against the same layer on store = "redis", and Redis round trips per
# message (commands Redis served, from `INFO commandstats` deltas, divided by messages).
#   smtp-source -> mailsluice (layer local) -> upstream
#   smtp-source -> mailsluice (layer redis) -> upstream      (+ a private redis-server)
# 20 sessions reusing connections (-d), 1 KiB messages, 1 recipient, key = the sender domain.
# The upstream is file:// on tmpfs by default, the fastest one the relay has, so that the
# store's cost shows; UPSTREAM=smtp uses smtp-sink instead.
# Needs smtp-source/smtp-sink (Debian's postfix) and redis-server/redis-cli.
# With --replicas: what asynchronous replication allows past a shared limit at a failover
# (a primary SIGKILLed under 8 connections charging one bucket, its replica promoted: the
# grants acknowledged beyond the bucket's capacity, per trial; the replication stream held
# 0, 1 and 10 ms by a proxy that loses what it holds at the kill), then the latency per
# charge with and without `WAIT 1 1000` after it (examples/replication.rs). Needs only
# redis-server.
# Usage: bench/redis.sh [messages]   (default 20000)
#        bench/redis.sh --replicas [trials]   (default 10 per lag)
set -euo pipefail
source "$(dirname "$0")/common.sh"
if [ "${1:-}" = --replicas ]; then
  for p in redis-server redis-cli; do
    command -v $p >/dev/null || { echo "$p missing: install redis-server redis-tools" >&2; exit 1; }
  done
  cargo build --release -q --example replication
  for lag_ms in 0 1 10; do
    "$target/release/examples/replication" excess "${2:-10}" 8 $lag_ms
  done
  "$target/release/examples/replication" wait 5000
  exit 0
fi
N=${1:-20000}
SINK_PORT=${SINK_PORT:-42625}
LOCAL_PORT=${LOCAL_PORT:-42627}
REDIS_RELAY_PORT=${REDIS_RELAY_PORT:-42628}
REDIS_PORT=${REDIS_PORT:-42679}
for p in smtp-source smtp-sink redis-server redis-cli; do
  command -v $p >/dev/null || { echo "$p missing: install postfix redis-server redis-tools" >&2; exit 1; }
done

cargo build --release -q
bin=$target/release/mailsluice
work=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

redis-server --bind 127.0.0.1 --port $REDIS_PORT --save "" --appendonly no --dir "$work" >/dev/null &
# smtp-sink refuses to run as root without -u.
sink_user=(); [ "$(id -u)" = 0 ] && sink_user=(-u nobody)
smtp-sink "${sink_user[@]}" -c 127.0.0.1:$SINK_PORT 1000 >/dev/null 2>&1 &
if [ "${UPSTREAM:-file}" = smtp ]; then
  upstream="url = \"smtp://127.0.0.1:$SINK_PORT\"
tls = \"none\"
pool_size = ${POOL_SIZE:-20}"
else
  mkdir -p "$work/out"; upstream="url = \"file://$work/out\""
fi
relay() { # port, store
  cat > "$work/$2.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$1"]
max_connections = 10000
[upstream]
$upstream
[[throttle]]
name = "bench"
key = "sender-domain"
cost = "message"
limit = 1000000
store = "$2"
[redis]
url = "redis://127.0.0.1:$REDIS_PORT"
TOML
  RUST_LOG=warn "$bin" --config "$work/$2.toml" &
}
relay $LOCAL_PORT local
relay $REDIS_RELAY_PORT redis
sleep 1

rate() { # port -> messages/s
  local start end
  start=$(date +%s.%N)
  smtp-source -s 20 -l 1024 -m "$N" -d -f from@example.com -t to@example.com 127.0.0.1:$1
  end=$(date +%s.%N)
  echo "$N / ($end - $start)" | bc -l
}
stats() { redis-cli -p $REDIS_PORT INFO commandstats; }
# Commands sent by clients: all but INFO and those the scripts run inside (TIME GET SET DEL).
round_trips() {
  stats | awk -F'[:=,]' '/^cmdstat_/ && $1 !~ /^cmdstat_(info|time|get|set|del)$/ { n += $3 } END { print n + 0 }'
}
calls() { stats | awk -F'[:=,]' -v c="cmdstat_$1" '$1 == c { print $3 } END { }' | head -1; }

rate $REDIS_RELAY_PORT >/dev/null # warm-up: connections, script load, key created
printf '%-6s %12s %12s %8s %12s %10s\n' round local/s redis/s ratio round-trips evalsha
for round in 1 2 3; do # alternated, so that other load on the machine hits both alike
  find "$work/out" -type f -delete 2>/dev/null || true
  l=$(rate $LOCAL_PORT)
  before=$(round_trips); evalsha0=$(calls evalsha)
  r=$(rate $REDIS_RELAY_PORT)
  after=$(round_trips); evalsha1=$(calls evalsha)
  printf '%-6s %12.0f %12.0f %8.2f %12.3f %10.3f\n' $round "$l" "$r" "$(echo "$r / $l" | bc -l)" \
    "$(echo "($after - $before) / $N" | bc -l)" "$(echo "($evalsha1 - $evalsha0) / $N" | bc -l)"
done
echo "(round-trips and evalsha: per message on the redis relay, from INFO commandstats deltas)"
