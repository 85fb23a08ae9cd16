# Sourced by every bench script, first thing after `set -euo pipefail`: works from any
# directory and with no environment set. It moves to the repository root, sets `target` to
# cargo's target directory as an absolute path (CARGO_TARGET_DIR or target/: binaries are
# then found from the scratch directories the scripts start processes in), and answers
# `--help` with the script's header comment and the binaries' directory, building nothing.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
target=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
case "$target" in
  /*) ;;
  *) echo "bench: cannot find cargo's target directory (got '$target')" >&2; exit 1 ;;
esac
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  echo "Binaries: $target/release (built by the script)"
  exit 0
fi

# Exits with "$1" as the hint unless every other argument is an installed command.
need_tools() {
  local hint=$1 tool
  shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "$tool missing: $hint" >&2; exit 1; }
  done
}

# Makes the scratch directory $work, removed on exit with every background job killed.
scratch() {
  work=$(mktemp -d)
  trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
}

# Waits (at most 10 s) until something listens on 127.0.0.1:$1; exits otherwise.
wait_port() {
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.05; done
  echo "nothing listens on port $1" >&2; exit 1
}

# For the scripts that run one relay build: RELAY_BIN as given, else the release build (built
# here).
relay_bin() {
  if [ -z "${RELAY_BIN:-}" ]; then
    cargo build --release -q
    RELAY_BIN=$target/release/mailsluice
  fi
}

# For the scripts that put the relay in front of Postfix's smtp-sink (relay.sh, relay_cpu.sh):
# starts smtp-sink on SINK_PORT (its pid in SINK_PID) and writes $1/relay.toml, a relay on
# RELAY_PORT forwarding to it with POOL_SIZE connections (default 20).
start_sink_and_write_relay_config() {
  smtp-sink -u nobody 127.0.0.1:$SINK_PORT 1000 >"$1/sink.log" 2>&1 &
  SINK_PID=$!
  cat > "$1/relay.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$RELAY_PORT"]
max_connections = 10000
[upstream]
url = "smtp://127.0.0.1:$SINK_PORT"
tls = "none"
pool_size = ${POOL_SIZE:-20}
TOML
}

# Sends $1 messages of 1 KiB, one recipient, to the relay on $RELAY_PORT over SESSIONS
# (default 20) sessions, each reused for message after message (smtp-source -d).
source_run() {
  smtp-source -s "${SESSIONS:-20}" -l 1024 -m "$1" -f from@example.com -t to@example.com \
    -d 127.0.0.1:$RELAY_PORT
}
