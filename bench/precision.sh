#!/usr/bin/env bash
# Throttle precision through the whole relay (issue 4): one layer at 200 messages/s, burst
# 200, saturated by 400 concurrent SMTP clients of one tenant for 10 s; relay -> SMTP sink.
# Usage: bench/precision.sh [seconds]
set -euo pipefail
source "$(dirname "$0")/common.sh"
cargo run --release -q --example precision -- "${1:-10}"
