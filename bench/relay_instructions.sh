#!/usr/bin/env bash
# The relay's user-space instructions per message on reused connections, for one or more
# builds side by side: smtp-source -d (20 sessions, 1 KiB, 1 recipient) -> relay ->
# smtp-sink, the relay under valgrind's callgrind, its counters zeroed after a warm-up and
# dumped after M messages. Unlike CPU time the count barely moves with the machine's load,
# so a change of a few percent of the relay's user time shows; the kernel's share (the
# system calls) is not in it (bench/relay_cpu.sh has that). Any program that takes
# `--config <mailsluice config>` can be a build (bench/floor, the baseline, does).
# With TOP=n it prints each build's n largest functions by inclusive count, per message.
# With CACHE=1 callgrind also models the caches and branch predictors (of this machine's
# sizes) and prints, per message, the misses of the first-level instruction cache (I1), of
# the first-level data cache on reads and on writes (D1r, D1w), and the mispredicted
# conditional and indirect branches: what the instruction count does not show, a hot path
# too large for the cache. The kernel's part (its own misses, and the cache it evicts) is
# not in it.
# Needs Debian's postfix package (smtp-source, smtp-sink) and valgrind.
# Usage: bench/relay_instructions.sh [messages]   (default 2000)
#   RELAY_BINS="old new" compares builds (default: target/release/mailsluice, built here).
set -euo pipefail
source "$(dirname "$0")/common.sh"
M=${1:-2000}
SINK_PORT=${SINK_PORT:-42595}
RELAY_PORT=${RELAY_PORT:-42596}
need_tools "install postfix and valgrind" smtp-source smtp-sink valgrind callgrind_control
[ -n "${RELAY_BINS:-}" ] || { relay_bin; RELAY_BINS=$RELAY_BIN; }
scratch
start_sink_and_write_relay_config "$work"

echo "$M messages a run, 20 sessions, 1 KiB; the relay's instructions in user space, per message"
for bin in $RELAY_BINS; do
  name="$(basename "$(dirname "$bin")")/$(basename "$bin")"
  out="$work/$(echo "$name" | tr / _).cg"
  sim=()
  [ -z "${CACHE:-}" ] || sim=(--cache-sim=yes --branch-sim=yes)
  (cd "$work" && RUST_LOG=warn exec valgrind -q --tool=callgrind "${sim[@]}" \
    --callgrind-out-file="$out" "$bin" --config "$work/relay.toml" 2>"$work/relay.log") &
  pid=$!
  for _ in $(seq 600); do # valgrind starts slowly: at most 60 s
    (exec 3<>/dev/tcp/127.0.0.1/$RELAY_PORT) 2>/dev/null && break
    sleep 0.1
  done
  source_run 200 # the pool's connections opened, the code paths warm: not counted
  callgrind_control -z >/dev/null 2>&1
  source_run "$M"
  callgrind_control -d >/dev/null 2>&1
  kill $pid; wait $pid 2>/dev/null || true
  dump=$(ls -t "$out".* | head -1)
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  printf '  %-30s %9.0f\n' "$name" "$(echo "$total / $M" | bc -l)"
  if [ -n "${CACHE:-}" ]; then
    # The totals' columns: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim.
    callgrind_annotate "$dump" 2>/dev/null | awk -v m="$M" '/PROGRAM TOTALS/ {
        for (i = 1; i <= NF; i++) gsub(",", "", $i)
        c[0] = $1; n = 0
        for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) c[++n] = $i
        printf "      per message: I1 misses %.0f, D1r misses %.0f, D1w misses %.0f, branches mispredicted %.0f (conditional) %.0f (indirect)\n",
          c[3] / m, c[4] / m, c[5] / m, c[10] / m, c[12] / m
      }'
  fi
  if [ -n "${TOP:-}" ]; then
    callgrind_annotate --inclusive=yes "$dump" 2>/dev/null |
      awk -v m="$M" -v top="$TOP" '/file:function/ {on = 1; next}
        on && $1 ~ /^[0-9,]+$/ && n < top {
          c = $1; gsub(",", "", c); $1 = ""; $2 = ""
          sub(/^ +/, ""); sub(/ \[.*/, ""); sub(/^[^:]*:/, "")
          if (!seen[$0]++) { printf "      %8.0f  %s\n", c / m, substr($0, 1, 110); n++ }
        }'
  fi
done
