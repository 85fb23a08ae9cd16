#!/usr/bin/env bash
# Fair share on an account-wide layer: a light tenant's wait behind a heavy tenant's backlog,
# with and without fair_by, on the throttle alone in real time.
# Usage: bench/fairness.sh [seconds]
set -euo pipefail
source "$(dirname "$0")/common.sh"
cargo run --release -q --example fairness -- "${1:-5}"
