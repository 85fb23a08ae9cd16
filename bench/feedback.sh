#!/usr/bin/env bash
# Upstream feedback: relay at 10, 20 and 40/s against an SES-like upstream with a hidden rate
# of 10/s, adaptive on and off, side by side in one run (examples/feedback.rs). In process,
# in-memory sessions, real time; about two minutes. The relay is far from CPU-bound at these
# rates, so a debug build measures the same ratios.
# Usage: bench/feedback.sh [clients] [messages_each] [hidden_rate]   (default 40 5 10)
set -euo pipefail
source "$(dirname "$0")/common.sh"
RUST_LOG=${RUST_LOG:-off} cargo run -q --example feedback -- "$@"
