#!/usr/bin/env bash
# Where the relay's system calls per message go, by side: one smtp-source session (-s 1 -d,
# 1 KiB, 1 recipient) -> mailsluice -> smtp-sink, the relay under `strace -f` for M messages.
# Each socket call is put on the client's side or upstream's by its file descriptor (the one
# MAIL is read from is the client's, the one MAIL is written to is upstream's); the other
# calls are listed by name. Counts only: strace slows the relay, so no time comes from here.
# Needs Debian's postfix package (smtp-source, smtp-sink) and strace.
# Usage: bench/relay_syscalls.sh [messages]   (default 2000)
#   RELAY_BIN=<build> picks the relay (default: target/release/mailsluice, built here).
set -euo pipefail
source "$(dirname "$0")/common.sh"
M=${1:-2000}
SINK_PORT=${SINK_PORT:-42545}
RELAY_PORT=${RELAY_PORT:-42546}
need_tools "install postfix and strace" smtp-source smtp-sink strace
relay_bin
scratch
POOL_SIZE=1 start_sink_and_write_relay_config "$work"
RUST_LOG=warn "$RELAY_BIN" --config "$work/relay.toml" 2>"$work/relay.log" &
pid=$!
wait_port $RELAY_PORT
SESSIONS=1
source_run 20 # the upstream connection opened, not counted
strace -f -qq -s 12 -p $pid -o "$work/trace.txt" 2>/dev/null &
tracer=$!
sleep 1
source_run "$M"
kill -INT $tracer; wait $tracer || true
# Lines look like `123 read(12, "MAIL FROM:<"..., 1024) = 25`, `123 <... read resumed>...`
# for a call split by another thread's, or `123 epoll_wait(...)`.
awk -v m="$M" '
  { sub(/^[0-9]+ +/, "") }
  /resumed>/ { next } # counted at its start
  match($0, /^[a-z_0-9]+\(/) {
    name = substr($0, 1, RLENGTH - 1); rest = substr($0, RLENGTH + 1)
    if (name ~ /^(read|recvfrom|readv|recvmsg|write|sendto|writev|sendmsg)$/) {
      split(rest, a, ","); fd = a[1] + 0
      if (name ~ /^(read|recvfrom|readv|recvmsg)$/ && rest ~ /"MAIL FROM/) client[fd] = 1
      if (name ~ /^(write|sendto|writev|sendmsg)$/ && rest ~ /"MAIL FROM/) upstream[fd] = 1
      dir = (name ~ /^(read|recvfrom|readv|recvmsg)$/) ? "reads" : "writes"
      byfd[fd " " dir]++
      if (rest ~ /EAGAIN/) again[fd]++
    } else other[name]++
  }
  END {
    for (k in byfd) {
      split(k, p, " "); fd = p[1]
      side = (fd in client) ? "client" : (fd in upstream) ? "upstream" : "fd " fd
      sides[side " " p[2]] += byfd[k]
      if (fd in again) fails[side] = again[fd]
    }
    for (s in sides) printf "  %-22s %6.2f\n", s, sides[s] / m
    for (s in fails) printf "  %-22s %6.2f\n", s " EAGAIN", fails[s] / m
    for (n in other) if (other[n] / m >= 0.01) printf "  %-22s %6.2f\n", n, other[n] / m
  }' "$work/trace.txt" | sort >"$work/counts.txt"
echo "$M messages, one session; system calls per message (load: $(cut -d' ' -f1-3 /proc/loadavg))"
# An fd of neither side is named by what it is (tokio's eventfd, say).
while read -r first second rest; do
  case "$first" in
    fd) echo "  fd $second ($(readlink /proc/$pid/fd/"$second" || echo closed)) $rest" ;;
    *) echo "  $first $second $rest" ;;
  esac
done <"$work/counts.txt"
