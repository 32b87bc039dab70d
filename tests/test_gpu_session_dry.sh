#!/usr/bin/env bash
# scripts/gpu_session.sh --dry-run: the GPU run plan's two device commands
# at tiny sizes on the emulated GPU (build/emu/kvcpt, the emulated test
# binaries), so the plan cannot rot between the rare days with a GPU. Each
# stage must run to exit 0 and print its figures; each command must leave
# exactly its summary and its log tarball in $OUT (the device tool returns
# at most 8 files); the real plan's limits must add up within each command's
# budget (at most 540 s, under the tool's 600 s); a budget too small skips
# stages instead of running past it. The SDPA peer is a stand-in here (its
# JSON as scripts/bench_attention_torch.py prints it): the real one needs a GPU.
. "$(dirname "$0")/lib.sh"
E=build/emu/kvcpt
if [ ! -x "$E" ] || [ ! -x build/tests/test_cuda_emu_mma ]; then
    echo "skip - gpu session dry run: $E or build/tests/test_cuda_emu_mma is not built (make test builds them)"
    exit 0
fi

# the plan's arithmetic: the stages' limits against the budgets
for c in call1 call2; do
    plan=$(bash scripts/gpu_session.sh --plan $c)
    total=$(awk '$1 == "total" { print $2 }' <<<"$plan") budget=$(awk '$1 == "total" { print $4 }' <<<"$plan")
    if [ "${budget:-999}" -le 540 ] && grep -q '^setup ' <<<"$plan"; then
        ok "$c: a budget of ${budget}s (at most 540 s), stage limits summing to ${total}s"
    else fail "$c plan" "$plan"; fi
done
plan=$(bash scripts/gpu_session.sh --plan call1)
if [ "$(awk '$1 == "total" { print ($2 <= $4) }' <<<"$plan")" = 1 ] &&
    [ "$(awk '$1 != "total" { printf "%s ", $1 }' <<<"$plan")" = "setup tests attention step8b step8b_sr " ]; then
    ok "call1 (the GPU suite, attention vs SDPA, the 8B step in bf16 and bf16sr): every limit fits its budget"
else fail "call1 limits" "$plan"; fi

# stand-ins: the peers' python (its site-packages' nvidia wheels in
# $tmp/site), nvidia-smi answering only the clocks query, and CUDA installs
mkdir -p "$tmp/site/nvidia/nccl/lib" "$tmp/site/nvidia/cudnn/lib" "$tmp/bin" "$tmp/cuda-13.0/lib64" "$tmp/none"
touch "$tmp/site/nvidia/nccl/lib/libnccl.so.2" "$tmp/site/nvidia/cudnn/lib/libcudnn.so.9" "$tmp/cuda-13.0/lib64/libcudart.so.13"
cat >"$tmp/python" <<STUB
#!/bin/sh
case "\$*" in *nvidia*) echo "$tmp/site/nvidia"; exit 0 ;; *import*) echo "stub python"; exit 0 ;; esac
echo '{"bench": "attention_torch", "torch": "stub", "forward_ms": 2.0, "backward_ms": 5.0, "sdpa_backend": "FLASH_ATTENTION", "sdpa_backends": {"FLASH_ATTENTION": {"forward_ms": 2.0, "backward_ms": 5.0}, "CUDNN_ATTENTION": {"error": "stub refusal"}}}'
STUB
cat >"$tmp/bin/nvidia-smi" <<'STUB'
#!/bin/sh
case "$*" in *clocks.sm*) printf 'clocks.current.sm [MHz], power.draw [W]\n1980 MHz, 700.00 W\n'; exit 0 ;; esac
exit 1
STUB
printf '#!/bin/sh\necho "FAIL - stand-in tensor-core test"\nexit 1\n' >"$tmp/mma-fails"
chmod +x "$tmp/python" "$tmp/bin/nvidia-smi" "$tmp/mma-fails"
run() {
    PATH="$tmp/bin:$PATH" KVCPT_SESSION_CUDA_ROOTS="$tmp/cuda*" KVCPT_PYTHON="$tmp/python" OUT="$tmp/out-$1" \
        KVCPT_SESSION_WORK="$tmp/work" bash scripts/gpu_session.sh --dry-run "$1" >"$tmp/$1.log" 2>&1
}

# runs one call's dry run, checks that $OUT holds only its summary and log
# tarball and that each named stage ran to exit 0; leaves $s at the summary
run_and_check() {
    local call=$1 rc files st
    shift
    run "$call"
    rc=$?
    s=$tmp/out-$call/$call-summary.md
    files=$(ls "$tmp/out-$call" 2>/dev/null | tr '\n' ' ')
    if [ $rc -eq 0 ] && [ "$files" = "$call-logs.tar.gz $call-summary.md " ]; then
        ok "$call dry run: exit 0, \$OUT holds its summary and its log tarball only"
    else fail "$call dry run" "rc $rc, files: $files; $(tail -5 "$tmp/$call.log")"; fi
    for st in "$@"; do
        if grep -q "^($st: exit 0, " "$s"; then ok "$call dry run: stage $st ran to exit 0"
        else fail "$call stage $st" "$(sed -n "/^## $st/,/^($st:/p" "$s" | tail -8)"; fi
    done
}

run_and_check call1 setup tests attention step8b step8b_sr
if grep -q "^test_cuda_emu_mma .* passed, 0 failed" "$s" &&
    grep -q "^attention T 40 mask L 32 K 4: bf16 attention mma fwd .* ms .*SDPA stub (.*) fwd 2.000 ms .*bf16/SDPA rate fwd" "$s" &&
    grep -q "^attention T 48 causal: bf16 attention mma" "$s" &&
    grep -q "^8B step T=72 (bf16, recompute none): .* tokens/s" "$s" &&
    grep -q '^"step":2 "loss":[0-9.]* "tokens_per_s"' "$s"; then
    ok "call1 dry run: the suite's count, attention beside the peer with the ratio, the step's tokens/s, the bf16sr steps"
else fail "call1 figures" "$(cat "$s")"; fi
if grep -q "^CUDA libraries on LD_LIBRARY_PATH, in this order: $tmp/cuda-13.0/lib64 (libcudart) $tmp/site/nvidia/cudnn/lib (libcudnn) $tmp/site/nvidia/nccl/lib (libnccl) (a CUDA install's lib64 first)" "$s"; then
    ok "call1 dry run: a CUDA install's lib64 first, then the python's nvidia/*/lib, said in the summary"
else fail "library search, CUDA install" "$(grep -i 'librar' "$s")"; fi
if grep -q "^gpu state before attention: clocks.current.sm \[MHz\], power.draw \[W\];1980 MHz, 700.00 W" "$s" &&
    grep -q "^gpu state after step8b_sr: clocks" "$s" && ! grep -q "^gpu state .* setup" "$s" &&
    grep -q "^the tensor-core tests passed" "$s" &&
    grep -q "^attention T 40 mask L 32 K 4: bf16 attention mma .*SDPA stub (default backend FLASH_ATTENTION; FLASH_ATTENTION fwd 2.000 ms bwd 5.000 ms, CUDNN_ATTENTION refused: stub refusal)" "$s"; then
    ok "call1 dry run: clocks, power and throttle reasons before and after each measured stage; the attention names its kernels and SDPA's backends"
else fail "call1 gpu state / backends" "$(grep -E 'gpu state|^attention|tensor-core' "$s")"; fi
if tar tzf "$tmp/out-call1/call1-logs.tar.gz" | grep -q 'summary.md' &&
    tar tzf "$tmp/out-call1/call1-logs.tar.gz" | grep -q 'bench-attention.json' &&
    tar tzf "$tmp/out-call1/call1-logs.tar.gz" | grep -q 'tests/test_cuda_emu_mma.log'; then
    ok "call1 dry run: the tarball holds the summary, the JSON and each test's log"
else fail "call1 tarball" "$(tar tzf "$tmp/out-call1/call1-logs.tar.gz" 2>&1 | head)"; fi

run_and_check call2 setup realmodel train eval bench decode ranks
if [ "$(grep -c '^--- .*: exit 0$' "$s")" = 5 ] && grep -q "^worst relative PPL difference cuda vs cpu" "$s" &&
    grep -q '^{"bench":"decode"' "$s" && grep -q '^{"bench":"model"' "$s" && grep -q "^ranks stage skipped: .* sees 1 CUDA device" "$s"; then
    ok "call2 dry run: three trainings (sharded on one GPU without NCCL, optimizer on the device, bf16sr) and both evals exit 0; eval, bench and decode figures; ranks skipped on one device"
else fail "call2 figures" "$(cat "$s")"; fi

# the tensor-core tests fail (a stand-in): the later stages run with
# KVCPT_ATTN=cuda-core, and say so; no CUDA install: the python's wheels alone
KVCPT_SESSION_MMA_TEST="$tmp/mma-fails" KVCPT_SESSION_CUDA_ROOTS="$tmp/none/cuda*" KVCPT_PYTHON="$tmp/python" \
    OUT="$tmp/out-fb" KVCPT_SESSION_WORK="$tmp/work-fb" bash scripts/gpu_session.sh --dry-run tests attention >"$tmp/fb.log" 2>&1
s=$tmp/out-fb/stages-summary.md
if grep -q "^FAIL - stand-in tensor-core test" "$s" && grep -q "^MMA TESTS FAILED (exit 1): the later stages run with KVCPT_ATTN=cuda-core" "$s" &&
    grep -q "^KVCPT_ATTN=cuda-core: the tensor-core tests failed (exit 1) in the tests stage" "$s" &&
    grep -q "^attention T 40 mask L 32 K 4: bf16 attention cuda-core " "$s" && grep -q "^(attention: exit 0, " "$s"; then
    ok "a failing tensor-core test: the attention stage runs with KVCPT_ATTN=cuda-core and says why"
else fail "mma fallback" "$(cat "$s")"; fi
if grep -q "^CUDA libraries on LD_LIBRARY_PATH, in this order: $tmp/site/nvidia/cudnn/lib (libcudnn) $tmp/site/nvidia/nccl/lib (libnccl) (no .*: the python's nvidia wheels" "$s"; then
    ok "no CUDA install: the python's nvidia/*/lib directories, said in the summary"
else fail "library search, wheels only" "$(grep -i 'librar' "$s")"; fi

# a budget smaller than the first stage's limit: every stage skipped, none run past it
out=$(KVCPT_SESSION_BUDGET=5 OUT="$tmp/out-short" KVCPT_SESSION_WORK="$tmp/work" bash scripts/gpu_session.sh --dry-run call1 2>&1)
if [ "$(grep -c 'skipped, its limit' <<<"$out")" = 5 ] && ! grep -q '^(setup: exit' <<<"$out"; then
    ok "a 5 s budget skips all five stages of call1, saying why"
else fail "budget skip" "$out"; fi
