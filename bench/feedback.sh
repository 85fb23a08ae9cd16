#!/usr/bin/env bash
# Upstream feedback: relay at 2x, 4x, 10x, 1x and 0.5x of an SES-like upstream's hidden rate
# (10/s), measured and multiplicative rule side by side in one run, then a hidden rate that
# halves and comes back (examples/feedback.rs). In process,
# in-memory sessions, real time; about five minutes. The relay is far from CPU-bound at these
# rates, so a debug build measures the same ratios.
# Usage: bench/feedback.sh [clients] [messages_each] [hidden_rate]   (default 40 5 10)
set -euo pipefail
source "$(dirname "$0")/common.sh"
RUST_LOG=${RUST_LOG:-off} cargo run -q --example feedback -- "$@"
