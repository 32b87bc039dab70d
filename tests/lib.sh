# Sourced by the shell tests (". "$(dirname "$0")/lib.sh"): the repository
# root as the working directory, ./kvcpt as $K, a temporary directory $tmp
# removed on exit, and the ok/fail lines tests/run.sh counts.
set -u
cd "$(dirname "$0")/.."
K=${KVCPT_BIN:-./kvcpt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
