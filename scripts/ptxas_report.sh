#!/usr/bin/env bash
# The attention kernels' resources on sm_90, from ptxas's report: for every
# kernel instantiation in kernels/attention*.cu, its registers, spill
# stores and loads, shared memory (static, and the dynamic bytes its launch
# asks for) and the blocks per SM that these allow on an H100, then whether
# any kernel spills (exit status 1 if one does).
#
#   scripts/ptxas_report.sh [LOG...]
#
# The logs are ptxas -v outputs; by default build/kernels/attention*.cu.o.ptxas,
# which the build writes beside each attention object (Makefile), so the
# report costs no compile of its own. Planted-bug variants (the tests' hooks,
# attention_mma.h) are checked for spills but not listed.
#
# Blocks per SM, by the occupancy rules of compute capability 9.0: 65536
# registers per SM, allocated per warp in units of 256 (so a warp takes
# regs * 32 rounded up to 256); 233472 bytes (228 KiB) of shared memory per
# SM, each block taking 1 KiB more than it asks for, in units of 128 bytes;
# 2048 threads and 32 blocks per SM. The threads per block and the dynamic
# shared memory of each kernel are those its launch passes (the table below,
# which mirrors the launch code: kThreads and the *Smem/MmaTileLd sizes);
# "rt" marks bytes that depend on run-time sizes (the decode kernels), where
# the figure counts registers and threads only.
set -u
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
    shopt -s nullglob
    set -- build/kernels/attention*.cu.o.ptxas
    shopt -u nullglob
fi
if [ $# -eq 0 ]; then
    echo "ptxas_report.sh: no ptxas logs (build/kernels/attention*.cu.o.ptxas: run make with nvcc first)" >&2
    exit 2
fi
for f in "$@"; do
    if ! grep -q "Compiling entry function" "$f"; then
        echo "ptxas_report.sh: $f holds no ptxas -v report" >&2
        exit 2
    fi
done

# one line per entry: mangled name, registers, spill stores, spill loads,
# static shared bytes, then the demangled name from c++filt
awk '/Compiling entry function/ { f = $0; sub(/.*function .?/, "", f); sub(/.? for .*/, "", f); st = 0; ld = 0; smem = 0 }
     /bytes spill stores/ { match($0, /[0-9]+ bytes spill stores/); st = substr($0, RSTART, RLENGTH) + 0
                            match($0, /[0-9]+ bytes spill loads/); ld = substr($0, RSTART, RLENGTH) + 0 }
     /Used [0-9]+ registers/ && f != "" { match($0, /Used [0-9]+/); r = substr($0, RSTART + 5, RLENGTH - 5)
                            if (match($0, /[0-9]+ bytes smem/)) smem = substr($0, RSTART, RLENGTH) + 0
                            print f, r, st, ld, smem; f = "" }' "$@" >"${TMPDIR:-/tmp}/ptxas_report.$$"
trap 'rm -f "${TMPDIR:-/tmp}/ptxas_report.$$"' EXIT
cut -d' ' -f1 "${TMPDIR:-/tmp}/ptxas_report.$$" | c++filt |
    paste -d'|' "${TMPDIR:-/tmp}/ptxas_report.$$" - |
    awk -F'|' '
    # threads per block and dynamic shared bytes of a kernel with head dim D
    # (-1: set at run time)
    function launch(name, D) {
        T64 = 64
        if (name == "attention_forward_kernel" || name == "attention_suffix_chunk_kernel") { thr = 256; dyn = 8 * 3 * T64 + 4 * (3 * T64 * (D + 1) + T64 * 65 + 2 * T64); return }
        if (name == "attention_dq_kernel") { thr = 256; dyn = 8 * 3 * T64 + 4 * (4 * T64 * (D + 1) + T64 * 65 + 2 * T64); return }
        if (name == "attention_dkdv_kernel") { thr = 256; dyn = 8 * 3 * T64 + 4 * T64 + 4 * (4 * T64 * (D + 1) + 2 * T64 * 65 + 2 * T64); return }
        if (name == "attention_forward_mma_kernel") { thr = 32 * W; dyn = 4 * T64 * (D + 8) * 2; return }
        if (name == "attention_mma_dq_kernel") { thr = 128; dyn = 2 * T64 * (D + 8) * 2; return }
        if (name == "attention_mma_dkdv_kernel") { thr = 128; dyn = 4 * T64 * (D + 8) * 2 + 2 * T64 * 4; return }
        if (name == "attention_mma_bwd_one_pass_kernel") { thr = 256; dyn = 8 * T64 * (D + 8) * 2 + 4 * T64 * (T64 + 8) * 2 + 4 * T64 * 4; return }
        if (name ~ /^attention_mma_suffix_/) { thr = 256; dyn = 0; return }
        if (name ~ /^select_(chosen|row_records)_kernel$/) { thr = 1024; dyn = 0; return }
        if (name == "select_aggregate_kernel") { thr = 256; dyn = -1; return }
        if (name ~ /^prefill_/ || name == "decode_chunk_kernel") { thr = 256; dyn = -1; return }
        if (name == "decode_combine_kernel") { thr = 128; dyn = 0; return }
        thr = 256; dyn = 0 # the row-per-warp and elementwise kernels
    }
    {
        split($1, a, " "); regs = a[2]; st = a[3]; ld = a[4]; smem = a[5]; full = $2
        sub(/^void /, "", full); sub(/\(.*/, "", full)
        name = full; sub(/<.*/, "", name)
        args = full; if (!sub(/^[^<]*</, "", args)) args = ""; sub(/>$/, "", args)
        D = 0; bug = 0; n = split(args, t, /, */)
        if (n > 0 && t[1] ~ /^[0-9]+$/) D = t[1] + 0
        # the forward: <D, warps, bug, E>; the others <D, bug, E>
        W = 0
        if (name == "attention_forward_mma_kernel" && n >= 3) { W = t[2] + 0; bug = t[3] + 0 }
        else if (name ~ /_mma_(dq_kernel|dkdv_kernel|bwd_one_pass_kernel)$/ && n >= 2 && t[2] ~ /^[0-9]+$/) bug = t[2] + 0
        if (name == "attention_mma_dq_sum_kernel" && n >= 1 && t[1] ~ /^[0-9]+$/) { D = 0; bug = t[1] + 0 }
        if (name == "attention_suffix_combine_kernel" && n >= 3 && t[3] ~ /^[0-9]+$/) bug = t[3] + 0
        if (name == "select_aggregate_kernel" && n >= 1 && t[1] ~ /^[0-9]+$/) { D = 0; bug = t[1] + 0 }
        if (st > 0 || ld > 0) { spills++; bad = bad sprintf("  %s: %d bytes spill stores, %d bytes spill loads\n", full, st, ld) }
        kernels++
        if (bug != 0) { planted++; next }
        launch(name, D)
        warps = int((thr + 31) / 32)
        per_warp = int((regs * 32 + 255) / 256) * 256
        by_regs = int(int(65536 / per_warp) / warps)
        by_thr = int(2048 / thr); thr_limit = "threads"; if (by_thr > 32) { by_thr = 32; thr_limit = "32 max" }
        blocks = by_regs; limit = "regs"
        if (by_thr < blocks) { blocks = by_thr; limit = thr_limit }
        shown = "rt"
        if (dyn >= 0) {
            per_block = int((smem + dyn + 1024 + 127) / 128) * 128
            by_smem = int(233472 / per_block)
            if (by_smem < blocks) { blocks = by_smem; limit = "smem" }
            shown = smem + dyn
        }
        printf "%-58s %5d %7s %7d %9s %9d %s\n", full, regs, st "/" ld, thr, shown, blocks, "(" limit ")"
    }
    BEGIN { printf "%-58s %5s %7s %7s %9s %9s %s\n", "kernel (sm_90)", "regs", "spill", "threads", "smem B", "blocks/SM", "(bound by)" }
    END {
        printf "%d kernels (%d planted-bug variants checked, not listed); ", kernels, planted
        if (spills) { printf "%d spill:\n%s", spills, bad; exit 1 }
        print "none spills"
    }'
