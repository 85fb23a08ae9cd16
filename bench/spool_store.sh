#!/usr/bin/env bash
# The spool on S3 and SQS against the directory store (examples/spool_store.rs), one run:
# 1. For `store = "dir"` and `store = "s3"` in turn: HELD messages of 1 KiB (default 1000)
#    held by one relay over SESSIONS SMTP sessions at once (default 20), then released by a
#    relay on the same spool to a forwarder in memory. Printed per phase (hold, the releasing
#    relay's start, release): the wall time, the relay's CPU time per held message, and with
#    S3 and SQS the calls per held message by operation and the time moto was answering.
#    moto's server is started by the example, behind a proxy in the example's process that
#    counts and times every call. The relay's CPU is the example process's (getrusage) less
#    the proxy's and the SMTP clients' threads; moto is a process of its own, not in it.
# 2. Two relays (in the example's process, each with its own spool on the one queue) sharing
#    a hold layer of LIMIT a second (default 50) with BURST (default 1) on one Redis, releasing
#    REPLICA_HELD messages (default 500): the rate, and the most that reached upstream in any
#    1 s window against limit + burst.
# Needs moto_server and redis-server.
# Usage: bench/spool_store.sh   (env: HELD SESSIONS LIMIT BURST REPLICA_HELD; STORES="dir s3"
#   for part 1, empty for part 2 alone; PROFILE=debug, or release for the optimized build)
set -euo pipefail
source "$(dirname "$0")/common.sh"
need_tools "pip install 'moto[server]'; apt-get install redis-server" moto_server redis-server
HELD=${HELD:-1000}
SESSIONS=${SESSIONS:-20}
LIMIT=${LIMIT:-50}
BURST=${BURST:-1}
REPLICA_HELD=${REPLICA_HELD:-500}
STORES=${STORES-"dir s3"}
PROFILE=${PROFILE:-debug}
flag=""; [ "$PROFILE" = release ] && flag="--release"
cargo build -q $flag --example spool_store
echo "commit $(git rev-parse --short HEAD), $(nproc) cores, $PROFILE build, load $(cut -d' ' -f1-3 /proc/loadavg)"
bin=$target/$PROFILE/examples/spool_store
export AWS_EC2_METADATA_DISABLED=true
for store in $STORES; do
  "$bin" store "$store" "$HELD" "$SESSIONS"
done
"$bin" replicas "$LIMIT" "$BURST" "$REPLICA_HELD"
