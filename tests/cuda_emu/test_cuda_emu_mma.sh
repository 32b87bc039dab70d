#!/usr/bin/env bash
# The warp-level matrix instructions (kernels/mma.cuh) beyond the GEMM test
# (build/tests/test_cuda_emu_mma, which checks the fragment layouts and the
# arithmetic with planted layout bugs):
#  - under the emulator (build/emu/emu_checks), used rightly they give the
#    documented values, and six planted misuses stop the program naming
#    kernel, block, lane and instruction: an ldmatrix row address not 16-byte
#    aligned, one in global memory, one running past its shared array; an mma
#    in a partial warp, with lanes that have exited, and from two branches;
#  - with nvcc (skipped without it): the test kernel's PTX holds each
#    instruction the primitives promise, and ptxas compiles it without spills;
#    the tensor-core attention's PTX holds the matrix instructions.
. "$(dirname "$0")/../lib.sh" || exit 1
E=build/emu/emu_checks
if [ -x "$E" ]; then
    out=$("$E" mma-ok 2>&1) && rc=0 || rc=$?
    if [ "$rc" -eq 0 ] && grep -q '^ok - ' <<<"$out"; then ok "matrix instructions used rightly under the emulator"
    else fail "matrix instructions used rightly" "exit status $rc, output: $out"; fi
    # NAME|what the message must hold|and, optionally, what else
    expect_stops "matrix-instruction or vector-access misuse" "$E" <<'LIST'
ldmatrix-misaligned|ldmatrix_misaligned_kernel (launch 1), block (0,0,0), thread (0,0,0) = warp 0 lane 0: ldmatrix.sync.aligned.m8n8: the 16 bytes at|(16-byte alignment required) is not aligned as the instruction requires
ldmatrix-global|warp 0 lane 0: ldmatrix.sync.aligned.m8n8: the 16 bytes at|does not lie inside the block's shared memory
ldmatrix-past|thread (31,0,0) = warp 0 lane 31: ldmatrix.sync.aligned.m8n8|does not lie inside the block's shared memory
vector-misaligned|vector_misaligned_kernel (launch 1), block (0,0,0), thread (0,0,0): 16-byte vector load of 16 bytes at|which is not 16-byte aligned (a GPU stops the kernel: misaligned address)
mma-partial-warp|thread (32,0,0) = warp 1 lane 0: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with mask 0xffffffff: lane 16 does not exist
mma-exited|warp 0 lane 0: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with mask 0xffffffff: lane 16 has exited
mma-divergent|lane 16 executes it from another place in the code (divergent lanes)
LIST
else
    echo "skip - emulated matrix instructions: $E is not built (make test builds it)"
fi

NVCC=$(find_nvcc)
if [ -z "$NVCC" ]; then
    echo "skip - mma PTX: no nvcc"
    exit 0
fi
flags=(-O3 -std=c++17 -I. --expt-relaxed-constexpr)
if "$NVCC" "${flags[@]}" -arch=sm_90 -ptx tests/gpu/mma_gemm.cu -o "$tmp/mma_gemm.ptx" 2>"$tmp/ptx.log"; then
    missing=""
    for ins in 'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32' 'ldmatrix.sync.aligned.m8n8.x4.shared.b16' \
        'ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16' 'ldmatrix.sync.aligned.m8n8.x2.shared.b16' \
        'ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16' 'cvt.rn.bf16x2.f32'; do
        grep -qF "$ins" "$tmp/mma_gemm.ptx" || missing="$missing $ins"
    done
    if [ -z "$missing" ]; then ok "nvcc -arch=sm_90 -ptx of tests/gpu/mma_gemm.cu holds mma.sync m16n8k16 bf16, ldmatrix x2/x4 (.trans too), cvt bf16x2"
    else fail "mma PTX" "not in the PTX:$missing"; fi
else
    fail "mma PTX" "nvcc -ptx failed: $(cat "$tmp/ptx.log")"
fi
if "$NVCC" "${flags[@]}" -gencode arch=compute_90,code=sm_90 -Xptxas -v -c tests/gpu/mma_gemm.cu -o "$tmp/mma_gemm.o" \
    >"$tmp/ptxas.log" 2>&1; then
    info=$(grep -A2 "Function properties for _Z15mma_gemm_kernel" "$tmp/ptxas.log")
    if grep -q "0 bytes spill stores, 0 bytes spill loads" <<<"$info"; then
        ok "ptxas -v: mma_gemm_kernel for sm_90 without spills ($(grep -o 'Used [0-9]* registers' <<<"$info"))"
    else
        fail "mma ptxas" "spills or no report for mma_gemm_kernel: $(cat "$tmp/ptxas.log")"
    fi
else
    fail "mma ptxas" "nvcc -Xptxas -v failed: $(cat "$tmp/ptxas.log")"
fi

# the tensor-core attention: its PTX holds the matrix instructions (ptxas's
# registers, spills and blocks per SM of every attention kernel:
# tests/kernels/test_ptxas_attention.sh, from the build's own report)
for f in kernels/attention_mma_fwd.cu kernels/attention_mma_bwd.cu; do
    base=$(basename "$f" .cu)
    if "$NVCC" "${flags[@]}" -arch=sm_90 -ptx "$f" -o "$tmp/$base.ptx" 2>"$tmp/ptx.log"; then
        missing=""
        for ins in 'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32' 'ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16' \
            'ldmatrix.sync.aligned.m8n8.x2.shared.b16'; do
            grep -qF "$ins" "$tmp/$base.ptx" || missing="$missing $ins"
        done
        if [ -z "$missing" ]; then ok "nvcc -arch=sm_90 -ptx of $f holds mma.sync m16n8k16 bf16 and ldmatrix (x2, x4.trans)"
        else fail "$base PTX" "not in the PTX:$missing"; fi
    else
        fail "$base PTX" "nvcc -ptx failed: $(cat "$tmp/ptx.log")"
    fi
done
