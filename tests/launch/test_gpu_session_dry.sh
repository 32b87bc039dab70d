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
. "$(dirname "$0")/../lib.sh" || exit 1
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
        KVCPT_SESSION_WORK="$tmp/work" KVCPT_SESSION_PARTS="$tmp/carry" bash scripts/gpu_session.sh --dry-run "$1" >"$tmp/$1.log" 2>&1
}

# the real model's journey, on a stand-in: a tiny GGUF (tests/gguf_tiny.py,
# a byte-level tokenizer) and a corpus of 40 documents, split over 3 calls;
# each call's directory is "carried" (copied to $tmp/carry, as the device
# tool's carry list brings it) and staged: call 1 by the session's call1,
# call 2 by a parts-only command, call 3 by call2, whose realmodel stage
# joins, checks, converts and runs launch/realmodel.sh on the emulated GPU
G=$tmp/gguf PT=$tmp/parts ST=$tmp/work/model-parts
mkdir -p "$G/corpus"
/usr/bin/python3 tests/gguf_tiny.py "$G/m.gguf" --all-bytes
python3 -c '
import json, random
r = random.Random(5)
for i in range(40):
    print(json.dumps({"text": " ".join("".join(r.choice("abcdefghij") for _ in range(r.randint(2, 7))) for _ in range(60))}))' |
    zstd -q >"$G/corpus/stand-in.jsonl.zst"
gsize=$(stat -c %s "$G/m.gguf") csize=$(stat -c %s "$G/corpus/stand-in.jsonl.zst")
bash scripts/gpu_model_parts.sh split --gguf "$G/m.gguf" --corpus "$G/corpus" --out "$PT" \
    --room $(((gsize + csize) / 3 + 1)) >"$tmp/split.log" 2>&1
if [ "$(ls "$PT")" = "$(printf 'call-1\ncall-2\ncall-3\nmanifest.tsv')" ] &&
    [ "$(awk -F'\t' '$2 == "part" { print $1 }' "$PT/manifest.tsv" | paste -sd,)" = 1,2,3 ] &&
    cmp -s "$G/m.gguf" <(cat "$PT"/call-*/m.gguf.part-*) &&
    grep -q "^3	whole	m.gguf	$gsize	$(sha256sum "$G/m.gguf" | cut -d' ' -f1)$" "$PT/manifest.tsv"; then
    ok "gpu_model_parts.sh split: the stand-in GGUF in 3 parts over 3 calls, the corpus in call 1, each part's and the whole's sha256"
else fail "model parts split" "$(cat "$tmp/split.log" "$PT/manifest.tsv")"; fi
carry() { rm -rf "$tmp/carry" && mkdir -p "$tmp/carry" && cp -r "$PT/manifest.tsv" "$PT/call-$1" "$tmp/carry/"; }
flip() { printf '\x5a' | dd of="$1" bs=1 seek=3 conv=notrunc status=none; } # one byte of FILE changed
# a part changed in transit is refused on arrival, naming it
carry 2
flip "$tmp/carry/call-2/m.gguf.part-02"
if out=$(bash scripts/gpu_model_parts.sh add --from "$tmp/carry" --stage "$tmp/stage-bad" 2>&1); then fail "corrupt carried part" "accepted: $out"
elif grep -q "m.gguf.part-02 is corrupt" <<<"$out" && [ ! -e "$tmp/stage-bad/m.gguf.part-02" ]; then
    ok "gpu_model_parts.sh add refuses a part whose sha256 is not the manifest's, naming it"
else fail "corrupt carried part" "$out"; fi
carry 1

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

if grep -q "^staged 2 files in $ST; still missing: m.gguf.part-02 (call 2) m.gguf.part-03 (call 3)" "$tmp/out-call1/call1-summary.md"; then
    ok "call1 carrying call 1's directory stages the corpus and part 1 and names what is missing"
else fail "call1 staging" "$(grep -i staged "$tmp/out-call1/call1-summary.md")"; fi
carry 2
bash scripts/gpu_model_parts.sh add --from "$tmp/carry" --stage "$ST" >"$tmp/add2.log" 2>&1
if out=$(bash scripts/gpu_model_parts.sh join --stage "$ST" --to "$tmp/never" --kvcpt "$E" 2>&1); then fail "join, part missing" "accepted: $out"
elif grep -q "part m.gguf.part-03 is missing from $ST (call 3 carries it)" <<<"$out" && [ ! -e "$tmp/never" ]; then
    ok "gpu_model_parts.sh join refuses while a part is missing, naming it and its call"
else fail "join, part missing" "$(cat "$tmp/add2.log") $out"; fi
# a part changed after staging: the join's own sha256 check refuses it
cp -r "$ST" "$tmp/stage-rot" && cp "$PT/call-3/m.gguf.part-03" "$tmp/stage-rot/" && flip "$tmp/stage-rot/m.gguf.part-01"
if out=$(bash scripts/gpu_model_parts.sh join --stage "$tmp/stage-rot" --to "$tmp/never" --kvcpt "$E" 2>&1); then fail "join, corrupt part" "accepted: $out"
elif grep -q "part m.gguf.part-01 is corrupt" <<<"$out" && [ ! -e "$tmp/never" ] && [ ! -e "$tmp/stage-rot/m.gguf" ]; then
    ok "gpu_model_parts.sh join refuses a staged part whose sha256 changed, naming it, and leaves no joined file"
else fail "join, corrupt part" "$out"; fi
carry 3
run_and_check call2 setup realmodel train eval bench decode ranks
if grep -q "^staged 1 files in $ST; every part and corpus file is staged: join" "$s" &&
    grep -q "^joined m.gguf ($gsize bytes, sha256 " "$s" && grep -q "^converted to $tmp/work/smollm2-135m (.*model.safetensors" "$s" &&
    grep -q "^launch/realmodel.sh (CONTEXTS=32 S=8 .* DEVICE=cuda ARMS=mask,causal SEEDS=1, model $tmp/work/smollm2-135m, corpus $ST/corpus): exit 0" "$s" &&
    grep -q '^CPT mask, last step: "step":1 "loss":[0-9.]* "tokens_per_s"' "$s" && grep -q '^CPT causal, last step: "step":1 ' "$s" &&
    grep -q '^### L = 32' "$s"; then
    ok "call2 dry run: the parts joined, checked and converted; realmodel's mask and causal CPT and the evals before and after on the emulated GPU"
else fail "call2 realmodel" "$(sed -n '/^## realmodel/,/^(realmodel:/p' "$s" | head -30)"; fi
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
