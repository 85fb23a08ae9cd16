#!/usr/bin/env bash
# Round trips to a far upstream, in one run:
#   smtp-source -d -> mailsluice -> [delay] -> test upstream
#   smtp-source -d -> Postfix    -> [delay] -> test upstream     (when postfix runs here, as root)
# The upstream (examples/latency.rs) is the test upstream behind a proxy that holds what the
# client sends for DELAY ms (10 and 40), PIPELINING advertised or not; the relay's pool_size
# (Postfix: smtp_destination_concurrency_limit) is 1, 4 and 16. 1 KiB messages, 1 recipient,
# max(20, 2 x pool) client sessions reusing connections.
# Per row: messages/s at the upstream (first to last arrival), round trips per message counted
# at the upstream (flights: groups of lines that arrived in one read, connection setup
# included) and derived from the rate (pool / (rate x delay)).
# Usage: bench/latency.sh   (env: DELAYS="10 40" POOLS="1 4 16" SCALE=30 POSTFIX=1)
set -euo pipefail
source "$(dirname "$0")/common.sh"
UP_PORT=${UP_PORT:-43525}
RELAY_PORT=${RELAY_PORT:-43526}
PF_PORT=${PF_PORT:-43527}
DELAYS=${DELAYS:-"10 40"}
POOLS=${POOLS:-"1 4 16"}
SCALE=${SCALE:-30}   # messages per run: SCALE x pool x 40 / delay (a few seconds each)
POSTFIX=${POSTFIX:-1}
command -v smtp-source >/dev/null || { echo "smtp-source missing: install postfix" >&2; exit 1; }
if [ "$POSTFIX" = 1 ] && { ! command -v postfix >/dev/null || [ "$(id -u)" != 0 ]; }; then
  echo "Postfix column skipped: needs the postfix package and root" >&2; POSTFIX=0
fi

cargo build --release -q --bin mailsluice
cargo build -q --example latency
work=$(mktemp -d)
chmod 755 "$work" # Postfix (mail_owner) works in it
PF_CONF=""
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  [ -n "$PF_CONF" ] && postfix -c "$PF_CONF" stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

start_upstream() { # delay_ms on|off messages
  "$target/debug/examples/latency" $UP_PORT "$1" "$2" "$3" >"$work/up.out" 2>"$work/up.err" &
  UP_PID=$!
  wait_port $UP_PORT
}

start_relay() { # pool
  cat > "$work/relay.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$RELAY_PORT"]
max_connections = 10000
[upstream]
url = "smtp://127.0.0.1:$UP_PORT"
tls = "none"
pool_size = $1
TOML
  RUST_LOG=warn "$target/release/mailsluice" --config "$work/relay.toml" 2>"$work/relay.log" &
  RELAY_PID=$!
  wait_port $RELAY_PORT
}

start_postfix() { # pool; as tests/reliability/postfix.rs, with the pool as its concurrency
  local dir="$work/pf$RANDOM"
  mkdir -p "$dir/conf" "$dir/queue" "$dir/data"
  chown postfix:postfix "$dir/data"
  cat > "$dir/conf/main.cf" <<CF
compatibility_level = 3.6
queue_directory = $dir/queue
data_directory = $dir/data
mail_owner = postfix
setgid_group = postdrop
myhostname = postfix.test
mydomain = test
inet_interfaces = loopback-only
inet_protocols = ipv4
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
relayhost = [127.0.0.1]:$UP_PORT
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject
maillog_file_prefixes = $dir
maillog_file = $dir/maillog
smtp_tls_security_level = none
smtpd_tls_security_level = none
default_destination_concurrency_limit = $1
smtp_destination_concurrency_limit = $1
initial_destination_concurrency = $1
in_flow_delay = 0
biff = no
CF
  { echo "127.0.0.1:$PF_PORT inet n - n - - smtpd"
    sed -n '/^const MASTER_CF/,/^";/p' tests/reliability/postfix.rs | sed '1d;$d'
  } > "$dir/conf/master.cf"
  PF_CONF="$dir/conf"
  postfix -c "$PF_CONF" start >/dev/null 2>&1 || { cat "$dir/maillog" >&2; exit 1; }
  wait_port $PF_PORT
}

stop_postfix() {
  postfix -c "$PF_CONF" stop >/dev/null 2>&1 || true
  PF_CONF=""
  sleep 1
}

run() { # port messages sessions; LINE = the upstream's line once all arrived
  smtp-source -d -s "$3" -l 1024 -m "$2" -f from@example.com -t to@example.com \
    127.0.0.1:"$1" >/dev/null 2>&1 || { echo "smtp-source failed against $1" >&2; exit 1; }
  wait $UP_PID || { echo "upstream failed: $(cat "$work/up.err")" >&2; exit 1; }
  LINE=$(cat "$work/up.out")
}

field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
derived() { echo "$1 / ($2 * $3 / 1000)" | bc -l; } # pool rate delay_ms -> round trips

printf '%-6s %-5s %-5s | %9s %7s %7s | %9s %7s %7s | %7s\n' delay pipe pool \
  relay/s rt rt~ postfix/s rt rt~ ratio
for delay in $DELAYS; do
  for pipe in on off; do
    for pool in $POOLS; do
      n=$((SCALE * pool * 40 / delay)); sessions=$((pool * 2 > 20 ? pool * 2 : 20))
      start_upstream "$delay" "$pipe" "$n"; start_relay "$pool"
      run $RELAY_PORT "$n" "$sessions"
      kill $RELAY_PID; wait $RELAY_PID 2>/dev/null || true
      r=$(field rate "$LINE"); rf=$(field flights "$LINE")
      p=- pf=- pd=- ratio=-
      if [ "$POSTFIX" = 1 ]; then
        start_upstream "$delay" "$pipe" "$n"; start_postfix "$pool"
        run $PF_PORT "$n" "$sessions"
        stop_postfix
        p=$(field rate "$LINE"); pf=$(field flights "$LINE")
        pd=$(printf '%.2f' "$(derived "$pool" "$p" "$delay")")
        ratio=$(printf '%.2f' "$(echo "$r / $p" | bc -l)")
      fi
      printf '%-6s %-5s %-5s | %9.1f %7.2f %7.2f | %9s %7s %7s | %7s\n' "${delay}ms" "$pipe" \
        "$pool" "$r" "$rf" "$(derived "$pool" "$r" "$delay")" "$p" "$pf" "$pd" "$ratio"
    done
  done
done
