#!/usr/bin/env bash
# `kvcpt bench model`'s PyTorch peer (scripts/bench_torch_model.py): the JSON
# carries both rates and their ratio, built from the same model (same
# parameter count, the class of the config's family); the text output shows both (from a stand-in interpreter);
# a missing interpreter or a failing peer is reported and kvcpt's figure
# still printed; --no-peers leaves the peer out; the peer's RefreshKV
# attention gives tests/torch_ref.py's loss on the same weights. No timing
# is asserted.
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
jl() { grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'; }
positive() { awk -v x="$1" 'BEGIN { exit !(x + 0 > 0) }'; }
if ! python_has "$PY" torch transformers; then
    echo "FAIL - bench model peer: $PY lacks torch or transformers; run 'make setup'"
    exit 1
fi

# with the RefreshKV mask, so that the peer's masked attention runs too
out=$(OMP_NUM_THREADS=1 KVCPT_PYTHON="$PY" $K bench model --preset tiny --device cpu --seq 40 --L 32 --batch 2 --steps 1 --warmup 1 \
    --json 2>"$tmp/err")
kv=$(jl tokens_per_s <<<"$out"); pt=$(jl torch_tokens_per_s <<<"$out"); ratio=$(jl kvcpt_over_torch <<<"$out")
if positive "$kv" && positive "$pt" && positive "$ratio" && [ "$(jl params <<<"$out")" = "$(jl torch_params <<<"$out")" ] &&
   [ "$(jl torch_class <<<"$out")" = LlamaForCausalLM ]; then
    ok "bench model --json: kvcpt $kv and PyTorch $pt tokens/s, ratio $ratio, same parameter count, the peer a LlamaForCausalLM"
else fail "bench model --json with the peer" "$out $(tail -3 "$tmp/err")"; fi

# the FLOP split of that step, from the tiny preset (2 layers, 4 query heads,
# head dim 8, vocab 64 x hidden 32 untied): matmuls 6 (N - embedding) per
# token; attention 12 * layers * Hq * D per visited (query, key) pair, with
# L = 32, K = L/8 = 4 selected keys: rows 0..31 visit 1..32 keys (528 pairs),
# rows 32..39 the 4 selected plus 1..8 local ones (68)
mm=$(jl matmul_flops_per_step <<<"$out"); at=$(jl attention_flops_per_step <<<"$out"); np=$(jl params <<<"$out")
if awk -v mm="$mm" -v at="$at" -v n="$np" 'BEGIN { tok = 2 * 40; emm = 6 * (n - 64 * 32) * tok; eat = 12 * 2 * 4 * 8 * (528 + 68) * 2
        exit !(mm != "" && at != "" && (mm - emm) ^ 2 <= (1e-6 * emm) ^ 2 && (at - eat) ^ 2 <= (1e-6 * eat) ^ 2) }'; then
    ok "bench model --json: model FLOPs per step split into matmuls ($mm) and attention ($at) as the architecture says"
else fail "bench model FLOP split" "matmul $mm, attention $at, params $np: $out"; fi

# the text output, from a stand-in interpreter that prints a fixed result line
cat >"$tmp/stub-python" <<'STUB'
#!/bin/sh
echo '{"tokens_per_s": 50.0, "forward_ms": 1.0, "backward_ms": 2.0, "loss": 4.0, "params": 19616, "torch": "stub"}'
STUB
chmod +x "$tmp/stub-python"
text=$($K bench model --preset tiny --device cpu --seq 16 --steps 1 --warmup 0 --python "$tmp/stub-python" 2>"$tmp/err")
if grep -q 'tokens/s fwd+bwd' <<<"$text" && grep -q 'model FLOPs per step: .* = matmuls .* + attention .*%' <<<"$text" && grep -q 'PyTorch stub .*: 50.0 tokens/s.*kvcpt / PyTorch = [0-9.]*x' <<<"$text"; then
    ok "bench model text: both rates and the ratio"
else fail "bench model text with the peer" "$text $(tail -3 "$tmp/err")"; fi
printf '#!/bin/sh\necho Traceback >&2\necho "RuntimeError: out of memory" >&2\nexit 1\n' >"$tmp/bad-python"
chmod +x "$tmp/bad-python"
out=$($K bench model --preset tiny --device cpu --seq 16 --steps 1 --warmup 0 --python "$tmp/bad-python" --json 2>"$tmp/err")
if [ $? -eq 0 ] && grep -q '"torch_tokens_per_s":null' <<<"$out" && grep -q 'failed: RuntimeError: out of memory' <<<"$out"; then
    ok "a failing peer: its last error line is reported, kvcpt's figure printed alone"
else fail "a failing peer" "$out $(tail -3 "$tmp/err")"; fi

out=$($K bench model --preset tiny --device cpu --seq 16 --steps 1 --warmup 0 --python "$tmp/no-python" --json 2>"$tmp/err")
rc=$?
if [ $rc -eq 0 ] && positive "$(jl tokens_per_s <<<"$out")" && grep -q '"torch_tokens_per_s":null' <<<"$out" &&
    grep -q '"kvcpt_over_torch":null' <<<"$out" && grep -q "no-python not found" <<<"$out"; then
    ok "a missing interpreter is reported (torch_why) and kvcpt's figure printed alone"
else fail "missing interpreter" "rc $rc: $out $(tail -3 "$tmp/err")"; fi

text=$($K bench model --preset tiny --device cpu --seq 16 --steps 1 --warmup 0 --python "$tmp/no-python" 2>&1)
if [ $? -eq 0 ] && grep -q "PyTorch peer: .*no-python not found.*kvcpt's figure alone" <<<"$text"; then
    ok "a missing interpreter, text output: said so"
else fail "missing interpreter, text output" "$text"; fi

out=$($K bench model --preset tiny --device cpu --seq 16 --steps 1 --warmup 0 --no-peers --json 2>"$tmp/err")
if positive "$(jl tokens_per_s <<<"$out")" && ! grep -q torch <<<"$out"; then
    ok "--no-peers: no PyTorch fields"
else fail "--no-peers" "$out"; fi

# The peer's masked attention against the oracle's dense mask, float64, same weights.
if "$PY" - >"$tmp/parity" 2>&1 <<'EOF'; then
import sys
sys.path[:0] = ["tests", "scripts"]
import torch
import torch_ref  # float64 default dtype
import bench_torch_model as peer
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
cfg = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-5,
       "rope_theta": 10000.0, "max_position_embeddings": 4096, "tie_word_embeddings": False,
       "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 64}}
torch.manual_seed(0)
tok = torch.randint(0, 64, (2, 40))
tgt = torch.cat([tok[:, 1:], torch.full((2, 1), -1)], 1)
worst = 0.0
for agg in ["max", "mean", "first"]:
    AttentionInterface.register("peer_test", peer.refreshkv_attention({"L": 32, "K": 5, "pool": 7, "agg": agg}))
    c = LlamaConfig(**cfg)
    c._attn_implementation = "peer_test"
    m = LlamaForCausalLM(c).double()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3)
    loss = torch.nn.functional.cross_entropy(m(input_ids=tok).logits.view(-1, 64), tgt.reshape(-1), ignore_index=-1)
    P = {n: p.detach() for n, p in m.named_parameters()}
    _, ref, _ = torch_ref.forward(P, tok, tgt, cfg, {"L": 32, "K": 5, "pool_kernel": 7, "agg": agg}, 40)
    causal = torch_ref.forward(P, tok, tgt, cfg, None, 40)[1].item()
    assert abs(ref.item() - causal) > 1e-6, "the mask changes nothing here"
    worst = max(worst, abs(loss.item() - ref.item()))
print(f"{worst:.2e}")
sys.exit(0 if worst < 1e-7 else 1)
EOF
    ok "the peer's RefreshKV attention gives torch_ref's loss (agg max, mean, first; worst |d| $(tail -1 "$tmp/parity"))"
else fail "the peer's RefreshKV attention vs torch_ref" "$(tail -3 "$tmp/parity")"; fi
