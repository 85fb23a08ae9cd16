#!/usr/bin/env bash
# Reliability at scale (issue 8), on the release build, with the test harness's upstream and
# clients (examples/reliability.rs) and the relay as a process of its own:
#   1. resident memory of the relay with 10,000 connections, 2,000 of them waiting in one
#      tenant's queue; then with all 10,000 waiting;
#   2. throughput with 1 upstream transaction in 20 failing (5%), beside the same run without
#      faults: once with stalls past the relay's timeout among the faults, once without;
#   3. the soak's memory curve: bench/soak.sh (SOAK_SECONDS=600 here runs it too).
# Every run ends with the invariant checked over every message (it panics otherwise).
# Raises the open-file limit itself (run as root, or with `ulimit -Hn` >= 25000).
# Usage: bench/scale.sh [connections]   (default 10000)
set -euo pipefail
source "$(dirname "$0")/common.sh"
N=${1:-10000}
cargo build --release -q --bin mailsluice --example reliability
export MAILSLUICE_BIN=$target/release/mailsluice
run="$target/release/examples/reliability"

echo "== memory: $N connections, $((N / 5)) waiting"
$run scale "$N" $((N / 5)) 2>&1
echo "== memory: $N connections, all waiting"
$run scale "$N" "$N" 2>&1
echo "== throughput, 5% upstream faults (with stalls past the timeout)"
$run faults 20 20
echo "== throughput, 5% upstream faults (no stalls)"
$run faults 20 20 fast
if [ "${SOAK_SECONDS:-0}" -gt 0 ]; then
  echo "== soak, $SOAK_SECONDS s"
  bench/soak.sh "$SOAK_SECONDS"
fi
