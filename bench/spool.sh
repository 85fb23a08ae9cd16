#!/usr/bin/env bash
# Hold mode's spool, in one run, on one disk (the scratch directory):
# 1. accept rate: messages a second answered 250 once on stable storage, mailsluice holding
#    everything (a hold layer of one message a day) against a private Postfix holding
#    everything in its own queue (`check_client_access static:HOLD`: cleanup writes and syncs
#    each queue file, then it stays in hold/). smtp-source, 20 sessions reused (-d), 1 KiB
#    messages, one recipient, ACCEPT messages (default 5000) to each, in turn, ROUNDS times
#    (default 3; the median ratio is the figure).
# 2. release rate: RELEASE messages (default 3000) held by a layer of LIMIT a second (default
#    200, burst 1), released to smtp-sink; the most releases in any 1 s window (from the
#    release log lines' timestamps) against the limit, and the mean rate.
# 3. memory: resident memory of mailsluice with HELD messages held (default 100000, 1 KiB),
#    and the disk they take.
# 4. start time: mailsluice restarted on that spool, from exec to its SMTP port answering
#    (the spool is read back before it listens), and its resident memory then; three times
#    after dropping the page cache (cold: the median is the figure), then once more (warm).
# Needs Debian's postfix package (smtp-source, smtp-sink, postfix) and root (a Postfix master).
# Usage: bench/spool.sh   (ACCEPT, ROUNDS, RELEASE, LIMIT, HELD as above; RELAY_BIN=path for
#   another relay build)
set -euo pipefail
source "$(dirname "$0")/common.sh"
need_tools "install postfix" smtp-source smtp-sink postfix python3
[ "$(id -u)" = 0 ] || { echo "a Postfix master needs root" >&2; exit 1; }
ACCEPT=${ACCEPT:-5000}
ROUNDS=${ROUNDS:-3}
RELEASE=${RELEASE:-3000}
LIMIT=${LIMIT:-200}
HELD=${HELD:-100000}
SINK_PORT=${SINK_PORT:-43525}
RELAY_PORT=${RELAY_PORT:-43526}
POSTFIX_PORT=${POSTFIX_PORT:-43527}
relay_bin
scratch

smtp-sink -u nobody 127.0.0.1:$SINK_PORT 1000 >"$work/sink.log" 2>&1 &

# A relay config with a hold layer of $1 messages every $2 ms, its spool in $3.
relay_config() {
  cat > "$work/relay.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$RELAY_PORT"]
max_connections = 10000
[upstream]
url = "smtp://127.0.0.1:$SINK_PORT"
tls = "none"
[[throttle]]
name = "hold"
key = "none"
cost = "message"
limit = $1
interval_ms = $2
burst = 1
mode = "hold"
max_wait_ms = 0
max_held = 1000000
[spool]
dir = "$3"
min_free_bytes = 0
TOML
}

start_relay() {
  RUST_LOG=${1:-warn} "$RELAY_BIN" --log-format json --config "$work/relay.toml" \
    2>>"$work/relay.log" &
  RELAY_PID=$!
  wait_port $RELAY_PORT
}

stop_relay() {
  kill "$RELAY_PID"; wait "$RELAY_PID" 2>/dev/null || true
}

rate() { # port messages -> messages/s
  local start end
  start=$(date +%s.%N)
  smtp-source -s 20 -l 1024 -m "$2" -f from@example.com -t to@example.com -d 127.0.0.1:$1 >&2
  end=$(date +%s.%N)
  echo "$2 / ($end - $start)" | bc -l
}

# A private Postfix holding every message it takes.
start_postfix() {
  local pf=$work/postfix
  chmod 755 "$work"   # its daemons run as the postfix user
  mkdir -p "$pf/conf" "$pf/queue" "$pf/data"
  chown postfix:postfix "$pf/data"
  cat > "$pf/conf/main.cf" <<CF
compatibility_level = 3.6
queue_directory = $pf/queue
data_directory = $pf/data
mail_owner = postfix
setgid_group = postdrop
myhostname = postfix.test
inet_interfaces = loopback-only
inet_protocols = ipv4
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
relayhost = [127.0.0.1]:$SINK_PORT
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject
smtpd_recipient_restrictions = check_client_access static:HOLD
maillog_file_prefixes = $pf
maillog_file = $pf/maillog
smtp_tls_security_level = none
smtpd_tls_security_level = none
biff = no
CF
  cat > "$pf/conf/master.cf" <<CF
127.0.0.1:$POSTFIX_PORT inet n - n - 100 smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
CF
  postfix -c "$pf/conf" start >/dev/null || { cat "$pf/maillog" >&2; exit 1; }
  trap 'postfix -c "$work/postfix/conf" stop >/dev/null 2>&1 || true; kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
  wait_port $POSTFIX_PORT
}

echo "commit $(git rev-parse --short HEAD), $(nproc) cores, scratch on $(df --output=source "$work" | tail -1)"

# 1. Accept rate, mailsluice and Postfix in turn, ROUNDS times (the machine's load moves).
start_postfix
relay_config 1 86400000 "$work/spool-accept"
start_relay
ratios=()
for round in $(seq "$ROUNDS"); do
  r=$(rate $RELAY_PORT "$ACCEPT")
  p=$(rate $POSTFIX_PORT "$ACCEPT")
  ratios+=("$(echo "$r / $p" | bc -l)")
  printf '1. accept   round %s: mailsluice %6.0f msg/s   postfix %6.0f msg/s   ratio %.2f\n' \
    "$round" "$r" "$p" "${ratios[-1]}"
done
held_files=$(find "$work/spool-accept/held" -type f | wc -l)
pf_files=$(find "$work/postfix/queue/hold" -type f | wc -l)
stop_relay
median=$(printf '%s\n' "${ratios[@]}" | sort -g | sed -n "$(( (ROUNDS + 1) / 2 ))p")
printf '           median ratio %.2f (%s in held/, %s in Postfix'"'"'s hold/)\n' \
  "$median" "$held_files" "$pf_files"

# 2. Release rate: everything but the first held (max_wait_ms = 0), then released at LIMIT/s.
relay_config "$LIMIT" 1000 "$work/spool-release"
: > "$work/relay.log"
start_relay "mailsluice::release=info"
smtp-source -s 20 -l 1024 -m "$RELEASE" -f from@example.com -t to@example.com \
  -d 127.0.0.1:$RELAY_PORT
for _ in $(seq 600); do
  n=$(grep -c '"next":"removed"' "$work/relay.log" || true)
  [ "$n" -ge $((RELEASE - 1)) ] && break
  sleep 0.1
done
stop_relay
python3 - "$work/relay.log" "$LIMIT" <<'PY'
import json, sys
from datetime import datetime
times = []
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("fields", {}).get("next") == "removed":
        times.append(datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp())
times.sort()
j, most = 0, 0
for i, t in enumerate(times):
    while times[j] < t - 1.0:
        j += 1
    most = max(most, i - j + 1)
span = times[-1] - times[0] if len(times) > 1 else 0
limit = int(sys.argv[2])
print(f"2. release  {len(times)} released in {span:.1f} s: {len(times) / max(span, 1e-9):.1f} msg/s "
      f"(limit {limit}/s, burst 1); most in any 1 s window {most} (at most {limit + 1} allowed)")
PY

# 3. Memory with HELD held, and 4. start time on that spool.
relay_config 1 86400000 "$work/spool-held"
start_relay
a=$(rate $RELAY_PORT "$HELD")
rss=$(awk '/VmRSS/{print $2}' /proc/$RELAY_PID/status)
held_files=$(find "$work/spool-held/held" -type f | wc -l)
disk=$(du -sk "$work/spool-held/held" | cut -f1)
stop_relay
printf '3. memory   %s held (taken at %.0f msg/s): resident %.1f MiB; on disk %.0f MiB\n' \
  "$held_files" "$a" "$(echo "$rss / 1024" | bc -l)" "$(echo "$disk / 1024" | bc -l)"
start_time() { # -> "seconds from exec to the SMTP port answering" "resident KiB then"
  local start end
  start=$(date +%s.%N)
  RUST_LOG=warn "$RELAY_BIN" --config "$work/relay.toml" 2>>"$work/relay.log" &
  RELAY_PID=$!
  until (exec 3<>/dev/tcp/127.0.0.1/$RELAY_PORT) 2>/dev/null; do sleep 0.01; done
  end=$(date +%s.%N)
  rss=$(awk '/VmRSS/{print $2}' /proc/$RELAY_PID/status)
  stop_relay
  echo "$(echo "$end - $start" | bc -l) $rss"
}
colds=()
for _ in 1 2 3; do
  sync; echo 3 > /proc/sys/vm/drop_caches
  read -r secs rss <<<"$(start_time)"
  colds+=("$secs")
done
read -r warm _ <<<"$(start_time)"
cold=$(printf '%s\n' "${colds[@]}" | sort -g | sed -n 2p)
printf '4. start    %.2f s from exec to listening with %s held, cold cache (median of %s); %.2f s warm; resident then %.1f MiB\n' \
  "$cold" "$held_files" "$(printf '%.2f ' "${colds[@]}")" "$warm" "$(echo "$rss / 1024" | bc -l)"
