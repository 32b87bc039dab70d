#!/usr/bin/env bash
# The quick part of the CUDA emulator's AddressSanitizer + UBSan build
# (build/emu-asan, see the Makefile and docs/emulator.md), run by `make test`
# and by `make sanitize-emu` (tests/sanitize_emu.sh, which adds the long part):
#  1. planted bugs must be reported: a write one float past dynamic shared
#     memory, one past a cudaMalloc'd buffer, one from a carved sub-buffer
#     into the red zone before the next, and an int32 offset overflowing
#     at Llama-3.1-8B's logits size (each: non-zero exit and the report);
#  2. the project's kernels once at 8B shapes with KVCPT_EMU_BLOCKS=sample
#     (build/emu-asan/kernels_8b; all but the training attention, which
#     tests/sanitize_emu.sh adds): no report.
# Leaks are not checked (the test binaries keep their buffers to exit);
# every other finding stops the program that made it.
. "$(dirname "$0")/../lib.sh" || exit 1
A=build/emu-asan
# Its own settings, not the caller's: make sanitize (tests/run_sanitized.sh)
# runs this script with a log_path that sends reports to files, where the
# planted checks below could not read them and where they would count as
# findings against the CPU program.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
pass() { ok "$1"; }
flunk() { fail "$1" "$2"; failed=1; }
for b in "$A/emu_checks" "$A/kernels_8b"; do
    [ -x "$b" ] || { flunk "sanitizer build" "$b is not built (make test and make sanitize-emu build it)"; exit 1; }
done

# planted bugs, each MODE|what the report must hold...: a write past dynamic
# shared memory, past a static __shared__ array, past a cudaMalloc'd buffer,
# from a carved sub-buffer into the next one's red zone, and an int32 row
# offset into 8B-sized logits (T 32768 x V 128256)
expect_stops "sanitizer report of" env KVCPT_EMU_BLOCKS=sample "$A/emu_checks" >"$tmp/planted.out" <<'LIST'
oob-smem|ERROR: AddressSanitizer: heap-buffer-overflow|WRITE of size 4|0 bytes to the right of 256-byte region|in smem_off_by_one_kernel
oob-static-smem|emu_checks.cu:|: runtime error: index 64 out of bounds for type 'float [64]'
oob-global|ERROR: AddressSanitizer: heap-buffer-overflow|0 bytes to the right of 4000-byte region|in fill_past_kernel
oob-carved|ERROR: AddressSanitizer: use-after-poison|WRITE of size 4|in fill_past_kernel
overflow-8b|runtime error: signed integer overflow: | * 128256 cannot be represented in type 'int'|in logits_row_max_kernel
LIST
cat "$tmp/planted.out"
grep -q '^FAIL - ' "$tmp/planted.out" && failed=1

# the project's kernels at 8B shapes, sampled blocks; the training attention
# (minutes: each sampled block walks 16-32 K keys) runs in make sanitize-emu
t0=$SECONDS
steps=(embedding rmsnorm rope swiglu residual_cast crossentropy decode grad_norm)
out=$(KVCPT_EMU_BLOCKS=sample KVCPT_EMU_SEED=1 "$A/kernels_8b" "${steps[@]}" 2>&1) && rc=0 || rc=$?
n=$(grep -c '^ok - ' <<<"$out")
if [ "$rc" -eq 0 ] && [ "$n" -gt 0 ]; then
    pass "kernels_8b: $n kernel launches at Llama-3.1-8B shapes, sampled blocks, no report ($((SECONDS - t0)) s)"
else
    flunk "kernels_8b at 8B shapes" "exit status $rc after $n ok; $(grep -Em3 'ERROR|runtime error|^    #[0-4] ' <<<"$out" | tr '\n' ' ')"
fi

[ "$failed" -eq 0 ]
