#!/usr/bin/env bash
# Relay throughput against a direct baseline, in one run:
#   smtp-source -> mailsluice -> smtp-sink   versus   smtp-source -> smtp-sink
# 20 sessions, 1 KiB messages, 1 recipient; once with a new connection per message and once
# reusing connections (-d). Prints messages/s and the ratio relay/direct, then the CPU time
# per message of the relay, smtp-sink and smtp-source in each run (utime + stime from
# /proc/<pid>/stat before and after; smtp-source's from its parent shell's cutime + cstime).
# Needs Debian's postfix package for smtp-source and smtp-sink (see docs/development.md).
# Usage: bench/relay.sh [messages]   (default 20000; RELAY_BIN=path runs another relay build,
#   RELAY_ARGS="--workers 1" gives it more arguments)
# bench/relay_cpu.sh breaks the reused-connections run down: system calls and context
# switches per message, builds side by side.
set -euo pipefail
source "$(dirname "$0")/common.sh"
N=${1:-20000}
SINK_PORT=${SINK_PORT:-42525}
RELAY_PORT=${RELAY_PORT:-42526}
command -v smtp-source >/dev/null || { echo "smtp-source missing: install postfix" >&2; exit 1; }

cargo build --release -q
scratch

start_sink_and_write_relay_config "$work"
RUST_LOG=warn "${RELAY_BIN:-$target/release/mailsluice}" ${RELAY_ARGS:-} --config "$work/relay.toml" 2>"$work/relay.log" &
RELAY_PID=$!
# Wait until both listen.
for port in $SINK_PORT $RELAY_PORT; do wait_port $port; done

TCK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' /proc/$1/stat; } # utime + stime of a running process
us_per_msg() { echo "$1 * 1000000 / $TCK / $N" | bc -l; }

rate() { # port, extra flags -> "messages/s relay_ticks sink_ticks source_ticks"
  local start end relay0 sink0 source
  relay0=$(ticks $RELAY_PID); sink0=$(ticks $SINK_PID)
  start=$(date +%s.%N)
  # smtp-source's CPU: once it was waited for, it is in its parent's cutime + cstime.
  source=$(bash -c 'smtp-source -s 20 -l 1024 -m "$1" -f from@example.com -t to@example.com \
      $3 127.0.0.1:$2 >&2 || exit 1; awk "{print \$16 + \$17}" /proc/$$/stat' _ "$N" "$1" "$2") \
    || { echo "smtp-source failed against port $1" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$(echo "$N / ($end - $start)" | bc -l) $(($(ticks $RELAY_PID) - relay0))" \
    "$(($(ticks $SINK_PID) - sink0)) $source"
}

printf '%-28s %12s %12s %8s\n' mode direct/s relay/s ratio
cpu_rows=()
for mode in "connection per message:" "reused connections (-d):-d"; do
  label=${mode%%:*}; flags=${mode#*:}
  read -r d _ dsink dsource <<<"$(rate $SINK_PORT "$flags")" || exit 1
  read -r r rrelay rsink rsource <<<"$(rate $RELAY_PORT "$flags")" || exit 1
  printf '%-28s %12.0f %12.0f %8.2f\n' "$label" "$d" "$r" "$(echo "$r / $d" | bc -l)"
  cpu_rows+=("$(printf '%-28s %-7s %8s %10.1f %12.1f %8s' "$label" direct - \
    "$(us_per_msg "$dsink")" "$(us_per_msg "$dsource")" -)")
  cpu_rows+=("$(printf '%-28s %-7s %8.1f %10.1f %12.1f %8.2f' "$label" relay \
    "$(us_per_msg "$rrelay")" "$(us_per_msg "$rsink")" "$(us_per_msg "$rsource")" \
    "$(echo "$rrelay / ($rsink + $rsource)" | bc -l)")")
done
echo
echo "CPU per message, microseconds (clock ticks of 1/$TCK s)"
printf '%-28s %-7s %8s %10s %12s %8s\n' mode path relay smtp-sink smtp-source "r/(k+s)"
printf '%s\n' "${cpu_rows[@]}"
