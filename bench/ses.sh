#!/usr/bin/env bash
# ses:// (SESv2 SendEmail through the AWS SDK) next to smtp:// (the test upstream, PIPELINING),
# each behind a proxy holding what the forwarder sends for DELAY ms, the same pool size, in
# one run (examples/ses_latency.rs): the time of one message alone (round trips of DELAY) and
# messages/s with MESSAGES sent at once.
# Usage: bench/ses.sh   (env: DELAY=20 POOLS="1 4 16" SEQUENTIAL=20 MESSAGES=200 PROFILE=release)
set -euo pipefail
source "$(dirname "$0")/common.sh"
DELAY=${DELAY:-20}
POOLS=${POOLS:-"1 4 16"}
SEQUENTIAL=${SEQUENTIAL:-20}
MESSAGES=${MESSAGES:-200}
PROFILE=${PROFILE:-release}
flag=""; [ "$PROFILE" = release ] && flag="--release"
cargo build -q $flag --example ses_latency
for pool in $POOLS; do
  AWS_EC2_METADATA_DISABLED=true "$target/$PROFILE/examples/ses_latency" "$DELAY" "$pool" "$SEQUENTIAL" "$MESSAGES"
done
