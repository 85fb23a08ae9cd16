#!/usr/bin/env bash
# Upstream's SMTP replies read by mailsluice's parser (src/upstream/client/reply.rs) and by
# smtp-proto's client-side parser (ResponseReceiver), on the same inputs in one run
# (bench/reply_parsers/, a crate of its own built with --target-dir target/reply_parsers):
# what each makes of the cases mailsluice's tests check, then the time (median of [rounds]
# rounds, the parsers taking turns) and the allocations per reply of the replies a relay
# reads most. Prints Markdown tables.
# Usage: bench/reply_parsers.sh [rounds]   (default 9)
set -euo pipefail
source "$(dirname "$0")/common.sh"
cargo run --release -q --manifest-path bench/reply_parsers/Cargo.toml \
  --target-dir "$target/reply_parsers" -- "${1:-9}"
