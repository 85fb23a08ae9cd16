#!/usr/bin/env bash
# The spool's release of one key to a distant upstream (examples/spool_release.rs): HELD
# messages (default 1000) held by a hold layer (`key = "none"`: one key), then released by a
# relay whose layer allows LIMIT a second (default 100) with BURST (default 1), to upstream
# DELAY ms away (default 20) with POOL connections or requests at once (default 16, the
# upstreams' default pool_size): `ses://` (the SESv2 stand-in) and `smtp://` (the test
# upstream, PIPELINING). Printed per kind: the release rate, and the most messages that
# reached upstream in any 1 s window against limit + burst.
# Usage: bench/spool_release.sh   (env: KINDS="ses smtp" DELAY LIMIT BURST HELD POOL;
#   PROFILE=debug, or release for the optimized build)
set -euo pipefail
source "$(dirname "$0")/common.sh"
KINDS=${KINDS:-"ses smtp"}
DELAY=${DELAY:-20}
LIMIT=${LIMIT:-100}
BURST=${BURST:-1}
HELD=${HELD:-1000}
POOL=${POOL:-16}
PROFILE=${PROFILE:-debug}
flag=""; [ "$PROFILE" = release ] && flag="--release"
cargo build -q $flag --example spool_release
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, $PROFILE build"
for kind in $KINDS; do
  AWS_EC2_METADATA_DISABLED=true \
    "$target/$PROFILE/examples/spool_release" "$kind" "$DELAY" "$LIMIT" "$BURST" "$HELD" "$POOL"
done
