#!/usr/bin/env bash
# Soak (issue 8): mixed traffic with injected faults through the release build, resident
# memory sampled every 10 s (it must stay flat after warm-up). 40 clients, 31 tenants (one
# hot, always waiting), a tenant layer and an account layer (on Redis when redis-server is
# installed: then Redis is killed for 5 s every 2 minutes); upstream fails 1 transaction in
# 20 in nine ways in turn, closes its connections every 15 s and refuses connections for 2 s
# every minute; 1 client in 50 leaves during DATA, 1 in 50 right after its final dot.
# Ends with the invariant checked over every message.
# Usage: bench/soak.sh [seconds]   (default 600)
set -euo pipefail
source "$(dirname "$0")/common.sh"
cargo build --release -q --bin mailsluice --example reliability
export MAILSLUICE_BIN=$target/release/mailsluice
"$target/release/examples/reliability" soak "${1:-600}"
