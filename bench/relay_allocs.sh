#!/usr/bin/env bash
# Heap allocations per message on reused connections, for one or more relay builds side by
# side: smtp-source -d (20 sessions, 1 KiB, 1 recipient) -> mailsluice -> smtp-sink, the
# relay's calls to libc's malloc counted by a uprobe (`perf stat -e probe_libc:malloc`) over
# M messages. Unlike CPU time, the count does not move with the machine's load, so a change
# of a few allocations shows. With CALLERS=1 it then records the calls with their stacks
# (DWARF) for each build and prints, per message, the relay's or lettre's innermost function
# that made them (the recording loses some calls: each function's share of the recorded calls
# is applied to the exact count).
# Needs Debian's postfix package (smtp-source, smtp-sink), linux-perf, and root (uprobes).
# Usage: bench/relay_allocs.sh [messages]   (default 5000)
#   RELAY_BINS="old new" compares builds (default: target/release/mailsluice, built here).
set -euo pipefail
source "$(dirname "$0")/common.sh"
M=${1:-5000}
SINK_PORT=${SINK_PORT:-42565}
RELAY_PORT=${RELAY_PORT:-42566}
need_tools "install postfix and linux-perf" smtp-source smtp-sink perf
[ -n "${RELAY_BINS:-}" ] || { relay_bin; RELAY_BINS=$RELAY_BIN; }
scratch
libc=$(ldd "$(echo "$RELAY_BINS" | cut -d' ' -f1)" | awk '/libc.so.6/ {print $3}')
perf probe -q -d 'probe_libc:malloc' 2>/dev/null || true
perf probe -q -x "$libc" malloc
trap 'perf probe -q -d "probe_libc:malloc" 2>/dev/null; kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
start_sink_and_write_relay_config "$work"

echo "$M messages a run, 20 sessions, 1 KiB; calls to malloc by the relay, per message"
for bin in $RELAY_BINS; do
  name="$(basename "$(dirname "$bin")")/$(basename "$bin")"
  RUST_LOG=warn "$bin" --config "$work/relay.toml" 2>"$work/relay.log" &
  pid=$!
  wait_port $RELAY_PORT
  source_run 200 # the pool's connections opened, not counted
  perf stat -x, -e probe_libc:malloc -p $pid -o "$work/stat.txt" &
  counter=$!
  sleep 1
  source_run "$M"
  kill -INT $counter; wait $counter || true
  calls=$(awk -F, '/probe_libc:malloc/ {print $1}' "$work/stat.txt")
  printf '  %-30s %6.2f\n' "$name" "$(echo "$calls / $M" | bc -l)"
  if [ -n "${CALLERS:-}" ]; then
    perf record -q -e probe_libc:malloc --call-graph dwarf,8192 -p $pid -o "$work/perf.data" \
      >/dev/null 2>&1 &
    recorder=$!
    sleep 1
    source_run "$M"
    kill -INT $recorder; wait $recorder || true
    perf script -i "$work/perf.data" -F ip,sym 2>/dev/null | python3 -c '
import re, sys, collections
per_message = float(sys.argv[1])
stacks, stack = [], []
for line in sys.stdin:
    if line.strip():
        stack.append(re.sub(r"\s*\(inlined\)$", "", line.strip().split(None, 1)[-1]))
    elif stack:
        stacks.append(stack)
        stack = []
stacks += [stack] if stack else []
by = collections.Counter()
for s in stacks:
    ours = [f for f in s if "mailsluice::" in f or "lettre::" in f]
    by[re.sub(r"::\{\{closure\}\}", "", ours[0])[:100] if ours else "(elsewhere)"] += 1
for name, n in by.most_common(25):
    print(f"      {per_message * n / len(stacks):5.2f}  {name}")
' "$(echo "$calls / $M" | bc -l)"
  fi
  kill $pid; wait $pid 2>/dev/null || true
done
