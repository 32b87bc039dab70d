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

# After a job ended: how many of the given processes are still alive,
# polling up to $1 seconds for them to go (mpirun may exit before the last
# rank is gone: a stopped rank runs again only on mpirun's SIGCONT and then
# ends itself). Sets `left` and `waited` (seconds). Ended ranks may stay
# zombies until init reaps them; those count as gone.
ranks_left() { # seconds, pids...
    local limit=$1 p
    shift
    for waited in $(seq 0 "$limit"); do
        left=0
        for p in "$@"; do
            case "$(ps -o stat= -p "$p" 2>/dev/null)" in "" | Z*) ;; *) left=$((left + 1)) ;; esac
        done
        [ "$left" = 0 ] && return
        [ "$waited" -lt "$limit" ] && sleep 1
    done
}
