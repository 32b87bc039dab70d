#!/usr/bin/env bash
# RefreshKV CPT of the real model (SmolLM2-135M, `make setup`) at test size:
#   - its tied embedding trained as one tensor: on 2 x 64 tokens of real text
#     (prepared by its own tokenizer), kvcpt's loss and the gradient of every
#     tensor equal transformers' (from_pretrained of the same directory, eager
#     attention, fp32; loss the mean next-token cross-entropy, as kvcpt's),
#     the embedding's being the lookup's plus the head's: neither part alone
#     passes the same tolerance;
#   - a CPT run (init=pretrained, the paper's mask at L 128, S 8, K 16; 8-bit
#     AdamW, clip 1.0, global batch 2, 3 steps) sent SIGTERM once its first
#     step is logged (it checkpoints after the step in progress, the second)
#     and resumed equals the uninterrupted run bit for bit (losses of
#     log.jsonl and the final model's bytes);
#   - its result (out/model, Hugging Face safetensors as train writes it) loads with
#     from_pretrained with no missing, unexpected or mismatched key, tied, and
#     gives kvcpt's logits;
#   - launch/realmodel.sh's experiment with its control, at a tiny size: a
#     2-layer model of SmolLM2's vocabulary and tokenizer (random weights,
#     exported as an HF directory) on three corpus files (the first 40
#     documents of each, cut to 4000 characters), CPT of 1 step per arm
#     (mask, causal) and seed (1, 2), 6 test documents: the arms' configs
#     differ only in the mask, the documents come from every file in turn,
#     and cpt-summary.md's mask-over-causal ratios and sign-test counts equal
#     a recomputation from the raw eval.json files (paired by seed and by
#     document); the launcher refuses bad ARMS, PICK, MAX_COPY_SHARE and the
#     retired CPT_MASKS, naming the variable. Needs no transformers.
# Tolerances: loss 1e-4 + 1e-4 |ref|; logits 5e-4 + 1e-4 |ref|; the
# embedding's gradient 1e-4 of its largest |value| + 1e-3 |ref|, every
# other gradient 2e-3 of its tensor's largest |value| + 1e-3 |ref|: at 128
# tokens of text through 30 fp32 layers a few elements of a layer's tensors
# (up to 123 of 331776) differ by up to 1.2e-3 of that maximum (a norm
# weight's, a sum over every position), summation order alone
# (tests/launch/test_realmodel.sh holds every tensor to 1e-4 at 2 x 32 random ids).
. "$(dirname "$0")/../lib.sh" || exit 1
M=${KVCPT_REAL_MODEL:-third_party/models/smollm2-135m}
CORPUS=${KVCPT_SHARED:-../shared}/corpus/books.jsonl.zst
py=${KVCPT_PYTHON:-third_party/venv/bin/python}
dump=build/tests/tools/dump_model_case
L=128; S=8; BUDGET=16; STEPS=3
for f in config.json model.safetensors tokenizer.json; do
    [ -f "$M/$f" ] || { echo "skip - real-model CPT: $M/$f is missing (make setup converts the model)"; exit 0; }
done

# 0. launch/realmodel.sh: the mask arm and its causal control, at a tiny size
for v in "ARMS=mask,bogus|ARMS holds 'bogus'" "PICK=last|PICK holds 'last'" "MAX_COPY_SHARE=1.5|MAX_COPY_SHARE holds '1.5'" \
         "CPT_MASKS=evict|CPT_MASKS is replaced by ARMS"; do
    if o=$(env "${v%%|*}" OUT="$tmp/never" launch/realmodel.sh 2>&1); then fail "realmodel.sh ${v%%|*}" "accepted"
    elif grep -qF "${v#*|}" <<<"$o" && [ ! -e "$tmp/never" ]; then ok "realmodel.sh refuses ${v%%|*} before any work, naming it"
    else fail "realmodel.sh ${v%%|*}" "$o"; fi
done
mkdir -p "$tmp/c3"
for f in books arxiv-latex longdocs; do
    zstd -dc "${KVCPT_SHARED:-../shared}/corpus/$f.jsonl.zst" | head -40 | python3 -c '
import json, sys
for line in sys.stdin:
    print(json.dumps({"text": json.loads(line)["text"][:4000]}))' >"$tmp/c3/$f.jsonl"
done
cat >"$tmp/tiny.json" <<'JSON'
{"vocab_size": 49152, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 8192}
JSON
if ! { $K prepare --input "$tmp/c3" --tokenizer "$M/tokenizer.json" --min-tokens 73 --threads 2 --out "$tmp/c3data" &&
       $K train --set model="$tmp/tiny.json" --set init=random --set data="$tmp/c3data" --set L=64 --set S=8 --set K=8 \
           --set mask=0 --set steps=1 --set warmup_steps=0 --set global_batch=1 --set micro_batch=1 --set out="$tmp/tinyrun" &&
       $K convert --from "$tmp/tinyrun/model" --to "$tmp/tinyhf" --to-format hf && cp "$M/tokenizer.json" "$tmp/tinyhf/"; } \
       >"$tmp/tiny.log" 2>&1; then
    fail "realmodel.sh arms: the tiny model" "$(tail -3 "$tmp/tiny.log")"
elif ! OUT="$tmp/arms" CORPUS="$tmp/c3" MODEL="$tmp/tinyhf" CONTEXTS=64 S=8 EVAL_DOCS=6 QC=5 CPT_STEPS=1 CPT_LR=1e-2 \
        SEEDS=1,2 launch/realmodel.sh >"$tmp/arms.log" 2>&1; then
    fail "realmodel.sh arms" "$(tail -5 "$tmp/arms.log")"
else
    python3 - "$tmp/arms" <<'PY' >"$tmp/arms.chk" 2>&1
import json, math, os, re, statistics, sys
sys.path.insert(0, "scripts")
from paired_stats import sign_test
o = sys.argv[1]
ld = lambda *p: json.load(open(os.path.join(o, *p)))
bad = []
for s in (1, 2):
    cm, cc = ld("cpt-mask-seed%d" % s, "train_config.json"), ld("cpt-causal-seed%d" % s, "train_config.json")
    diff = sorted(k for k in set(cm) | set(cc) if cm.get(k) != cc.get(k))
    if diff != ["mask", "out"] or cm["mask"] != 1 or cc["mask"] != 0:
        bad.append("seed %d: the arms' configs differ in %s (mask %r, %r)" % (s, diff, cm.get("mask"), cc.get("mask")))
    if open(os.path.join(o, "cpt-mask-seed%d/model/model.safetensors" % s), "rb").read() == \
            open(os.path.join(o, "cpt-causal-seed%d/model/model.safetensors" % s), "rb").read():
        bad.append("seed %d: the mask and causal CPT models are the same bytes" % s)
before = ld("eval-64", "eval.json")
r0 = before["results"][0]
srcs = [os.path.basename(x) for x in r0["document_source"]]
if srcs != ["arxiv-latex.jsonl", "books.jsonl", "longdocs.jsonl"] * 2:
    bad.append("the documents' sources are %s, not the three files in turn" % srcs)
ev = {(a, s): {r["policy"]: r for r in ld("cpt-%s-seed%d" % (a, s), "eval-64", "eval.json")["results"]}
      for a in ("mask", "causal") for s in (1, 2)}
summary = open(os.path.join(o, "cpt-summary.md")).read()
head = summary[summary.index("mask over causal, after CPT (the headline)"):summary.index("**Answers at L = 64.**")]
rows = {l.split(" | ")[0][2:]: l.split(" | ") for l in head.splitlines() if l.startswith("| ") and not l.startswith("| variant")}
if len(rows) != len(before["results"]):
    bad.append("the headline has %d rows, the eval %d variants" % (len(rows), len(before["results"])))
for pol in ev[("mask", 1)]:
    # per document: the mean over the seeds of ln(mask / causal), the same seed in both arms
    per_doc = [statistics.fmean(math.log(ev[("mask", s)][pol]["ppl_per_document"][d] /
                                         ev[("causal", s)][pol]["ppl_per_document"][d]) for s in (1, 2))
               for d in range(6)]
    want = "%.4f" % math.exp(statistics.fmean(per_doc))
    _, below, n = sign_test(per_doc)
    got = rows.get(pol, [""] * 6)
    if not got[3].startswith(want + " [") or got[5] != "%d of %d" % (below, n):
        bad.append("%s: the table has %s, %s; recomputed %s, %d of %d" % (pol, got[3], got[5], want, below, n))
changed = sum(1 for pol in ev[("mask", 1)] if not rows[pol][3].startswith("1.0000 "))
if changed == 0:
    bad.append("every ratio reads 1.0000: the arms trained alike")
if "equal recipe: the 4 runs' training configs agree on every key but the arm's" not in summary:
    bad.append("no equal-recipe line")
print("; ".join(bad) if bad else "ok %d variants, %d with a ratio off 1.0000" % (len(rows), changed))
PY
    grep -q "^### L = 64: mask over causal, after CPT (the headline)" "$tmp/arms.log" ||
        echo "the launcher did not print the headline" >>"$tmp/arms.chk"
    case "$(tail -1 "$tmp/arms.chk")" in
    ok*) ok "realmodel.sh arms mask,causal x seeds 1,2: configs differ only in the mask, documents from the three files in turn, cpt-summary.md's mask over causal per policy (printed at the end) equals a recomputation paired by seed and document ($(tail -1 "$tmp/arms.chk"))" ;;
    *) fail "realmodel.sh arms" "$(tail -3 "$tmp/arms.chk")" ;;
    esac
fi

if ! python_has "$py" transformers torch numpy; then
    echo "skip - real-model CPT: $py lacks transformers, torch or numpy (make setup)"
    exit 0
fi
[ -x "$dump" ] || { fail "real-model CPT" "$dump is not built (make test builds it)"; exit 0; }
export OMP_NUM_THREADS=2 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1

zstd -dc "$CORPUS" | head -8 >"$tmp/books.jsonl"
if ! $K prepare --input "$tmp/books.jsonl" --tokenizer "$M/tokenizer.json" --min-tokens $((L + S + 1)) --threads 2 \
        --out "$tmp/data" >"$tmp/prep.log" 2>&1; then
    fail "real-model CPT: prepare" "$(tail -3 "$tmp/prep.log")"; exit 0
fi

# 1. the tied embedding's gradient on real text against transformers'
"$py" - "$tmp/data" "$tmp/tokens.i32" <<'PY' >"$tmp/tok.log" 2>&1
import sys
import numpy as np
sys.path.insert(0, "tests")
from kvpress_peer import read_docs
docs = [d for d in read_docs(sys.argv[1], "train") if len(d) >= 64][:2]
assert len(docs) == 2, "fewer than 2 training documents of 64 tokens"
np.concatenate([d[:64] for d in docs]).astype("<i4").tofile(sys.argv[2])
PY
if [ $? -ne 0 ]; then fail "real-model tied gradient: tokens" "$(tail -3 "$tmp/tok.log")"
elif ! "$dump" "$tmp/case" 1 - max cpu 56 "$M" 0 0 "$tmp/tokens.i32" 56 8 >"$tmp/case.log" 2>&1; then
    fail "real-model tied gradient" "dump_model_case: $(tail -3 "$tmp/case.log")"
else
    "$py" - "$tmp/case" "$M" <<'PY' 2>"$tmp/grad.err" | sed 's/^\(ok\|FAIL\) - /\1 - real model, 2 x 64 tokens of text: /'
import os, sys
import numpy as np
import torch
sys.path.insert(0, "tests")
import hf_compare as h
from transformers import LlamaForCausalLM
d, model_dir = sys.argv[1:3]
case = h.load_case(d)
r = h.Report()
model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
emb, head = model.model.embed_tokens.weight, model.lm_head.weight
r(case["config"]["tie_word_embeddings"] and emb.data_ptr() == head.data_ptr()
  and "lm_head.weight" not in [t["name"] for t in case["tensors"]],
  "the embedding is tied: one tensor in kvcpt's layout and in transformers' model")
h.compare_case(d, case, model, "cpu", r, "train step (B 2, T 64)", logits_atol=5e-4, grad_atol_frac=2e-3)
# the embedding's two parts in transformers: the lookup's (through inputs_embeds)
# and the head's (the tensor's gradient when the lookup is bypassed)
B, T = case["B"], case["T"]
tok = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), dtype=np.int32).astype(np.int64)).view(B, T)
tgt = torch.from_numpy(np.fromfile(os.path.join(d, "targets.i32"), dtype=np.int32).astype(np.int64))
model.zero_grad(set_to_none=True)
x = emb[tok].detach().requires_grad_(True)
logits = model(inputs_embeds=x).logits.float()
torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), tgt, ignore_index=-1).backward()
head_part = emb.grad.detach().clone()
lookup_part = torch.zeros_like(head_part).index_add_(0, tok.flatten(), x.grad.detach().view(B * T, -1))
t = [t for t in case["tensors"] if t["name"] == "model.embed_tokens.weight"][0]
ours = torch.from_numpy(np.fromfile(os.path.join(d, "grads.f32"), dtype=np.float32)[t["offset"]:t["offset"] + emb.numel()].copy())
full = (head_part + lookup_part).flatten()
scale = float(full.abs().max())
for name, part in (("the head's part alone", head_part), ("the lookup's part alone", lookup_part)):
    bad, mx = h.close(ours, part.flatten(), 1e-4 * scale, 1e-3)
    r(bad > 0, f"kvcpt's embedding gradient is not {name} ({bad} elements off it, max |d| {mx:.3e})",
      "the gradient misses the other part")
bad, mx = h.close(ours, full, 1e-4 * scale, 1e-3)
r(bad == 0, f"kvcpt's embedding gradient = lookup's + head's part (max |d| {mx:.3e}, max |ref| {scale:.3e})",
  f"{bad} elements off")
sys.exit(1 if r.failed else 0)
PY
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL - real model tied gradient against transformers"; tail -5 "$tmp/grad.err"; }
fi

# 2. a CPT run interrupted after its second step and resumed = the uninterrupted run.
# Three steps: the signal, sent once step 1 is logged, lands in step 2, the
# checkpoint holds 8-bit AdamW states that two updates wrote, and the resumed
# run takes step 3 from them (each step of this model costs ~25 CPU seconds)
cpt=(--set model="$M" --set init=pretrained --set data="$tmp/data" --set mask=1 --set L=$L --set S=$S
     --set K=$BUDGET --set optim=adamw8bit --set lr=5e-6 --set warmup_steps=1 --set schedule=linear
     --set grad_clip=1.0 --set global_batch=2 --set micro_batch=1 --set steps=$STEPS --set eval_batches=0
     --set ckpt_interval=1000 --set keep_last=1 --set seed=7)
if $K train "${cpt[@]}" --set out="$tmp/a" >"$tmp/a.log" 2>&1 && [ -f "$tmp/a/model/model.safetensors" ]; then
    ok "real-model CPT runs $STEPS steps from the pretrained checkpoint"
else fail "real-model CPT" "$(tail -3 "$tmp/a.log")"; exit 0; fi
$K train "${cpt[@]}" --set out="$tmp/b" >"$tmp/b.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
    n=$( (wc -l <"$tmp/b/log.jsonl") 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 1 ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
done
kill -TERM $pid
wait $pid
rc=$?
stopped=$(grep -o '"step":[0-9]*' "$tmp/b/log.jsonl" | tail -1 | cut -d: -f2)
if [ $rc -eq 143 ] && grep -q "SIGTERM received: checkpoint written" "$tmp/b.log" && [ "${stopped:-$STEPS}" -lt $STEPS ]; then
    ok "real-model CPT: SIGTERM writes a checkpoint (stopped at step $stopped of $STEPS)"
else fail "real-model CPT SIGTERM" "rc $rc, stopped at ${stopped:-?}: $(tail -2 "$tmp/b.log")"; fi
$K train "${cpt[@]}" --set out="$tmp/b" --resume >"$tmp/b2.log" 2>&1
grep -q "resumed from" "$tmp/b2.log" && ok "real-model CPT: --resume continues from the checkpoint" ||
    fail "real-model CPT --resume" "$(tail -2 "$tmp/b2.log")"
strip() { sed -E 's/,"(tokens_per_s|gflops_per_s|peak_rss_mb|elapsed_s)":[^,}]*//g;s/,"blas":\{[^}]*\}//' "$1"; }
if [ "$(grep -c '"loss"' "$tmp/a/log.jsonl")" -eq $STEPS ] && diff <(strip "$tmp/a/log.jsonl") <(strip "$tmp/b/log.jsonl") >/dev/null; then
    ok "real-model CPT: the resumed run's $STEPS losses equal the uninterrupted run's bit for bit"
else fail "real-model CPT resumed losses" "$(diff <(strip "$tmp/a/log.jsonl") <(strip "$tmp/b/log.jsonl") | head -4)"; fi
if cmp -s "$tmp/a/model/model.safetensors" "$tmp/b/model/model.safetensors"; then
    ok "real-model CPT: the resumed run's final model equals the uninterrupted run's byte for byte"
else fail "real-model CPT resumed model" "model.safetensors bytes differ"; fi

# 3. the CPT result (a Hugging Face directory as train writes it), loaded by transformers
if ! "$dump" "$tmp/case_cpt" 3 - max cpu 24 "$tmp/a/model" >"$tmp/case_cpt.log" 2>&1; then
    fail "real-model CPT export" "dump_model_case on the CPT model: $(tail -3 "$tmp/case_cpt.log")"
else
    "$py" - "$tmp/a/model" "$tmp/case_cpt" "$M" <<'PY' 2>"$tmp/exp.err" | sed 's/^\(ok\|FAIL\) - /\1 - real-model CPT export: /'
import sys
import torch
sys.path.insert(0, "tests")
import hf_compare as h
from transformers import LlamaForCausalLM
out, d, pre = sys.argv[1:4]
r = h.Report()
model, info = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32, output_loading_info=True)
problems = {k: v for k, v in info.items() if v}  # missing, unexpected, mismatched keys, errors
r(not problems, "from_pretrained loads it with no missing, unexpected or mismatched key", f"loading info {problems}")
r(model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(),
  "the export is tied, as the model it came from")
base = LlamaForCausalLM.from_pretrained(pre, dtype=torch.float32)
r(not torch.equal(model.model.embed_tokens.weight, base.model.embed_tokens.weight),
  "the export holds the CPT's embedding, not the pretrained one")
h.compare_case_logits(d, model, r, "transformers' logits of the export equal kvcpt's of the CPT model")
sys.exit(1 if r.failed else 0)
PY
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "FAIL - real-model CPT export"; tail -5 "$tmp/exp.err"; }
fi
