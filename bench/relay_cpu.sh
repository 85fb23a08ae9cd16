#!/usr/bin/env bash
# Where the relay's CPU goes on reused connections, per message, for one or more relay builds
# side by side: smtp-source -d -> mailsluice -> smtp-sink, 20 sessions, 1 KiB, 1 recipient,
# the builds taking turns for ROUNDS rounds (each run gets a fresh relay; one smtp-sink).
# Each turn is two runs:
# - a timed run of N messages: CPU per message (utime + stime from /proc/<pid>/stat) of the
#   relay, smtp-sink and smtp-source (from its parent shell's cutime + cstime), r/(k+s), the
#   user time of each alone (r.user, k.user, s.user; the rest is the kernel's, for their system
#   calls), and the relay's context switches (voluntary + involuntary, summed over its threads from
#   /proc/<pid>/task/*/status);
# - a run of STRACE_N messages under `strace -c -f -p <relay>` (strace slows the relay, so no
#   CPU figure comes from it): the relay's system calls per message, in total and by kind
#   (reads: read/recvfrom/readv, writes: write/sendto/writev/sendmsg, epoll_wait, futex), and
#   the calls that failed (EAGAIN from a read with nothing to read, mostly).
# Counts are repeatable on a busy machine; CPU figures move with the load (printed).
# Needs Debian's postfix package (smtp-source, smtp-sink) and strace.
# Usage: bench/relay_cpu.sh [messages]   (default 20000; STRACE_N default 4000, ROUNDS 2)
#   RELAY_BINS="old new" compares builds (default: target/release/mailsluice, built here);
#   a build written PATH:ARG is run with one more argument, e.g. "$b $b:--workers=1".
set -euo pipefail
source "$(dirname "$0")/common.sh"
N=${1:-20000}
STRACE_N=${STRACE_N:-4000}
ROUNDS=${ROUNDS:-2}
SINK_PORT=${SINK_PORT:-42535}
RELAY_PORT=${RELAY_PORT:-42536}
need_tools "install postfix and strace" smtp-source smtp-sink strace
[ -n "${RELAY_BINS:-}" ] || { relay_bin; RELAY_BINS=$RELAY_BIN; }
scratch

start_sink_and_write_relay_config "$work"

TCK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' /proc/$1/stat; } # utime + stime of a running process
uticks() { awk '{print $14}' /proc/$1/stat; }       # utime alone
switches() { # voluntary + involuntary context switches of every thread of a process
  cat /proc/$1/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'
}
per_msg() { echo "$1 / $2" | bc -l; }
us() { echo "$1 * 1000000 / $TCK / $N" | bc -l; }
source_ticks() { # messages -> smtp-source's CPU ticks, then its user ticks
  bash -c 'smtp-source -s 20 -l 1024 -m "$1" -f from@example.com -t to@example.com \
      -d 127.0.0.1:$2 >&2 || exit 1; awk "{print \$16 + \$17, \$16}" /proc/$$/stat' _ "$1" "$RELAY_PORT" \
    || { echo "smtp-source failed" >&2; exit 1; }
}

# One turn of one build (its path, and an extra argument or ""): prints "relay_us relay_user_us sink_us sink_user_us source_us
# source_user_us ratio switches syscalls reads writes epoll futex failed".
turn() {
  local bin=$1 arg=$2 relay0 user0 sink0 sinku0 switches0 source sourceu relay user sink sinku sw
  RUST_LOG=warn "$bin" ${arg:+"$arg"} --config "$work/relay.toml" 2>"$work/relay.log" &
  local pid=$!
  wait_port $RELAY_PORT
  source_ticks 200 >/dev/null # the pool's connections opened, not counted
  relay0=$(ticks $pid); user0=$(uticks $pid); sink0=$(ticks $SINK_PID); sinku0=$(uticks $SINK_PID)
  switches0=$(switches $pid)
  read -r source sourceu <<<"$(source_ticks "$N")"
  relay=$(($(ticks $pid) - relay0)); user=$(($(uticks $pid) - user0))
  sink=$(($(ticks $SINK_PID) - sink0)); sinku=$(($(uticks $SINK_PID) - sinku0))
  sw=$(($(switches $pid) - switches0))
  strace -c -f -p $pid -o "$work/strace.txt" 2>/dev/null &
  local tracer=$!
  sleep 1 # attached to every thread
  source_ticks "$STRACE_N" >/dev/null
  kill -INT $tracer; wait $tracer || true
  kill $pid; wait $pid 2>/dev/null || true
  # strace -c: "% time, seconds, usecs/call, calls, [errors], syscall"; the errors column is
  # empty for calls that never failed.
  local counts
  counts=$(awk '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ {
      c = $4; e = (NF == 6) ? $5 : 0
      if ($NF == "total") { total = c; failed = e; next }
      if ($NF ~ /^(read|recvfrom|readv|recvmsg)$/) reads += c
      else if ($NF ~ /^(write|sendto|writev|sendmsg)$/) writes += c
      else if ($NF ~ /^epoll_wait|^epoll_pwait/) epoll += c
      else if ($NF == "futex") futex += c
    } END { print total + 0, reads + 0, writes + 0, epoll + 0, futex + 0, failed + 0 }' \
    "$work/strace.txt")
  read -r total reads writes epoll futex failed <<<"$counts"
  printf '%s %s %s %s %s %s %s %s %s %s %s %s %s %s\n' "$(us $relay)" "$(us $user)" \
    "$(us $sink)" "$(us $sinku)" "$(us "$source")" "$(us "$sourceu")" \
    "$(echo "$relay / ($sink + $source)" | bc -l)" "$(per_msg $sw "$N")" \
    "$(per_msg "$total" "$STRACE_N")" "$(per_msg "$reads" "$STRACE_N")" \
    "$(per_msg "$writes" "$STRACE_N")" "$(per_msg "$epoll" "$STRACE_N")" \
    "$(per_msg "$futex" "$STRACE_N")" "$(per_msg "$failed" "$STRACE_N")"
}

echo "reused connections (-d), $N messages a timed run, $STRACE_N under strace; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "CPU in microseconds per message (clock ticks of 1/$TCK s); the rest per message"
printf '%-5s %-34s %6s %6s %6s %6s %6s %6s %7s | %5s | %7s %5s %6s %5s %5s %6s\n' round build \
  relay r.user sink k.user source s.user 'r/(k+s)' cswch syscall reads writes epoll futex failed
for round in $(seq "$ROUNDS"); do
  for spec in $RELAY_BINS; do
    bin=${spec%%:*}; arg=${spec#"$bin"}; arg=${arg#:}
    read -r r u k ku s su ratio sw total reads writes epoll futex failed <<<"$(turn "$bin" "$arg")"
    printf '%-5s %-34s %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %7.2f | %5.2f | %7.2f %5.2f %6.2f %5.2f %5.2f %6.2f\n' \
      "$round" "$(basename "$(dirname "$bin")")/$(basename "$bin")${arg:+:$arg}" "$r" "$u" "$k" "$ku" "$s" "$su" "$ratio" \
      "$sw" "$total" "$reads" "$writes" "$epoll" "$futex" "$failed"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
