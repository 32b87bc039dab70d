#!/usr/bin/env bash
# The attention kernels' ptxas report (scripts/ptxas_report.sh) on the
# build's own logs (build/kernels/attention*.cu.o.ptxas, written as the
# objects compile): every kernels/attention*.cu has one, no kernel spills,
# and the table lists the engine's tensor-core kernels with their blocks per
# SM. Then the report is shown to fail on a log with a planted spill. Skips
# without nvcc (no CUDA objects are built then).
. "$(dirname "$0")/../lib.sh" || exit 1
NVCC=$(find_nvcc)
if [ -z "$NVCC" ]; then
    echo "skip - attention ptxas report: no nvcc (no CUDA objects built)"
    exit 0
fi

missing=""
for f in kernels/attention*.cu; do
    [ -s "build/${f}.o.ptxas" ] || missing="$missing build/${f}.o.ptxas"
done
if [ -n "$missing" ]; then
    fail "attention ptxas logs" "missing:$missing (make builds them with the objects)"
    exit 0
fi

out=$(bash scripts/ptxas_report.sh 2>&1) && rc=0 || rc=$?
echo "$out" | sed 's/^/# /'
if [ "$rc" -eq 0 ] && grep -q "none spills" <<<"$out"; then
    ok "ptxas: no attention kernel spills on sm_90 ($(tail -1 <<<"$out" | cut -d';' -f1))"
else
    fail "ptxas: attention kernels spill" "exit status $rc: $(tail -5 <<<"$out")"
fi
# the engine's kernels are in the table, each with a blocks-per-SM figure
# (both backward variants: the two passes and the one pass with its dQ sum)
for k in 'attention_forward_mma_kernel<128, 8, 0, __nv_bfloat16>' 'attention_forward_mma_kernel<128, 4, 0, __nv_bfloat16>' \
    'attention_mma_dq_kernel<128, 0, __nv_bfloat16>' \
    'attention_mma_dkdv_kernel<128, 0, __nv_bfloat16>' 'attention_mma_bwd_one_pass_kernel<128, 0, __nv_bfloat16>' \
    'attention_mma_dq_sum_kernel<0>' 'attention_forward_kernel<128, float>'; do
    if grep -F "$k" <<<"$out" | grep -Eq ' [0-9]+ \((regs|smem|threads)\)$'; then
        ok "ptxas table lists $k: $(grep -F "$k" <<<"$out" | awk '{ print $(NF - 5) " registers, " $(NF - 1) " blocks/SM " $NF }')"
    else
        fail "ptxas table" "no row with blocks per SM for $k"
    fi
done

# a planted spill: the same report must fail and name the kernel
cat >"$tmp/spill.ptxas" <<'LOG'
ptxas info    : Compiling entry function '_Z28attention_forward_mma_kernelILi128ELi8ELi0E13__nv_bfloat16EvPT2_PfPKS1_S5_S5_llllf' for 'sm_90'
ptxas info    : Function properties for _Z28attention_forward_mma_kernelILi128ELi8ELi0E13__nv_bfloat16EvPT2_PfPKS1_S5_S5_llllf
    8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers
LOG
out=$(bash scripts/ptxas_report.sh "$tmp/spill.ptxas" 2>&1) && rc=0 || rc=$?
if [ "$rc" -eq 1 ] && grep -q "attention_forward_mma_kernel<128, 8, 0, __nv_bfloat16>: 8 bytes spill stores" <<<"$out"; then
    ok "planted spill: the report fails naming the kernel"
else
    fail "planted spill" "exit status $rc, output: $out"
fi
