# Sourced by the shell tests (". "$(dirname "$0")/../lib.sh" || exit 1", each in its folder under tests/): the repository
# root as the working directory, ./kvcpt as $K, a temporary directory $tmp
# removed on exit, and the ok/fail lines tests/run.sh counts.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
K=${KVCPT_BIN:-./kvcpt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
check() { # name, condition (evaluated), why
    if eval "$2"; then ok "$1"; else fail "$1" "$3"; fi
}
# The command must exit non-zero with the wanted text in its output (stdout
# and stderr, kept in $tmp/out).
refused() { # name, wanted text (fixed string), command...
    local name=$1 want=$2
    shift 2
    if "$@" >"$tmp/out" 2>&1; then fail "$name" "exited 0"
    elif grep -qF -- "$want" "$tmp/out"; then ok "$name"
    else fail "$name" "$(tail -2 "$tmp/out")"; fi
}

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

# Planted bugs that must stop the program: reads "NAME|TEXT|TEXT..." lines on
# standard input, runs BINARY... NAME for each (BINARY may start with `env
# VAR=value`), and requires a non-zero exit, every TEXT in the output as a
# fixed string, and no "not stopped" (what the planted modes print when the
# bug went through). One ok or FAIL line per NAME, "planted LABEL NAME".
expect_stops() { # LABEL BINARY...
    local label=${1:+$1 } name wants want out rc missing
    shift
    while IFS='|' read -r name wants; do
        [ -n "$name" ] || continue
        out=$("$@" "$name" 2>&1) && rc=0 || rc=$?
        missing=""
        while IFS= read -r want; do
            grep -qF -- "$want" <<<"$out" || missing="$missing [$want]"
        done < <(tr '|' '\n' <<<"$wants")
        if [ "$rc" -ne 0 ] && [ -z "$missing" ] && ! grep -q "not stopped" <<<"$out"; then
            ok "planted $label$name stops the program: $(grep -Em1 'kvcpt CUDA emulator|ERROR: AddressSanitizer|runtime error' <<<"$out" |
                sed 's/^==[0-9]*==//' | cut -c1-220)"
        else
            fail "planted $label$name" "exit status $rc, missing$missing; output: $(head -c 1500 <<<"$out")"
        fi
    done
}

# Whether PYTHON has every MODULE installed, found without importing it: the
# tests' skip checks would otherwise import torch and transformers (seconds
# of CPU each) only to import them again in the step that uses them.
python_has() { # PYTHON MODULE...
    "$1" -c 'import importlib.util, sys
sys.exit(any(importlib.util.find_spec(m) is None for m in sys.argv[1:]))' "${@:2}" >/dev/null 2>&1
}

# The nvcc the CUDA checks use: $NVCC if set, else the one on PATH, else
# CUDA's default install; prints nothing when there is none.
find_nvcc() {
    if [ -n "${NVCC:-}" ]; then echo "$NVCC"
    elif command -v nvcc 2>/dev/null; then :
    elif [ -x /usr/local/cuda/bin/nvcc ]; then echo /usr/local/cuda/bin/nvcc
    fi
}
