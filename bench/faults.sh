#!/usr/bin/env bash
# The fault campaign: three relays (each the release binary as a process of its own: a kill
# is a real kill -9) sharing a key = "none" layer (20/s, burst 10) and a
# per-tenant layer (4/s, burst 4) in a Sentinel-managed Redis (primary, replica, sentinel),
# one recording upstream, 40 clients retrying every 4xx as a legacy app would. Seven faults in
# turn, each held for a sixteenth of the run then a sixteenth of recovery: a relay killed and
# restarted, a rolling graceful restart, Redis SIGSTOP for 3 s, Redis restarted empty, a
# Sentinel failover (primary killed, the sentinel left to notice it), upstream stalling past
# timeout_ms, upstream dropping connections mid-DATA. Each relay's resident memory (VmRSS) is
# sampled every 250 ms. Prints the checker's table (the columns are explained in
# tests/support/campaign_check.rs), the failover's cost and each relay process's memory, and
# exits 1 on any broken invariant.
# Needs redis-server and redis-cli.
# Usage: bench/faults.sh [seconds]   (default 600)
set -euo pipefail
source "$(dirname "$0")/common.sh"
cargo build --release -q --bin mailsluice --example reliability
export MAILSLUICE_BIN=$target/release/mailsluice
"$target/release/examples/reliability" campaign "${1:-600}"
