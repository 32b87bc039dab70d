#!/usr/bin/env bash
# The emulator's race detector (build/emu-race/, tests/cuda_emu/emu_race.cc):
#  - planted races (tests/cuda_emu/emu_checks.cu) each stop the program with
#    exit status 66 and a report naming the kernel, the memory and both
#    threads, in index order (where every one of them gives right numbers)
#    and in reverse order: a shared value read with no __syncthreads after
#    thread 0 writes it; an off-by-one shared index writing the neighbour's
#    slot; a flag block 0 writes and the other blocks read; lanes reading
#    their neighbour's slot with no __syncwarp; a __syncwarp relied on across
#    two warps; a plain read of a counter other threads add to atomically;
#    and two planted bugs of the tensor-core attention forward's cp.async
#    pipeline (the next K/V tile waited for with wait_group 1, not 0; no
#    barrier at the top of the key loop), and two of the one-pass backward's
#    Q/dO pipeline (the next tile waited for with wait_group 1, not 0; the
#    next tile copied into the buffer being read);
#  - a planted missing barrier in the tensor-core attention backward (dS^T
#    stored by each warp, then read across the warps for dQ): reported in
#    attention_mma_bwd_one_pass_kernel; and the plain emulator's dq from it fails the
#    comparison with the CPU oracle;
#  - the same kernels made right, atomics of many blocks on one counter,
#    neighbouring bytes and 2-byte halves of one word written by different
#    threads: no report;
#  - the seven emulated GPU tests (the six suites and mma), built in the race variant, pass and report
#    no race (KVCPT_EMU_RACE_JOBS of them at once, default 2). Attention and
#    the model take several minutes each under the detector whole, so here
#    they run the representative cases named below (KVCPT_TEST_CASES: every
#    kernel they launch, the refresh rows spanning tiles, a small head
#    size, fp32 and bf16 engines, the device optimizer), and the ops and the
#    tensor-core attention the cases of tests/cuda_emu/representative_cases.sh;
#    KVCPT_EMU_RACE_ALL_CASES=1 runs them
#    whole, KVCPT_EMU_RACE_TESTS="attention_cuda ..." picks the tests.
. "$(dirname "$0")/../lib.sh" || exit 1
E=build/emu-race/emu_checks
if [ ! -x "$E" ]; then echo "skip - race detector: $E is not built (make test builds it)"; exit 0; fi

# planted NAME ORDER KERNEL MEMORY EARLIER LATER: the run must stop with 66
# and a report holding each of the four texts
planted() {
    local name=$1 order=$2 kernel=$3 mem=$4 first=$5 second=$6 out rc
    out=$(KVCPT_EMU_ORDER=$order "$E" "$name" 2>&1) && rc=0 || rc=$?
    if [ "$rc" -eq 66 ] && grep -q "DATA RACE in kernel $kernel " <<<"$out" && grep -qF "$mem" <<<"$out" &&
        grep -qF "$first" <<<"$out" && grep -qF "$second" <<<"$out" && ! grep -q "was not stopped" <<<"$out"; then
        ok "planted $name ($order order): reported, exit status 66: $(grep -m1 'DATA RACE' <<<"$out" | sed 's/.*DATA RACE/DATA RACE/')"
    else
        fail "planted $name ($order order)" "exit status $rc (want 66), output: $(head -c 1500 <<<"$out")"
    fi
}
for order in index reverse; do
    planted race-threads $order race_threads_kernel "static __shared__ s, byte 0 of 4" \
        "write by block (0,0,0) thread (0,0,0)" "read by block (0,0,0) thread ("
    planted race-offbyone $order pairs_kernel "static __shared__ pairs" "write by block (0,0,0)" "emu_checks.cu:"
    planted race-blocks $order race_blocks_kernel "global memory: device allocation #2 (8 bytes" \
        "thread (0,0,0)" "different blocks of one launch"
    planted race-warp $order neighbour_kernel "static __shared__ lanes" "(warp 0 lane" \
        "one warp, with no __syncthreads, __syncwarp or shuffle between them"
    planted race-warps $order neighbour_kernel "static __shared__ lanes" "(warp 1 lane" \
        "one block, with no __syncthreads between them"
    planted race-atomic $order count_kernel "global memory: device allocation #2" "atomic write by block" "read by block"
done
# the tensor-core attention forward's cp.async pipeline with a planted bug
# (kernels/attention_mma_fwd.cu, on the bf16 entry): waiting for the next
# K/V tile with wait_group 1 instead of 0 reads a tile still in flight;
# without the barrier at the top of the key loop, the next tile's copies
# overwrite a buffer other warps still read. The one-pass backward's Q/dO
# pipeline (bf16 entry): the next tile waited for with wait_group 1, or
# copied into the buffer being read
A=build/emu-race/tests/test_cuda_emu_attention_mma
if [ -x "$A" ]; then
    # NAME|which pass|its kernel|what the report must hold
    while IFS='|' read -r name pass kernel want; do
        out=$(KVCPT_TEST_ATTN_MMA_PLANT=$name timeout 900 "$A" 2>&1) && rc=0 || rc=$?
        if [ "$rc" -eq 66 ] && grep -q "DATA RACE in kernel $kernel" <<<"$out" &&
            grep -qF "$want" <<<"$out" && ! grep -q "was not stopped" <<<"$out"; then
            ok "planted attention $pass pipeline bug $name: reported, exit status 66: $(grep -m1 'DATA RACE' <<<"$out" | sed 's/.*DATA RACE/DATA RACE/' | cut -c1-260)"
        else
            fail "planted attention $pass pipeline bug $name" "exit status $rc (want 66), output: $(head -c 1500 <<<"$out")"
        fi
    done <<'LIST'
cp-wait1|forward|attention_forward_mma_kernel|(a cp.async destination still in flight
cp-nosync|forward|attention_forward_mma_kernel|(one block, with no __syncthreads between them)
bwd-cp-wait1|backward|attention_mma_bwd_one_pass_kernel|(a cp.async destination still in flight
bwd-cp-buf|backward|attention_mma_bwd_one_pass_kernel|(a cp.async destination still in flight
LIST
else
    echo "skip - planted attention pipeline races: $A is not built"
fi

# the source lines of the first report
out=$("$E" race-threads 2>&1)
if grep -q "write by block (0,0,0) thread (0,0,0) (warp 0 lane 0) in race_threads_kernel(int\*, int) at .*tests/cuda_emu/emu_checks.cu:[0-9]" <<<"$out"; then
    ok "a race report names the kernel function and the .cu source line of each access"
else
    fail "race report source lines" "$out"
fi

for order in index reverse random; do
    out=$(KVCPT_EMU_ORDER=$order KVCPT_EMU_SEED=3 "$E" race-free 2>&1) && rc=0 || rc=$?
    if [ "$rc" -eq 0 ] && grep -q "race-free kernels ran to the end" <<<"$out" && ! grep -q "DATA RACE" <<<"$out"; then
        ok "race-free kernels ($order order): barriers, __syncwarp, shuffles, atomics and neighbouring bytes report nothing"
    else
        fail "race-free kernels ($order order)" "exit status $rc, output: $(head -c 1500 <<<"$out")"
    fi
done

# the planted missing barrier of the attention backward (its test case runs
# only when named: tests/gpu/test_attention_mma.c)
barrier_case="planted missing barrier in the backward"
rb=build/emu-race/tests/test_cuda_emu_attention_mma pb=build/tests/test_cuda_emu_attention_mma
if [ -x "$rb" ] && [ -x "$pb" ]; then
    out=$(KVCPT_TEST_CASES=$barrier_case timeout 900 "$rb" 2>&1) && rc=0 || rc=$?
    if [ "$rc" -eq 66 ] && grep -q "DATA RACE" <<<"$out" && grep -q "attention_mma_bwd_one_pass_kernel" <<<"$out" &&
        grep -q "attention_mma_bwd_one_pass.cuh:[0-9]" <<<"$out"; then
        ok "planted missing barrier in the attention backward: reported, exit status 66: $(grep -m1 'DATA RACE' <<<"$out" | sed 's/.*DATA RACE/DATA RACE/' | cut -c1-200)"
    else
        fail "planted missing barrier in the attention backward (race detector)" "exit status $rc (want 66), output: $(grep -v '^ok - ' <<<"$out" | head -c 1500)"
    fi
    out=$(KVCPT_TEST_CASES=$barrier_case timeout 900 "$pb" 2>&1) && rc=0 || rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^ok - planted backward bug caught (no barrier" <<<"$out"; then
        ok "planted missing barrier in the attention backward: the plain emulator's dq fails the oracle comparison ($(grep -m1 '^# planted no barrier' <<<"$out" | sed 's/^# //'))"
    else
        fail "planted missing barrier in the attention backward (plain emulator)" "exit status $rc, output: $(grep -v '^ok - ' <<<"$out" | head -c 1500)"
    fi
else
    echo "skip - planted missing barrier in the attention backward: $rb or $pb is not built"
fi

# the emulated GPU tests in the race variant, a few at a time
bins=()
. tests/cuda_emu/representative_cases.sh
declare -A cases=(
    [attention_cuda]="T=130 L=40 (refresh rows span tiles)|T=65 L=40 K=5, ratio 2, D=8|T=130 causal|evict restride 25 T=100|evict restride 3 T=50|select: T=1300"
    [model_cuda]="^parity: gqa4 mask|bf16 parity: gqa8 tied|bf16sr train steps: gqa4"
    [ops_cuda]="$ops_representative_cases"
    [attention_mma]="$mma_representative_cases"
)
[ "${KVCPT_EMU_RACE_ALL_CASES:-0}" = 1 ] && cases=()
for t in ${KVCPT_EMU_RACE_TESTS-adamw_cuda ops_cuda shard_ops_cuda attention_decode_cuda decode_cuda mma attention_cuda attention_mma attention_cudnn model_cuda}; do
    b=build/emu-race/tests/test_cuda_emu_$t
    if [ -x "$b" ]; then bins+=("$b"); else echo "skip - $t under the race detector: $b is not built"; fi
done
run_one() { # BIN
    local log=$tmp/$(basename "$1").race.log t0=$SECONDS t=${1##*/test_cuda_emu_}
    KVCPT_TEST_CASES=${cases[$t]:-} timeout 900 "$1" >"$log" 2>&1
    echo "rc=$? seconds=$((SECONDS - t0))" >>"$log"
}
jobs_max=${KVCPT_EMU_RACE_JOBS:-2}
for b in "${bins[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    run_one "$b" &
done
wait
for b in "${bins[@]}"; do
    log=$tmp/$(basename "$b").race.log
    t=${b##*/test_cuda_emu_}
    name="$(basename "$b") under the race detector${cases[$t]:+ (cases: ${cases[$t]})}"
    p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^FAIL - ' "$log"); secs=$(sed -n 's/^rc=.* seconds=//p' "$log")
    if grep -q '^rc=0 ' "$log" && [ "$f" -eq 0 ] && [ "$p" -gt 0 ] && ! grep -q "DATA RACE" "$log"; then
        ok "$name: $p checks pass, no race (${secs} s)"
    else
        fail "$name" "$(grep '^rc=' "$log"), $f failed: $(grep -m1 -A3 'DATA RACE' "$log" | tr '\n' ' ') $(grep -m3 '^FAIL - ' "$log" | tr '\n' ' ') $(tail -3 "$log" | tr '\n' ' ')"
    fi
done
