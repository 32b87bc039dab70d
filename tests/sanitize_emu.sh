#!/usr/bin/env bash
# `make sanitize-emu`: the CUDA emulator's AddressSanitizer + UBSan build
# (build/emu-asan, see the Makefile and docs/emulator.md) against the project:
#  1. tests/cuda_emu/test_cuda_emu_asan.sh: planted out-of-bounds bugs and an int32
#     overflow are reported; the project's kernels at Llama-3.1-8B shapes
#     (sampled blocks) run with no report; here also the training attention
#     at those shapes (kernels_8b attention);
#  2. the emulated GPU tests (build/emu-asan/tests/test_cuda_emu_*), the
#     emulated-engine CLI tests (tests/train/test_train_cuda_emu.sh,
#     tests/eval/test_eval_cuda_emu.sh, tests/train/test_train_cuda_emu_ranks.sh with
#     KVCPT_EMU_KVCPT=build/emu-asan/kvcpt), the emulated NCCL under mpirun
#     (tests/cuda_emu/test_cuda_emu_nccl.sh) and the emulated devices
#     (tests/cuda_emu/test_cuda_emu_devices.sh) pass with no report.
# Prints ok / FAIL lines, then "sanitize-emu: clean" or "sanitize-emu: failed"
# (exit 1). KVCPT_SANITIZE_JOBS runs that many tests at once (default 2);
# KVCPT_SANITIZE_TIMEOUT stops one after that many seconds (default 3600).
. "$(dirname "$0")/lib.sh"
A=build/emu-asan
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=0
pass() { ok "$1"; }
flunk() { fail "$1" "$2"; failed=1; }
[ -x "$A/kvcpt" ] || { flunk "sanitizer build" "$A/kvcpt is not built (make sanitize-emu builds it)"; echo "sanitize-emu: failed"; exit 1; }
bash tests/cuda_emu/test_cuda_emu_asan.sh | tee "$tmp/quick.log"
grep -q '^FAIL - ' "$tmp/quick.log" && failed=1
grep -q '^ok - ' "$tmp/quick.log" || failed=1

# the emulated GPU tests and the CLI tests on the asan kvcpt, a few at once
run_one() { # NAME COMMAND...: log in $tmp/NAME.log, then rc=N and secs=N
    local name=$1 t=$SECONDS
    shift
    timeout "${KVCPT_SANITIZE_TIMEOUT:-3600}" "$@" >"$tmp/$name.log" 2>&1
    echo "rc=$? secs=$((SECONDS - t))" >>"$tmp/$name.log"
}
names=()
jobs_max=${KVCPT_SANITIZE_JOBS:-2}
queue() {
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    names+=("$1")
    run_one "$@" &
}
# the longest first
queue kernels_8b_attention env KVCPT_EMU_BLOCKS=sample KVCPT_EMU_SEED=1 "$A/kernels_8b" attention
for t in model_cuda attention_cuda decode_cuda ops_cuda adamw_cuda shard_ops_cuda attention_decode_cuda mma mem_plan_cuda; do
    queue "test_cuda_emu_$t" "$A/tests/test_cuda_emu_$t"
done
queue test_train_cuda_emu.sh env KVCPT_EMU_KVCPT=$A/kvcpt bash tests/train/test_train_cuda_emu.sh
queue test_eval_cuda_emu.sh env KVCPT_EMU_KVCPT=$A/kvcpt bash tests/eval/test_eval_cuda_emu.sh
queue test_train_cuda_emu_ranks.sh env KVCPT_EMU_KVCPT=$A/kvcpt bash tests/train/test_train_cuda_emu_ranks.sh
queue test_cuda_emu_nccl.sh env KVCPT_EMU_TESTS_DIR=$A/tests bash tests/cuda_emu/test_cuda_emu_nccl.sh
queue test_cuda_emu_devices.sh env KVCPT_EMU_CHECKS=$A/emu_checks bash tests/cuda_emu/test_cuda_emu_devices.sh
wait
for name in "${names[@]}"; do
    log=$tmp/$name.log
    p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^FAIL - ' "$log"); s=$(grep -c '^skip - ' "$log")
    status=$(tail -1 "$log")
    if grep -q '^rc=0 ' <<<"$status" && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]; then
        pass "$name under ASan + UBSan: $p checks pass, $s skipped, no report (${status#* })"
    else
        flunk "$name under ASan + UBSan" "$status, $f failed: $(grep -m3 '^FAIL - ' "$log" | tr '\n' ' ') $(grep -Em3 'ERROR: AddressSanitizer|runtime error|SUMMARY' "$log" | tr '\n' ' ')"
    fi
done
if [ "$failed" -eq 0 ]; then echo "sanitize-emu: clean"; else echo "sanitize-emu: failed"; exit 1; fi
