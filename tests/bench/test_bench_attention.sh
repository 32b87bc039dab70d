#!/usr/bin/env bash
# `kvcpt bench attention` on the emulated GPU (build/emu/kvcpt): the JSON
# carries each kernel family's forward and backward times (the fp32
# engine's, and the bf16 engine's tensor-core instantiation on bf16 inputs,
# with the backward variant the engine does not run timed beside it, and
# cuDNN's fused attention where it runs: the stand-in here; --attn cudnn
# makes it the bf16 row; --help names the three implementations)
# and the forward FLOPs the mask visits (checked against the arithmetic
# below), the SDPA peer's times when its interpreter prints them (a
# stand-in here: the real peer needs a GPU) or why it has none, and the
# ratio of the bf16 kernels' rate to SDPA's (checked against the times);
# the native binary without a visible GPU says so. No timing is asserted.
. "$(dirname "$0")/../lib.sh" || exit 1
E=build/emu/kvcpt
jl() { grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'; }
positive() { awk -v x="$1" 'BEGIN { exit !(x + 0 > 0) }'; }
if [ ! -x "$E" ]; then
    echo "skip - bench attention: $E is not built (make test builds it)"
    exit 0
fi
shape=(--batch 2 --seq 40 --heads 4 --kv-heads 2 --head-dim 16 --reps 1)

# with the mask, L = 32, K = 4: rows 0..31 visit 1..32 keys (528 pairs), rows
# 32..39 the 4 selected plus 1..8 local ones (68); 4 D FLOPs per pair and
# (batch row, query head): 4 * 16 * 2 * 4 * 596
cat >"$tmp/stub-python" <<'STUB'
#!/bin/sh
echo '{"bench": "attention_torch", "torch": "stub", "forward_ms": 2.0, "backward_ms": 5.0}'
STUB
chmod +x "$tmp/stub-python"
out=$("$E" bench attention "${shape[@]}" --L 32 --K 4 --python "$tmp/stub-python" --json 2>"$tmp/err")
rc=$?
if [ $rc -eq 0 ] && [ "$(jl forward_flops <<<"$out")" = "3.051520e+05" ] && positive "$(jl fp32_forward_ms <<<"$out")" &&
    positive "$(jl fp32_backward_ms <<<"$out")" && positive "$(jl bf16_forward_ms <<<"$out")" &&
    positive "$(jl bf16_backward_ms <<<"$out")" && positive "$(jl select_ms <<<"$out")" &&
    { positive "$(jl bf16_one_pass_backward_ms <<<"$out")" || positive "$(jl bf16_two_pass_backward_ms <<<"$out")"; } &&
    [ "$(jl torch_forward_ms <<<"$out")" = "2.0000" ] && [ "$(jl torch_backward_ms <<<"$out")" = "5.0000" ] &&
    [ "$(jl mask_L <<<"$out")" = 32 ] && ! grep -q '"mma_' <<<"$out" && positive "$(jl cudnn_forward_ms <<<"$out")" &&
    positive "$(jl cudnn_backward_ms <<<"$out")" && grep -q "\"cudnn_forward_tflops\":" <<<"$out"; then
    ok "bench attention --json (emulated GPU, RefreshKV mask): each kernel's times (the other backward variant's and cuDNN's too), the visited pairs' FLOPs, the peer's times"
else fail "bench attention with the mask" "rc $rc: $out $(tail -3 "$tmp/err")"; fi

# the ratio is the bf16 kernels' TFLOP/s (visited pairs, 3.05152e5 FLOPs)
# over SDPA's (causal, 4 * 16 * 2 * 4 * 820 = 419840 FLOPs) from the times
if awk -v f="$(jl bf16_forward_ms <<<"$out")" -v b="$(jl bf16_backward_ms <<<"$out")" \
    -v rf="$(jl bf16_vs_sdpa_forward <<<"$out")" -v rb="$(jl bf16_vs_sdpa_backward <<<"$out")" 'BEGIN {
        ef = (305152 / f) / (419840 / 2.0); eb = (305152 / b) / (419840 / 5.0)
        exit !(rf > 0 && rb > 0 && (rf - ef) ^ 2 <= (0.01 * ef) ^ 2 && (rb - eb) ^ 2 <= (0.01 * eb) ^ 2) }'; then
    ok "bench attention --json: bf16_vs_sdpa_forward/backward are the bf16 kernels' rate over the peer's ($(jl bf16_vs_sdpa_forward <<<"$out"), $(jl bf16_vs_sdpa_backward <<<"$out"))"
else fail "bench attention ratio to SDPA" "$out"; fi

# without --python and KVCPT_PYTHON, and no venv beside the binary: python3
mkdir -p "$tmp/bin"
cat >"$tmp/bin/python3" <<'STUB'
#!/bin/sh
echo '{"bench": "attention_torch", "torch": "path-python3", "forward_ms": 1.0, "backward_ms": 1.0}'
STUB
chmod +x "$tmp/bin/python3"
cp "$E" "$tmp/kvcpt-alone" && mkdir -p "$tmp/scripts" && cp scripts/bench_attention_torch.py "$tmp/scripts/"
out=$(env -u KVCPT_PYTHON PATH="$tmp/bin:$PATH" "$tmp/kvcpt-alone" bench attention "${shape[@]}" --L 0 --json 2>"$tmp/err")
if [ $? -eq 0 ] && grep -q '"torch_version":"path-python3"' <<<"$out"; then
    ok "bench attention without --python, KVCPT_PYTHON or a venv runs the peer with python3 from PATH"
else fail "bench attention default python3" "$out $(tail -3 "$tmp/err")"; fi
out=$(KVCPT_PYTHON="$tmp/stub-python" PATH="$tmp/bin:$PATH" "$tmp/kvcpt-alone" bench attention "${shape[@]}" --L 0 --json 2>"$tmp/err")
if [ $? -eq 0 ] && grep -q '"torch_version":"stub"' <<<"$out"; then
    ok "bench attention takes KVCPT_PYTHON over python3"
else fail "bench attention KVCPT_PYTHON" "$out $(tail -3 "$tmp/err")"; fi

# the eval cache's mask, evict 1, restride 4: rows 35 and 39 are full (36
# and 40 keys); every other row from 32 on keeps 4 - (p - since) selected
# keys plus p - since + 1 local ones, 5 in all (since 32, then 36):
# 528 + 3 * 5 + 36 + 3 * 5 + 40 = 634 pairs; 4 * 16 * 2 * 4 * 634
out=$("$E" bench attention "${shape[@]}" --L 32 --K 4 --evict 1 --restride 4 --no-peers --json 2>"$tmp/err")
rc=$?
if [ $rc -eq 0 ] && [ "$(jl forward_flops <<<"$out")" = "3.246080e+05" ] && [ "$(jl mask_evict <<<"$out")" = 1 ] &&
    [ "$(jl mask_restride <<<"$out")" = 4 ] && positive "$(jl fp32_backward_ms <<<"$out")" &&
    positive "$(jl bf16_backward_ms <<<"$out")" && positive "$(jl select_ms <<<"$out")" &&
    grep -q '"cudnn_skipped":"[^"]*mask_evict' <<<"$out" && ! grep -q '"cudnn_forward_ms"' <<<"$out"; then
    ok "bench attention --json --evict 1 --restride 4 (per-row records): the rows' own key counts in the FLOPs, each kernel's times, cuDNN's row skipped saying why"
else fail "bench attention evict/restride" "rc $rc: $out $(tail -3 "$tmp/err")"; fi

# plain causal: T (T + 1) / 2 = 820 pairs; the real peer without a GPU says why
out=$("$E" bench attention "${shape[@]}" --L 0 --json 2>"$tmp/err")
rc=$?
if [ $rc -eq 0 ] && [ "$(jl forward_flops <<<"$out")" = "4.198400e+05" ] && [ "$(jl mask_L <<<"$out")" = 0 ] &&
    { grep -q '"torch_forward_ms":null,"torch_why":".*no CUDA device' <<<"$out" || positive "$(jl torch_forward_ms <<<"$out")"; }; then
    ok "bench attention --json, causal: the pairs' FLOPs; the SDPA peer's times or why it has none ($(jl torch_why <<<"$out" | cut -c1-120))"
else fail "bench attention causal" "rc $rc: $out $(tail -3 "$tmp/err")"; fi

text=$("$E" bench attention "${shape[@]}" --L 32 --K 4 --no-peers 2>&1)
if [ $? -eq 0 ] && grep -q "fp32 .*forward .* ms .*backward .* ms" <<<"$text" &&
    grep -q "bf16 .*bf16 in, mma.sync on tensor cores.*forward .* ms .*backward .* ms" <<<"$text" && grep -q "selection (L 32, K 4, evict 0, restride 0)" <<<"$text" &&
    ! grep -q PyTorch <<<"$text"; then
    ok "bench attention text output, --no-peers: kernel lines, the selection, no peer"
else fail "bench attention text" "$text"; fi

# which implementation the bf16 row ran, and the tensor-core forward's tile
rows=$(jl bf16_attn_forward_rows <<<"$out")
if grep -qE "the bf16 row runs attn mma: forward (64|128)-row query tiles \((4|8) warps\), backward (two|one)_pass" <<<"$text" &&
    [ "$(jl bf16_attn <<<"$out")" = mma ] && { [ "$rows" = 64 ] || [ "$rows" = 128 ]; } &&
    grep -q "forward $rows-row query tiles" <<<"$text"; then
    ok "bench attention names the implementation it ran: $(grep -o 'the bf16 row runs.*' <<<"$text")"
else fail "bench attention implementation" "json bf16_attn '$(jl bf16_attn <<<"$out")' rows '$rows'; text: $text"; fi
text=$(KVCPT_ATTN=cuda-core "$E" bench attention "${shape[@]}" --L 0 --no-peers 2>&1)
out=$(KVCPT_ATTN=cuda-core "$E" bench attention "${shape[@]}" --L 0 --no-peers --json 2>&1)
if grep -q "the bf16 row runs attn cuda-core" <<<"$text" && [ "$(jl bf16_attn <<<"$out")" = cuda-core ] &&
    [ "$(jl bf16_attn_forward_rows <<<"$out")" = null ]; then
    ok "bench attention with KVCPT_ATTN=cuda-core names cuda-core"
else fail "bench attention cuda-core" "$text $out"; fi
# --attn cudnn: the bf16 row is cuDNN's (no separate cudnn row); --help names the implementations
text=$("$E" bench attention "${shape[@]}" --L 32 --K 4 --no-peers --attn cudnn 2>&1)
if [ $? -eq 0 ] && grep -q "bf16 .*attn cudnn: cuDNN's fused SDPA.*forward .* ms .*backward .* ms" <<<"$text" &&
    ! grep -q "^  cudnn " <<<"$text"; then
    ok "bench attention --attn cudnn: the bf16 row runs cuDNN's fused attention (the stand-in here) and names it"
else fail "bench attention --attn cudnn" "$text"; fi
help=$("$E" bench attention --help 2>&1)
if grep -q "mma (tensor cores" <<<"$help" && grep -q "cuda-core (the fp32 engine" <<<"$help" && grep -q "cudnn (cuDNN's fused SDPA" <<<"$help"; then
    ok "bench attention --help names the implementations: mma, cuda-core, cudnn"
else fail "bench attention --help" "$help"; fi

if ! $K --version | grep -qE "visible devices: [1-9]"; then
    out=$($K bench attention "${shape[@]}" 2>&1)
    if [ $? -ne 0 ] && grep -q "bench attention: \(no CUDA device is visible\|this binary was built without the CUDA backend\)" <<<"$out"; then
        ok "the native binary without a GPU refuses, saying why"
    else fail "native bench attention without a GPU" "$out"; fi
fi
