#!/usr/bin/env bash
# Relay throughput against a direct baseline, in one run (issue 2):
#   smtp-source -> mailsluice -> smtp-sink   versus   smtp-source -> smtp-sink
# 20 sessions, 1 KiB messages, 1 recipient; once with a new connection per message and once
# reusing connections (-d). Prints messages/s and the ratio relay/direct.
# Needs Debian's postfix package for smtp-source and smtp-sink (see README).
# Usage: bench/relay.sh [messages]   (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
SINK_PORT=${SINK_PORT:-42525}
RELAY_PORT=${RELAY_PORT:-42526}
command -v smtp-source >/dev/null || { echo "smtp-source missing: install postfix" >&2; exit 1; }

cargo build --release -q
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

smtp-sink -u nobody 127.0.0.1:$SINK_PORT 1000 >"$work/sink.log" 2>&1 &
cat > "$work/relay.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$RELAY_PORT"]
max_connections = 10000
[upstream]
url = "smtp://127.0.0.1:$SINK_PORT"
tls = "none"
pool_size = ${POOL_SIZE:-20}
TOML
RUST_LOG=warn target/release/mailsluice --config "$work/relay.toml" 2>"$work/relay.log" &
# Wait until both listen.
for port in $SINK_PORT $RELAY_PORT; do
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done

rate() { # port, extra flags -> messages/s
  local start end
  start=$(date +%s.%N)
  smtp-source -s 20 -l 1024 -m "$N" -f from@example.com -t to@example.com $2 127.0.0.1:$1 >&2 \
    || { echo "smtp-source failed against port $1" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$N / ($end - $start)" | bc -l
}

printf '%-28s %12s %12s %8s\n' mode direct/s relay/s ratio
for mode in "connection per message:" "reused connections (-d):-d"; do
  label=${mode%%:*}; flags=${mode#*:}
  d=$(rate $SINK_PORT "$flags") || exit 1
  r=$(rate $RELAY_PORT "$flags") || exit 1
  printf '%-28s %12.0f %12.0f %8.2f\n' "$label" "$d" "$r" "$(echo "$r / $d" | bc -l)"
done
