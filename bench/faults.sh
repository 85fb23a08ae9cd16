#!/usr/bin/env bash
# The fault campaign: three relays (in one process, each on a tokio runtime of its own: a kill
# is that runtime shut down at once) sharing a key = "none" layer (20/s, burst 10) and a
# per-tenant layer (4/s, burst 4) in a Sentinel-managed Redis (primary, replica, sentinel),
# one recording upstream, 40 clients retrying every 4xx as a legacy app would. Seven faults in
# turn, each held for a sixteenth of the run then a sixteenth of recovery: a relay killed and
# restarted, a rolling graceful restart, Redis SIGSTOP for 3 s, Redis restarted empty, a
# Sentinel failover (primary killed, SENTINEL FAILOVER), upstream stalling past timeout_ms,
# upstream dropping connections mid-DATA. Prints the checker's table (the columns are
# explained in tests/support/campaign_check.rs) and exits 1 on any broken invariant.
# Needs redis-server and redis-cli.
# Usage: bench/faults.sh [seconds]   (default 600)
set -euo pipefail
source "$(dirname "$0")/common.sh"
cargo build --release -q --example reliability
"$target/release/examples/reliability" campaign "${1:-600}"
