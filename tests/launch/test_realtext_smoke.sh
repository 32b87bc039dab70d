#!/usr/bin/env bash
# launch/realtext.sh (the real-text pipeline) at smoke sizes on CPU:
# Llama 3.1 tokenizer on the shipped corpus -> pretrain -> RefreshKV CPT ->
# eval of every policy, before -> after; a second run finds every stage done.
set -u
cd "$(dirname "$0")/../.."
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/model.json" <<'JSON'
{"vocab_size": 128256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true,
 "bos_token_id": 128000, "eos_token_id": 128001, "max_position_embeddings": 4096}
JSON
smoke=(env OUT="$tmp/rt" L=128 S=8 PRE_STEPS=2 CPT_STEPS=2 WARMUP=1 BATCH=2 CONTEXTS=128 EVAL_DOCS=2 MODEL="$tmp/model.json")
if "${smoke[@]}" launch/realtext.sh >"$tmp/a.log" 2>&1 && python3 - "$tmp/rt/eval/eval.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
text = json.dumps(e)
for p in ("full", "streaming", "h2o", "snapkv", "tova", "refreshkv", "restkv", "kvec"):
    assert '"%s' % p in text, p
PY
then ok "realtext.sh smoke: prepare (Llama 3.1 tokenizer) -> pretrain -> CPT -> every policy before -> after"
else fail "realtext.sh smoke" "$(tail -3 "$tmp/a.log")"; fi
before=$(md5sum < "$tmp/rt/cpt/model/model.safetensors")
"${smoke[@]}" launch/realtext.sh >"$tmp/b.log" 2>&1
if grep -q "done already" "$tmp/b.log" && [ "$(md5sum < "$tmp/rt/cpt/model/model.safetensors")" = "$before" ]; then
    ok "realtext.sh run again: every stage found done, nothing retrained"
else fail "realtext.sh rerun" "$(tail -3 "$tmp/b.log")"; fi
