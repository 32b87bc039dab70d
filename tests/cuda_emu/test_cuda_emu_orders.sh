#!/usr/bin/env bash
# The CUDA emulator against what a GPU does and does not promise
# (build/emu/emu_checks, from tests/cuda_emu/emu_checks.cu):
#  - launches over sm_90's limits run nothing and set the last error;
#  - an oversized launch on a project-like launch path stops the program;
#  - static plus dynamic shared memory over the limit stops the program;
#  - planted races (a shared variable read with no __syncthreads after thread
#    0 writes it; a flag block 0 sets for the others) read stale values under
#    KVCPT_EMU_ORDER=reverse and random, and none in the default index order;
#  - warp intrinsics as the programming guide defines them (masks, widths,
#    partial warps), and six planted warp bugs that must stop the program
#    naming kernel, block, lane and mask: a shuffle reading a lane that has
#    returned, a mask missing its caller, a source lane outside the mask,
#    lanes of one shuffle passing different masks, a full-warp shuffle in a
#    partial warp, __syncwarp against __syncthreads;
#  - arithmetic as nvcc compiles it: a*b+c in a kernel is one FMA, while
#    __fadd_rn(__fmul_rn(a, b), c) rounds twice (and would not without the
#    asm barriers in cuda_runtime.h: a build without them must fail);
#  - KVCPT_EMU_BLOCKS=sample runs a grid's corner blocks and a few more, and
#    only those; unset, every block;
#  - the emulated GPU tests (model and decode engines included; the attention,
#    model and ops suites on representative cases) pass with
#    threads and blocks run in index, reverse and seeded random orders
#    (KVCPT_EMU_ORDER_JOBS of them at once, default 2; KVCPT_EMU_ORDER_TESTS="ops_cuda ..."
#    picks the tests), and everything each
#    reads back from the device (KVCPT_EMU_DIGEST) is bit-identical across
#    the orders: the kernels are deterministic, as docs/emulator.md claims.
. "$(dirname "$0")/../lib.sh" || exit 1
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

"$E" warp 2>&1 || true
"$E" arith 2>&1 | grep -v '^#' || true

# planted warp bugs: NAME and the message each must stop with
expect_stops "warp bug" "$E" <<'EOF'
shfl-exited|shfl_exited_kernel (launch 1), block (0,0,0), thread (0,0,0) = warp 0 lane 0: __shfl_xor_sync with mask 0xffffffff: reads lane 16, which has exited
shfl-mask-caller|shfl_mask_caller_kernel (launch 1), block (0,0,0), thread (16,0,0) = warp 0 lane 16: __shfl_xor_sync with mask 0x0000ffff: the calling lane is not in its own mask
shfl-outside-mask|warp 0 lane 7: __shfl_down_sync with mask 0x000000ff: reads lane 8, which is not in the mask
shfl-mixed-masks|warp 0 lane 16: __shfl_xor_sync with mask 0xffffffff: lane 0, named in this mask, calls the same intrinsic with mask 0x0000ffff
shfl-partial-warp|thread (32,0,0) = warp 1 lane 0: __shfl_xor_sync with mask 0xffffffff: reads lane 16, which does not exist (the block has 48 threads
syncwarp-vs-syncthreads|warp 0 lane 0: __syncwarp with mask 0xffffffff: lane 1, named in this mask, waits at __syncthreads
EOF

# the planted arithmetic bug: __fmul_rn/__fadd_rn without their asm barriers
# (a header copy with EMU_OPAQUE_FLOAT emptied) must fail the arith check
src=build/emu/tests/cuda_emu/emu_checks.cu.cc
cxx=${CXX:-g++}
if [ -f "$src" ] && [ -f build/emu/emu_runtime.o ] && [ -f build/emu/emu_mma.o ] && command -v "$cxx" >/dev/null; then
    nb=$tmp/nobarrier
    mkdir -p "$nb"
    cp -r tests/cuda_emu/include "$nb/"
    sed -i 's/^#define EMU_OPAQUE_FLOAT(v) asm.*/#define EMU_OPAQUE_FLOAT(v) (void)(v)/' "$nb/include/cuda_runtime.h"
    fma=$(grep -qw fma /proc/cpuinfo 2>/dev/null && echo -mfma)
    if "$cxx" -std=c++17 -O2 -ffp-contract=fast $fma -D__CUDA_ARCH__=900 -DKVCPT_CUDA -DKVCPT_CUDA_EMU -D_GNU_SOURCE \
        -I"$nb/include" -I. -iquote kernels -include cuda_runtime.h -c "$src" -o "$nb/checks.o" 2>"$nb/log" &&
        "$cxx" -fopenmp "$nb/checks.o" build/emu/emu_runtime.o build/emu/emu_mma.o -o "$nb/emu_checks" 2>>"$nb/log"; then
        out=$("$nb/emu_checks" arith 2>&1)
        if grep -q "^FAIL - __fadd_rn(__fmul_rn(a, b), c)" <<<"$out"; then
            ok "planted: without the asm barriers g++ fuses __fadd_rn(__fmul_rn(a, b), c) and the arith check fails"
        else
            fail "planted arithmetic bug" "the arith check passed without the asm barriers: $out"
        fi
    else
        fail "planted arithmetic bug" "could not build emu_checks without the barriers: $(head -5 "$nb/log")"
    fi
else
    echo "skip - planted arithmetic bug: $src, build/emu/emu_runtime.o, build/emu/emu_mma.o or $cxx missing"
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

# the digest comparison below must be able to fail: a planted float
# atomicAdd over blocks rounds differently when the blocks run reversed
for o in index reverse; do KVCPT_EMU_ORDER=$o KVCPT_EMU_DIGEST=$tmp/atomic.$o "$E" atomic-sum >"$tmp/atomic.$o.out" 2>&1; done
if [ -s "$tmp/atomic.index" ] && ! cmp -s "$tmp/atomic.index" "$tmp/atomic.reverse"; then
    ok "planted: a float atomicAdd over 257 blocks gives other bits in reverse order ($(cat "$tmp/atomic.index.out") vs $(cat "$tmp/atomic.reverse.out")) and the digests differ"
else
    fail "planted schedule dependence" "digests equal or missing: $(cat "$tmp/atomic.index.out" "$tmp/atomic.reverse.out" | tr '\n' ' ')"
fi

# the emulated GPU tests under several orders, a few at a time; each run
# writes a digest of every device-to-host copy, compared across the orders.
# The four long suites run representative cases (KVCPT_TEST_CASES; all of them
# with KVCPT_EMU_ORDER_ALL_CASES=1): every kernel and engine mode (fp32 with
# the paper's and the eval cache's mask, bf16, bf16sr with the optimizer on
# the device; grids of one tile and of several, causal and masked, GQA and
# not) still runs under each order, while the shapes' own coverage is
# test_cuda_emu_attention_cuda's, test_cuda_emu_model_cuda's,
# test_cuda_emu_ops_cuda's and test_cuda_emu_attention_mma's, in index order
# (tests/cuda_emu/representative_cases.sh says which ops and tensor-core
# attention cases run here). A leading ^ anchors a text at the label's start,
# so "^parity: x" leaves out "bf16 parity: x" (bf16 runs on gqa8 here).
. tests/cuda_emu/representative_cases.sh
declare -A cases=(
    [attention_cuda]="T=130 L=40 (refresh rows span tiles)|T=65 L=40 K=5, ratio 2, D=8|T=130 causal|T=200 L=140 K=100 (> tile)|evict restride 25 T=100|evict restride 3 T=50|select: T=1300"
    [model_cuda]="^parity: gqa4 mask|^parity: gqa4 evict restride6|bf16 parity: gqa8 tied mask|bf16sr train steps: gqa4"
    [ops_cuda]="$ops_representative_cases"
    [attention_mma]="$mma_representative_cases"
)
[ "${KVCPT_EMU_ORDER_ALL_CASES:-0}" = 1 ] && cases=()
runs=()
for t in ${KVCPT_EMU_ORDER_TESTS-ops_cuda adamw_cuda shard_ops_cuda attention_decode_cuda attention_cuda attention_mma attention_cudnn model_cuda decode_cuda mma}; do
    b=build/tests/test_cuda_emu_$t
    if [ ! -x "$b" ]; then echo "skip - $t under other orders: $b is not built"; continue; fi
    orders="index:0 reverse:0 random:1"
    # the quick ones also get a second random schedule
    case $t in ops_cuda | adamw_cuda | shard_ops_cuda | attention_decode_cuda | attention_mma | attention_cudnn | mma) orders="$orders random:2" ;; esac
    for os in $orders; do runs+=("$b:$os"); done
done
run_one() { # BIN ORDER SEED
    local base=$tmp/$(basename "$1").$2.$3 t0=$SECONDS t=${1##*/test_cuda_emu_}
    KVCPT_TEST_CASES=${cases[$t]:-} KVCPT_EMU_ORDER=$2 KVCPT_EMU_SEED=$3 KVCPT_EMU_DIGEST=$base.digest timeout 900 "$1" >"$base.log" 2>&1
    echo "rc=$? seconds=$((SECONDS - t0))" >>"$base.log"
}
jobs_max=${KVCPT_EMU_ORDER_JOBS:-2}
# longest first, so the two job slots finish together
for i in $(seq $((${#runs[@]} - 1)) -1 0); do
    IFS=: read -r b o seed <<<"${runs[$i]}"
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    run_one "$b" "$o" "$seed" &
done
wait
for r in "${runs[@]}"; do
    IFS=: read -r b o seed <<<"$r"
    base=$tmp/$(basename "$b").$o.$seed
    t=${b##*/test_cuda_emu_}
    name="$(basename "$b") with KVCPT_EMU_ORDER=$o KVCPT_EMU_SEED=$seed${cases[$t]:+ (cases: ${cases[$t]})}"
    p=$(grep -c '^ok - ' "$base.log"); f=$(grep -c '^FAIL - ' "$base.log"); secs=$(sed -n 's/^rc=.* seconds=//p' "$base.log")
    if grep -q '^rc=0 ' "$base.log" && [ "$f" -eq 0 ] && [ "$p" -gt 0 ]; then
        ok "$name: $p checks pass (${secs} s)"
    else
        fail "$name" "$(grep '^rc=' "$base.log"), $f failed: $(grep -m3 '^FAIL - ' "$base.log" | tr '\n' ' ') $(tail -3 "$base.log" | tr '\n' ' ')"
    fi
    [ "$o" = index ] && continue
    # sorted: host threads may copy side by side in any order (OpenMP)
    sort "$tmp/$(basename "$b").index.0.digest" >"$base.ref.sorted" 2>/dev/null
    sort "$base.digest" >"$base.sorted" 2>/dev/null
    n=$(wc -l <"$base.sorted")
    if [ "$n" -gt 0 ] && cmp -s "$base.ref.sorted" "$base.sorted"; then
        ok "$name: all $n device-to-host copies bit-identical to index order"
    else
        fail "$name: device-to-host copies differ from index order" \
            "first difference: $(diff "$base.ref.sorted" "$base.sorted" 2>&1 | head -3 | tr '\n' ' ')"
    fi
done
