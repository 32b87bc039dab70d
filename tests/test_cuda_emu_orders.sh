#!/usr/bin/env bash
# The CUDA emulator against what a GPU does and does not promise
# (build/emu/emu_checks, from tests/cuda_emu/emu_checks.cu):
#  - launches over sm_90's limits run nothing and set the last error;
#  - an oversized launch on a project-like launch path stops the program;
#  - static plus dynamic shared memory over the limit stops the program;
#  - planted races (a shared variable read with no __syncthreads after thread
#    0 writes it; a flag block 0 sets for the others) read stale values under
#    KVCPT_EMU_ORDER=reverse and random, and none in the default index order;
#  - KVCPT_EMU_BLOCKS=sample runs a grid's corner blocks and a few more, and
#    only those; unset, every block;
#  - the emulated GPU tests pass with threads and blocks run in reverse and in
#    two seeded random orders (KVCPT_EMU_ORDER_JOBS of them at once, default 2).
. "$(dirname "$0")/lib.sh"
E=build/emu/emu_checks
if [ ! -x "$E" ]; then echo "skip - emulator checks: $E is not built (make test builds it)"; exit 0; fi

"$E" limits 2>&1 || true

out=$("$E" planted-launch 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 0 ] && grep -q "cudaErrorInvalidConfiguration (invalid configuration argument) in cudaGetLastError()" <<<"$out" &&
    ! grep -q "not stopped" <<<"$out"; then
    ok "a 2048-thread launch on a CUDA_CHECK_LAUNCH path stops the program with cudaErrorInvalidConfiguration"
else
    fail "planted oversized launch" "exit status $rc, output: $out"
fi

out=$("$E" static-over 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 0 ] && grep -q "static plus dynamic shared memory over 48 KB without cudaFuncSetAttribute: 32768 bytes static, 16385 dynamic" <<<"$out"; then
    ok "32 KB static and 16 KB + 1 dynamic shared memory without the attribute stops the program"
else
    fail "static shared memory over the limit" "exit status $rc, output: $out"
fi

# race ORDER SEED: prints "THREADS BLOCKS" stale counts
race() {
    KVCPT_EMU_ORDER=$1 KVCPT_EMU_SEED=$2 "$E" race 2>&1 | awk '/^threads/ {t = $2} /^blocks/ {b = $2} END {print t, b}'
}
read -r t b <<<"$(race index 0)"
[ "$t" = 0 ] && [ "$b" = 0 ] && ok "planted races in index order (the default): no stale read" \
    || fail "planted races in index order" "$t of 256 threads and $b of 64 blocks read stale values"
read -r t b <<<"$(race reverse 0)"
[ "$t" = 255 ] && [ "$b" = 63 ] && ok "planted races in reverse order: all 255 readers and 63 blocks stale" \
    || fail "planted races in reverse order" "$t of 256 threads and $b of 64 blocks stale (want 255 and 63)"
for seed in 1 2; do
    read -r t b <<<"$(race random $seed)"
    [ "${t:-0}" -gt 0 ] && [ "${b:-0}" -gt 0 ] && ok "planted races in random order, seed $seed: $t threads and $b blocks stale" \
        || fail "planted races in random order, seed $seed" "$t of 256 threads and $b of 64 blocks stale (want some of each)"
done

# KVCPT_EMU_BLOCKS=sample: the corners and a few seeded blocks; all: every one
read -r ran corners <<<"$(KVCPT_EMU_BLOCKS=sample KVCPT_EMU_SEED=3 "$E" sample-count 2>&1 | awk '/^ran/ {print $2, $6}')"
[ "${ran:-0}" -ge 5 ] && [ "${ran:-0}" -le 9 ] && [ "$corners" = 5 ] \
    && ok "KVCPT_EMU_BLOCKS=sample runs $ran of 3000 blocks, the 5 corners among them" \
    || fail "KVCPT_EMU_BLOCKS=sample" "ran ${ran:-?} of 3000 blocks, ${corners:-?} of 5 corners (want 5 to 9, all 5)"
read -r ran corners <<<"$("$E" sample-count 2>&1 | awk '/^ran/ {print $2, $6}')"
[ "$ran" = 3000 ] && ok "KVCPT_EMU_BLOCKS unset runs all 3000 blocks" || fail "KVCPT_EMU_BLOCKS unset" "ran ${ran:-?} of 3000"

# the emulated GPU tests under other orders, a few at a time
bins=()
for t in attention_cuda adamw_cuda ops_cuda attention_decode_cuda; do
    b=build/tests/test_cuda_emu_$t
    if [ -x "$b" ]; then bins+=("$b"); else echo "skip - $t under other orders: $b is not built"; fi
done
run_one() { # ORDER SEED BIN
    local log=$tmp/$(basename "$3").$1.$2.log
    KVCPT_EMU_ORDER=$1 KVCPT_EMU_SEED=$2 timeout 600 "$3" >"$log" 2>&1
    echo "rc=$?" >>"$log"
}
jobs_max=${KVCPT_EMU_ORDER_JOBS:-2}
for b in "${bins[@]}"; do
    for os in reverse:0 random:1 random:2; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
        run_one "${os%:*}" "${os#*:}" "$b" &
    done
done
wait
for b in "${bins[@]}"; do
    for os in reverse:0 random:1 random:2; do
        log=$tmp/$(basename "$b").${os%:*}.${os#*:}.log
        name="$(basename "$b") with KVCPT_EMU_ORDER=${os%:*} KVCPT_EMU_SEED=${os#*:}"
        p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^FAIL - ' "$log")
        if grep -q '^rc=0$' "$log" && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]; then
            ok "$name: $p checks pass"
        else
            fail "$name" "$(grep '^rc=' "$log"), $f failed: $(grep -m3 '^FAIL - ' "$log" | tr '\n' ' ') $(tail -3 "$log" | tr '\n' ' ')"
        fi
    done
done
