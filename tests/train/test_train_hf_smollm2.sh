#!/usr/bin/env bash
# A trained model opens in transformers with no convert step: two CPT steps
# of SmolLM2-135M (`make setup`; init=pretrained, RefreshKV mask, L 24, S 8,
# K 8, on the repository's own docs prepared with `prepare --model`), its
# out/model written in 3 shards (model_shard_size=200MB) with an index, and
#   - AutoTokenizer.from_pretrained(out/model) gives the ids
#     `kvcpt tokenize --tokenizer out/model/tokenizer.json` gives, on every
#     document and on a line of mixed scripts, digits and white space;
#   - AutoModelForCausalLM.from_pretrained(out/model) loads it with no
#     missing, unexpected or mismatched key, tied, holding the trained (not
#     the pretrained) weights, and its logits on 2 x 32 ids of the text equal
#     kvcpt's CPU forward of the same directory (dump_model_case, K = L:
#     causal attention) within 5e-4 + 1e-4 |ref| (30 fp32 layers, as
#     tests/launch/test_realmodel.sh); generation_config.json loads.
# Skips when the model or the Python modules are missing.
. "$(dirname "$0")/../lib.sh" || exit 1
M=${KVCPT_REAL_MODEL:-third_party/models/smollm2-135m}
py=${KVCPT_PYTHON:-third_party/venv/bin/python}
dump=build/tests/tools/dump_model_case
if ! python_has "$py" transformers torch numpy safetensors; then
    echo "skip - trained SmolLM2 in transformers: $py lacks transformers, torch, numpy or safetensors (make setup)"
    exit 0
fi
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    [ -f "$M/$f" ] || { echo "skip - trained SmolLM2 in transformers: $M/$f is missing (make setup converts the model)"; exit 0; }
done
[ -x "$dump" ] || { fail "trained SmolLM2 in transformers" "$dump is not built (make build/tests/tools/dump_model_case)"; exit 0; }
export OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1

"$py" - "$tmp/docs.jsonl" <<'PY'
import glob, json, sys
with open(sys.argv[1], "w") as f:
    for p in sorted(glob.glob("docs/*.md"))[:12]:
        f.write(json.dumps({"text": open(p, encoding="utf-8").read()[:3000]}) + "\n")
    f.write(json.dumps({"text": "The capital of France is Paris. Ünïcödé, 日本語, Ελληνικά: 1234567 + 89 = ?\n\t  done  "}) + "\n")
PY
if ! $K prepare --model "$M" --input "$tmp/docs.jsonl" --out "$tmp/data" --min-tokens 33 --threads 2 >"$tmp/prep.log" 2>&1; then
    fail "trained SmolLM2: prepare --model" "$(tail -3 "$tmp/prep.log")"; exit 0
fi
out="$tmp/r/model"
if $K train --set model="$M" --set init=pretrained --set data="$tmp/data" --set mask=1 --set L=24 --set S=8 --set K=8 \
        --set steps=2 --set warmup_steps=1 --set global_batch=1 --set micro_batch=1 --set eval_batches=0 \
        --set lr=1e-4 --set model_shard_size=200MB --set out="$tmp/r" >"$tmp/train.log" 2>&1 &&
   [ -s "$out/model.safetensors.index.json" ] && [ "$(ls "$out" | grep -c '^model-0000[1-3]-of-00003\.safetensors$')" = 3 ] &&
   [ ! -e "$out/model.kvcpt" ] && cmp -s "$out/tokenizer.json" "$M/tokenizer.json" && [ -s "$out/generation_config.json" ]; then
    ok "trained SmolLM2: out/model holds config.json, 3 shards with their index, generation_config.json and the model's tokenizer"
else fail "trained SmolLM2: train" "$(ls "$out" 2>&1 | tr '\n' ' ') $(tail -3 "$tmp/train.log")"; exit 0; fi

$K tokenize --tokenizer "$out/tokenizer.json" --jsonl <"$tmp/docs.jsonl" >"$tmp/ids.txt" 2>"$tmp/tok.err" ||
    { fail "trained SmolLM2: kvcpt tokenize" "$(cat "$tmp/tok.err")"; exit 0; }
# 2 x 32 ids of the first document: the tokens of kvcpt's forward
"$py" -c 'import sys, numpy as np
ids = [int(x) for x in open(sys.argv[1]).readline().split()][:64]
assert len(ids) == 64, len(ids)
np.array(ids, dtype="<i4").tofile(sys.argv[2])' "$tmp/ids.txt" "$tmp/tokens.i32" &&
    "$dump" "$tmp/case" 1 - max cpu 24 "$out" 0 0 "$tmp/tokens.i32" 24 8 >"$tmp/case.log" 2>&1 ||
    { fail "trained SmolLM2: kvcpt's forward" "$(tail -3 "$tmp/case.log")"; exit 0; }

"$py" - "$out" "$M" "$tmp/docs.jsonl" "$tmp/ids.txt" "$tmp/case" <<'PY' 2>"$tmp/py.err" | sed 's/^\(ok\|FAIL\) - /\1 - trained SmolLM2: /'
import json, os, sys
import torch
sys.path.insert(0, "tests")
import hf_compare as h
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
out, pre, docs, ids_path, case_dir = sys.argv[1:6]
r = h.Report()
tok = AutoTokenizer.from_pretrained(out)
texts = [json.loads(l)["text"] for l in open(docs, encoding="utf-8")]
ours = [[int(x) for x in l.split()] for l in open(ids_path)]
bad = [i for i, (t, o) in enumerate(zip(texts, ours)) if tok(t)["input_ids"] != o]
r(len(ours) == len(texts) and not bad,
  f"AutoTokenizer ({type(tok).__name__}) gives kvcpt tokenize's ids on all {len(texts)} texts",
  f"{len(ours)} id lines for {len(texts)} texts; texts {bad} differ")
model, info = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                                   output_loading_info=True)
problems = {k: v for k, v in info.items() if v}
r(not problems and type(model).__name__ == "LlamaForCausalLM",
  f"AutoModelForCausalLM loads {type(model).__name__} from the 3 shards with no missing, unexpected or mismatched key",
  f"loading info {problems}")
r(model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "tied, as SmolLM2")
with safe_open(os.path.join(pre, "model.safetensors"), "pt") as f:
    pre_emb = f.get_tensor("model.embed_tokens.weight").float()
r(not torch.equal(model.model.embed_tokens.weight, pre_emb), "the weights are the trained ones, not the pretrained model's")
h.compare_case_logits(case_dir, model, r, "transformers' logits equal kvcpt's forward of out/model on 2 x 32 ids of the text")
g = GenerationConfig.from_pretrained(out)
r(g.eos_token_id == model.config.eos_token_id, f"generation_config.json loads (eos {g.eos_token_id})")
sys.exit(1 if r.failed else 0)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL - trained SmolLM2 in transformers"; tail -5 "$tmp/py.err"; }
