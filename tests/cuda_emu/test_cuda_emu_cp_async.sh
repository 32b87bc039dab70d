#!/usr/bin/env bash
# cp.async (kernels/cp_async.cuh) under the CPU emulator and with nvcc:
#  - plain emulator (build/emu/emu_checks): a copy lands at the wait that
#    covers its group, not before (wait_group 1 of two groups, wait_group 0,
#    a copy never committed); a double-buffered pipeline used rightly gives
#    every output; with wait_group 1 before the last tile it reads stale
#    bytes; six misuses stop the program (a misaligned destination or
#    source, a global destination, a shared source, a thread ending with a
#    copy in flight, a wait that cannot cover a copy never committed);
#  - the tensor-core attention forward's pipeline with wait_group 1 where 0
#    is needed (build/tests/test_cuda_emu_attention_mma with
#    KVCPT_TEST_ATTN_MMA_PLANT=cp-wait1): its output is caught outside the
#    tolerance (the race variant's report of it: tests/cuda_emu/test_cuda_emu_races.sh);
#    and the one-pass backward's Q/dO pipeline with wait_group 1 where 0 is
#    needed (bwd-cp-wait1) or the next tile copied into the buffer being
#    read (bwd-cp-buf): its gradients are caught outside the tolerance;
#  - race variant (build/emu-race/emu_checks): the pipeline used rightly
#    reports nothing in index, reverse and random order; three planted
#    pipeline bugs (wait_group 1 where 0 is needed, no __syncthreads after
#    the wait, the next tile's copies overwriting a buffer the other warp
#    still reads) and two misuses (the source written, the destination read,
#    in flight) each stop it with exit status 66 and a report naming the
#    kernel, the shared or global memory and both accesses;
#  - with nvcc (skipped without it): the attention forward's PTX holds
#    cp.async.cg.shared.global, commit_group and wait_group.
. "$(dirname "$0")/../lib.sh" || exit 1
E=build/emu/emu_checks
if [ -x "$E" ]; then
    for mode in cp-semantics cp-ok; do
        out=$("$E" $mode 2>&1) && rc=0 || rc=$?
        if [ "$rc" -eq 0 ] && grep -q '^ok - ' <<<"$out" && ! grep -q '^FAIL' <<<"$out"; then
            ok "emulated cp.async $mode: $(grep -c '^ok - ' <<<"$out") checks ($(grep '^ok - ' <<<"$out" | sed 's/^ok - cp.async[: ]*//' | paste -sd ';' | cut -c1-300))"
        else
            fail "emulated cp.async $mode" "exit status $rc, output: $out"
        fi
    done
    out=$("$E" cp-wait1 2>&1) && rc=0 || rc=$?
    wrong=$(sed -n 's/^planted cp.async bug cp-wait1: \([0-9]*\) of .*/\1/p' <<<"$out")
    if [ "$rc" -eq 0 ] && [ "${wrong:-0}" -gt 0 ]; then
        ok "planted wait_group 1 before the last tile: the last tile is read stale ($wrong outputs wrong)"
    else
        fail "planted wait_group 1 before the last tile (plain emulator)" "exit status $rc, output: $out"
    fi
    # NAME|what the message must hold
    expect_stops "cp.async misuse" "$E" <<'LIST'
cp-misaligned-dst|cp.async.cg.shared.global (the destination): the 16 bytes at
cp-misaligned-src|cp.async.cg.shared.global: the 16-byte source at
cp-global-dst|does not lie inside the block's shared memory
cp-shared-src|does not lie inside a cudaMalloc'd block (the source must be global memory)
cp-never-waited|the thread ended with 1 cp.async copy never covered by a cp.async.wait_group or wait_all
cp-uncommitted|the thread ended with 1 cp.async copy never covered by a cp.async.wait_group or wait_all
LIST
else
    echo "skip - emulated cp.async: $E is not built (make test builds it)"
fi

A=build/tests/test_cuda_emu_attention_mma
if [ -x "$A" ]; then
    out=$(KVCPT_TEST_ATTN_MMA_PLANT=cp-wait1 "$A" 2>&1) && rc=0 || rc=$?
    if [ "$rc" -eq 0 ] && grep -q '^ok - planted cp.async bug caught' <<<"$out" && ! grep -q '^FAIL' <<<"$out"; then
        ok "attention forward with wait_group 1 for the next K/V tile: caught by the parity check ($(grep -m1 '^# planted' <<<"$out" | sed 's/^# planted //'))"
    else
        fail "attention forward with wait_group 1 for the next K/V tile" "exit status $rc, output: $(tail -5 <<<"$out")"
    fi
    # the one-pass backward's Q/dO pipeline: the next tile read before its
    # copies land, or copied over the tile being read
    for name in bwd-cp-wait1 bwd-cp-buf; do
        out=$(KVCPT_TEST_ATTN_MMA_PLANT=$name "$A" 2>&1) && rc=0 || rc=$?
        if [ "$rc" -eq 0 ] && grep -q '^ok - planted cp.async bug caught' <<<"$out" && ! grep -q '^FAIL' <<<"$out"; then
            ok "attention backward plant $name: caught by the gradients' oracle comparison ($(grep -m1 '^# planted' <<<"$out" | sed 's/^# planted //'))"
        else
            fail "attention backward plant $name" "exit status $rc, output: $(tail -5 <<<"$out")"
        fi
    done
else
    echo "skip - planted attention pipeline bug: $A is not built (make test builds it)"
fi

R=build/emu-race/emu_checks
if [ -x "$R" ]; then
    for order in index reverse random; do
        out=$(KVCPT_EMU_ORDER=$order KVCPT_EMU_SEED=3 "$R" cp-ok 2>&1) && rc=0 || rc=$?
        if [ "$rc" -eq 0 ] && grep -q '^ok - ' <<<"$out" && ! grep -q "DATA RACE" <<<"$out"; then
            ok "cp.async pipeline used rightly ($order order): no race reported"
        else
            fail "cp.async pipeline used rightly ($order order)" "exit status $rc, output: $(head -c 1500 <<<"$out")"
        fi
    done
    # NAME|what the report must hold|and what else
    while IFS='|' read -r bug want also; do
        for order in index reverse; do
            out=$(KVCPT_EMU_ORDER=$order "$R" "$bug" 2>&1) && rc=0 || rc=$?
            if [ "$rc" -eq 66 ] && grep -qF "$want" <<<"$out" && grep -qF "$also" <<<"$out" &&
                ! grep -q "not stopped" <<<"$out"; then
                ok "planted cp.async bug $bug ($order order): reported, exit status 66: $(grep -m1 'DATA RACE' <<<"$out" | sed 's/.*DATA RACE/DATA RACE/' | cut -c1-240)"
            else
                fail "planted cp.async bug $bug ($order order)" "exit status $rc (want 66), output: $(head -c 1500 <<<"$out")"
            fi
        done
    done <<'LIST'
cp-wait1|DATA RACE in kernel cp_pipeline_kernel (launch 1) on shared memory: static __shared__ buf|(a cp.async destination still in flight: no cp.async.wait_group covering its group has run in the issuing thread)
cp-nosync|DATA RACE in kernel cp_pipeline_kernel (launch 1) on shared memory: static __shared__ buf|one block, with no __syncthreads between them
cp-overwrite|DATA RACE in kernel cp_pipeline_kernel (launch 1) on shared memory: static __shared__ buf|cp.async issued by block
cp-source-written|DATA RACE in kernel cp_misuse_kernel (launch 1) on global memory: device allocation #1|(the source of a cp.async still in flight
cp-dst-read|DATA RACE in kernel cp_misuse_kernel (launch 1) on shared memory: static __shared__ s|(a cp.async destination still in flight
LIST
    # a landed copy read by another thread before any barrier: the landing
    # write is the issuing thread's, at its wait
    out=$("$R" cp-nosync 2>&1)
    if grep -q "cp.async write, landed at the wait by block" <<<"$out"; then
        ok "missing barrier after the wait: reported against the copy's write where its wait ran"
    else
        fail "missing barrier after the wait" "no report names the landed write: $(head -c 1500 <<<"$out")"
    fi
else
    echo "skip - cp.async under the race detector: $R is not built (make test builds it)"
fi

NVCC=$(find_nvcc)
if [ -z "$NVCC" ]; then
    echo "skip - cp.async PTX: no nvcc"
    exit 0
fi
f=kernels/attention_mma_fwd.cu
if "$NVCC" -O3 -std=c++17 -I. --expt-relaxed-constexpr -arch=sm_90 -ptx "$f" -o "$tmp/fwd.ptx" 2>"$tmp/ptx.log"; then
    missing=""
    for ins in 'cp.async.cg.shared.global' 'cp.async.commit_group' 'cp.async.wait_group 0'; do
        grep -qF "$ins" "$tmp/fwd.ptx" || missing="$missing $ins"
    done
    if [ -z "$missing" ]; then ok "nvcc -arch=sm_90 -ptx of $f holds cp.async.cg.shared.global, commit_group and wait_group 0"
    else fail "cp.async PTX" "not in the PTX of $f:$missing"; fi
else
    fail "cp.async PTX" "nvcc -ptx failed: $(cat "$tmp/ptx.log")"
fi
