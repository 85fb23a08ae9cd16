#!/usr/bin/env bash
# Shared store cost (issue 5), in one run: relay throughput with one non-binding throttle layer
# on store = "local" against the same layer on store = "redis", and Redis round trips per
# message (commands Redis served, from `INFO commandstats` deltas, divided by messages).
#   smtp-source -> mailsluice (layer local) -> smtp-sink
#   smtp-source -> mailsluice (layer redis) -> smtp-sink      (+ a private redis-server)
# 20 sessions reusing connections (-d), 1 KiB messages, 1 recipient, key = the sender domain.
# Needs smtp-source/smtp-sink (Debian's postfix) and redis-server/redis-cli.
# Usage: bench/redis.sh [messages]   (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
SINK_PORT=${SINK_PORT:-42525}
LOCAL_PORT=${LOCAL_PORT:-42527}
REDIS_RELAY_PORT=${REDIS_RELAY_PORT:-42528}
REDIS_PORT=${REDIS_PORT:-42579}
for p in smtp-source smtp-sink redis-server redis-cli; do
  command -v $p >/dev/null || { echo "$p missing: install postfix redis-server redis-tools" >&2; exit 1; }
done

cargo build --release -q
bin=${CARGO_TARGET_DIR:-target}/release/mailsluice
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

redis-server --bind 127.0.0.1 --port $REDIS_PORT --save "" --appendonly no --dir "$work" >/dev/null &
smtp-sink -c 127.0.0.1:$SINK_PORT 1000 >/dev/null 2>&1 &
relay() { # port, store
  cat > "$work/$2.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$1"]
max_connections = 10000
[upstream]
url = "smtp://127.0.0.1:$SINK_PORT"
tls = "none"
pool_size = ${POOL_SIZE:-20}
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
commands() { # every command Redis served so far, INFO excluded
  redis-cli -p $REDIS_PORT INFO commandstats |
    awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" { n += $3 } END { print n + 0 }'
}

rate $REDIS_RELAY_PORT >/dev/null # warm-up: connections, script load, key created
before=$(commands); evalsha0=$(redis-cli -p $REDIS_PORT INFO commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
l=$(rate $LOCAL_PORT)
r=$(rate $REDIS_RELAY_PORT)
after=$(commands); evalsha1=$(redis-cli -p $REDIS_PORT INFO commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')

printf '%-30s %12s\n' "store = \"local\" (msg/s)" "$(printf '%.0f' "$l")"
printf '%-30s %12s\n' "store = \"redis\" (msg/s)" "$(printf '%.0f' "$r")"
printf '%-30s %12.2f\n' "ratio redis/local" "$(echo "$r / $l" | bc -l)"
printf '%-30s %12.3f\n' "redis commands per message" "$(echo "($after - $before) / $N" | bc -l)"
printf '%-30s %12.3f\n' "EVALSHA per message" "$(echo "($evalsha1 - $evalsha0) / $N" | bc -l)"
