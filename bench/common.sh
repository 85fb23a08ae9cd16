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
