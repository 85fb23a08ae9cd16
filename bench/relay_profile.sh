#!/usr/bin/env bash
# Where the relay's CPU goes on reused connections, by sampling: smtp-source -d (20 sessions,
# 1 KiB, 1 recipient) -> mailsluice -> smtp-sink, the relay under `perf record -g` (the
# cpu-clock event, which needs no hardware counters) for M messages. Prints the share of the
# kernel, the relay's own code and libc, the top symbols of the relay, of libc and of the
# kernel, and the kernel's samples by the system call they ran under; and the TCP segments
# sent per message (the machine's counters, so run it on an otherwise quiet machine).
# Shares only: perf slows the relay a little, so no time per message comes from here
# (bench/relay_cpu.sh has those).
# Needs Debian's postfix package (smtp-source, smtp-sink), linux-perf and nstat (iproute2).
# With STACKS="pattern ...", the samples are recorded with whole call stacks (DWARF) instead,
# and for each pattern it prints the share of all samples that ran in user space (the relay or
# libc) with a frame matching the pattern on their stack: the user time spent under it, e.g.
# STACKS="lettre:: Transaction::run" for lettre's share and the upstream transaction's.
# Usage: bench/relay_profile.sh [messages]   (default 30000; TOP symbols, default 25)
#   RELAY_BIN=<build> picks the relay (default: target/release/mailsluice, built here).
set -euo pipefail
source "$(dirname "$0")/common.sh"
M=${1:-30000}
TOP=${TOP:-25}
SINK_PORT=${SINK_PORT:-42555}
RELAY_PORT=${RELAY_PORT:-42556}
need_tools "install postfix and linux-perf" smtp-source smtp-sink perf
relay_bin
scratch
start_sink_and_write_relay_config "$work"
RUST_LOG=warn "$RELAY_BIN" --config "$work/relay.toml" 2>"$work/relay.log" &
pid=$!
wait_port $RELAY_PORT
source_run 200 # the pool's connections opened, not sampled
if [ -n "${STACKS:-}" ]; then
  graph=(-F 1000 --call-graph dwarf,16384)
else
  graph=(-F 2000 -g)
fi
perf record -q "${graph[@]}" -p $pid -o "$work/perf.data" >/dev/null 2>&1 &
recorder=$!
sleep 1
segments() { nstat -az TcpOutSegs TcpExtTCPPureAcks | awk '$1 ~ /^Tcp/ {printf "%s ", $2}'; }
read -r segs0 acks0 <<<"$(segments)"
source_run "$M"
read -r segs1 acks1 <<<"$(segments)"
kill -INT $recorder; wait $recorder || true
echo "$M messages, 20 sessions, $(basename "$RELAY_BIN"); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "TCP segments sent per message, by every process of the machine (nstat): $(echo \
  "($segs1 - $segs0) / $M" | bc -l | cut -c1-5), of them pure ACKs: $(echo \
  "($acks1 - $acks0) / $M" | bc -l | cut -c1-5)"
echo "share of the relay's samples by where they ran:"
perf report -i "$work/perf.data" --no-children --sort dso -g none 2>/dev/null |
  grep -v '^#' | grep -v '^$' | head -5 || true # head closes the pipe early
echo "top symbols of the relay and libc (share of all the relay's samples):"
perf report -i "$work/perf.data" --no-children --sort sym -g none \
  --dsos "$(basename "$RELAY_BIN"),libc.so.6" 2>/dev/null | grep -v '^#' | grep -v '^$' |
  head -"$TOP" || true
echo "top symbols of the kernel (share of all the relay's samples):"
perf report -i "$work/perf.data" --no-children --sort sym -g none \
  --dsos '[kernel.kallsyms]' 2>/dev/null | grep -v '^#' | grep -v '^$' | head -"$TOP" || true
echo "kernel samples by the system call they ran under (share of all the relay's samples):"
perf script -i "$work/perf.data" -F ip,sym 2>/dev/null | python3 -c '
import re, sys, collections
stacks, stack = [], []
for line in sys.stdin:
    if line.strip():
        stack.append(line.strip())
    elif stack:
        stacks.append(stack)
        stack = []
stacks += [stack] if stack else []
kernel = collections.Counter()
for s in stacks:
    calls = [m.group(1) for f in s for m in [re.search(r"__(?:x64|do)_sys_(\w+)", f)] if m]
    if s[0].startswith("ffffffff"):
        kernel[calls[0] if calls else "(none)"] += 1
for call, n in kernel.most_common(8):
    print(f"    {100 * n / len(stacks):5.1f}%  {call}")
'
[ -n "${STACKS:-}" ] || exit 0
echo "user time under each pattern (share of all the relay's samples):"
perf script -i "$work/perf.data" -F ip,sym,dso 2>/dev/null | python3 -c '
import sys
patterns = sys.argv[1:]
stacks, stack = [], []
for line in sys.stdin:
    if line.strip():
        stack.append(line)
    elif stack:
        stacks.append(stack)
        stack = []
if stack:
    stacks.append(stack)
user = [s for s in stacks if "kernel.kallsyms" not in s[0]]
print(f"  {len(stacks)} samples, {100 * len(user) / len(stacks):.1f} % in user space")
for p in patterns:
    n = sum(1 for s in user if any(p in frame for frame in s))
    print(f"  {100 * n / len(stacks):5.1f} %  {p}")
' $STACKS
