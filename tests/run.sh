#!/usr/bin/env bash
# Runs every test of a suite and ends with "N passed, N failed".
#   cpu: build/tests/test_* (C) and tests/test_*.sh (scripts)
#   gpu: build/tests/gpu/test_* and tests/gpu/test_*.sh (they skip themselves without a GPU)
#   cli: the tests/test_*.sh that run the program as $K ($KVCPT_BIN, default ./kvcpt)
# KVCPT_TEST_LOGDIR=DIR keeps each test's whole output as DIR/NAME.log.
# A test prints "ok - name", "FAIL - name: why" or "skip - name: why" lines;
# a binary that dies without printing FAIL is counted as one failure, and so
# is one that reports no check at all, or runs past KVCPT_TEST_TIMEOUT
# seconds (default 900).
set -u
suite=${1:-cpu}
cd "$(dirname "$0")/.."
pass=0; fail=0; skip=0; failed_names=()
run_one() {
    local name=$1; shift
    local log; log=$(mktemp)
    local t0=$SECONDS
    timeout --kill-after=10 "${KVCPT_TEST_TIMEOUT:-900}" "$@" >"$log" 2>&1
    local rc=$?
    local p f s
    p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^FAIL - ' "$log"); s=$(grep -c '^skip - ' "$log")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "FAIL - $name: still running after ${KVCPT_TEST_TIMEOUT:-900} s, stopped" >>"$log"; f=$((f + 1))
    elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL - $name: exited with status $rc without reporting a failed check" >>"$log"; f=1
    elif [ $((p + f + s)) -eq 0 ]; then
        echo "FAIL - $name: reported no check (no ok, FAIL or skip line)" >>"$log"; f=1
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    printf '%-34s %3d passed, %d failed, %d skipped  (%ds)\n' "$name" "$p" "$f" "$s" $((SECONDS - t0))
    if [ "$f" -gt 0 ]; then
        failed_names+=("$name"); sed -n '/^FAIL - /p' "$log" | head -20 | sed 's/^/    /'
        echo "    --- last lines of output ---"; tail -15 "$log" | sed 's/^/    /'
    fi
    if [ -n "${KVCPT_TEST_LOGDIR:-}" ]; then
        mkdir -p "$KVCPT_TEST_LOGDIR" && cp "$log" "$KVCPT_TEST_LOGDIR/${name//\//_}.log"
    fi
    rm -f "$log"
}
if [ "$suite" = gpu ]; then
    shopt -s nullglob
    bins=(build/tests/gpu/test_*)
    if [ ${#bins[@]} -eq 0 ]; then
        echo "skip - gpu suite: the CUDA backend was not compiled (no nvcc at build time)"; skip=1
    fi
    for b in "${bins[@]}"; do run_one "gpu/$(basename "$b")" "$b"; done
    for s in tests/gpu/test_*.sh; do run_one "gpu/$(basename "$s")" bash "$s"; done
elif [ "$suite" = cli ]; then # the scripts that run the program as $K (make sanitize runs them on another binary)
    for s in tests/test_*.sh; do [ -f "$s" ] && grep -q '\$K\b\|\${K}' "$s" && run_one "$(basename "$s")" bash "$s"; done
else
    for b in build/tests/test_*; do [ -x "$b" ] && run_one "$(basename "$b")" "$b"; done
    for s in tests/test_*.sh; do [ -f "$s" ] && run_one "$(basename "$s")" bash "$s"; done
fi
echo
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
