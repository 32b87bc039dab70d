#!/usr/bin/env bash
# `kvcpt bench attention` on the emulated GPU (build/emu/kvcpt): the JSON
# carries each kernel family's forward and backward times (fp32 and
# tensor-core) and the forward
# FLOPs the mask visits (checked against the arithmetic below), the SDPA
# peer's times when its interpreter prints them (a stand-in here: the real
# peer needs a GPU) or why it has none; the native binary without a visible
# GPU says so. No timing is asserted.
. "$(dirname "$0")/lib.sh"
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
    positive "$(jl fp32_backward_ms <<<"$out")" && positive "$(jl mma_forward_ms <<<"$out")" &&
    positive "$(jl mma_backward_ms <<<"$out")" && positive "$(jl select_ms <<<"$out")" &&
    [ "$(jl torch_forward_ms <<<"$out")" = "2.0000" ] && [ "$(jl torch_backward_ms <<<"$out")" = "5.0000" ] &&
    [ "$(jl mask_L <<<"$out")" = 32 ]; then
    ok "bench attention --json (emulated GPU, RefreshKV mask): each kernel's times, the visited pairs' FLOPs, the peer's times"
else fail "bench attention with the mask" "rc $rc: $out $(tail -3 "$tmp/err")"; fi

# the eval cache's mask, evict 1, restride 4: rows 35 and 39 are full (36
# and 40 keys); every other row from 32 on keeps 4 - (p - since) selected
# keys plus p - since + 1 local ones, 5 in all (since 32, then 36):
# 528 + 3 * 5 + 36 + 3 * 5 + 40 = 634 pairs; 4 * 16 * 2 * 4 * 634
out=$("$E" bench attention "${shape[@]}" --L 32 --K 4 --evict 1 --restride 4 --no-peers --json 2>"$tmp/err")
rc=$?
if [ $rc -eq 0 ] && [ "$(jl forward_flops <<<"$out")" = "3.246080e+05" ] && [ "$(jl mask_evict <<<"$out")" = 1 ] &&
    [ "$(jl mask_restride <<<"$out")" = 4 ] && positive "$(jl fp32_backward_ms <<<"$out")" &&
    positive "$(jl mma_backward_ms <<<"$out")" && positive "$(jl select_ms <<<"$out")"; then
    ok "bench attention --json --evict 1 --restride 4 (per-row records): the rows' own key counts in the FLOPs, each kernel's times"
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
    grep -q "mma .*tensor cores.*forward .* ms .*backward .* ms" <<<"$text" && grep -q "selection (L 32, K 4, evict 0, restride 0)" <<<"$text" &&
    ! grep -q PyTorch <<<"$text"; then
    ok "bench attention text output, --no-peers: kernel lines, the selection, no peer"
else fail "bench attention text" "$text"; fi

if ! $K --version | grep -qE "visible devices: [1-9]"; then
    out=$($K bench attention "${shape[@]}" 2>&1)
    if [ $? -ne 0 ] && grep -q "bench attention: \(no CUDA device is visible\|this binary was built without the CUDA backend\)" <<<"$out"; then
        ok "the native binary without a GPU refuses, saying why"
    else fail "native bench attention without a GPU" "$out"; fi
fi
