#!/usr/bin/env bash
# Mistral end to end, with nothing above the model code knowing the family:
# a tiny random MistralForCausalLM (GQA 4:2, untied, "sliding_window": null)
# written by transformers' save_pretrained, with the byte-level tokenizer of
# tests/gguf_tiny.py --all-bytes beside it, and documents prepared with
# `prepare --model` on that directory:
#   - `kvcpt eval`, every policy variant, on the CPU and under the CUDA
#     emulator (build/emu/kvcpt, --device cuda): PPL per cell within 1e-4
#     relative, the same keys read per token and the same refreshkv strides
#     (tests/eval/test_eval_cuda_emu.sh's tolerance); with kvpress installed, the
#     policies both implement agree with kvpress over transformers'
#     MistralForCausalLM (kept keys and NLLs, tests/kvpress_peer.py --check);
#   - `kvcpt train`, 3 CPT steps with each mask (plain causal, the RefreshKV
#     paper mask, the eval cache's mask_evict=1 mask_restride=4) on the CPU
#     and the emulated GPU: loss curves within 1e-5 relative
#     (tests/train/test_train_cuda_emu.sh's), the masks' curves differing, and
#     out/model's config.json still a Mistral's;
#   - the GPU-trained RefreshKV model exported by `kvcpt convert --to-format
#     hf` loads with MistralForCausalLM.from_pretrained unchanged and gives
#     kvcpt's logits within 1e-4 (tests/hf_oracle.py's export_reloads);
#   - `kvcpt convert` HF -> native -> HF keeps the family and the numbers;
#     `kvcpt plan` counts the model's parameters; `kvcpt bench model`
#     (CPU, its PyTorch peer a MistralForCausalLM, and the emulated CUDA
#     engine), `bench
#     decode`, `bench matmul` and (with kvpress) `bench eval` run on it;
#   - a non-null sliding_window is refused, naming the field, by eval (both
#     engines), train, convert, plan and bench model; an absent one (which
#     transformers reads as 4096) by eval.
# Skips without the venv's torch and transformers, or without build/emu/kvcpt
# and dump_model_case (make test builds them).
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
G=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
dump=build/tests/tools/dump_model_case
if ! python_has "$PY" torch transformers safetensors numpy; then
    echo "skip - mistral end to end: $PY lacks torch, transformers, safetensors or numpy (make setup)"; exit 0
fi
for b in "$G" "$dump"; do
    [ -x "$b" ] || { echo "skip - mistral end to end: $b is not built (make test builds it)"; exit 0; }
done
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1

# ---- the fixture: save_pretrained's Mistral with the byte-level tokenizer
/usr/bin/python3 tests/gguf_tiny.py "$tmp/tok.gguf" --all-bytes
$K convert --from "$tmp/tok.gguf" --to "$tmp/tok" >"$tmp/conv.log" 2>&1 || { fail "setup: tokenizer" "$(cat "$tmp/conv.log")"; exit 1; }
hf=$tmp/hf
"$PY" - "$hf" <<'PY' || { fail "setup: save_pretrained" "transformers could not write the model"; exit 1; }
import sys, torch
from transformers import MistralConfig, MistralForCausalLM
torch.manual_seed(53)
cfg = MistralConfig(vocab_size=264, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, max_position_embeddings=512, rms_norm_eps=1e-5,
                    rope_theta=10000.0, sliding_window=None, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
model = MistralForCausalLM._from_config(cfg, attn_implementation="eager").float()
with torch.no_grad():  # every weight at random, the norms too: no policy or mask is trivially equal to another
    for n, p in model.named_parameters():
        p.copy_(1.0 + 0.2 * torch.randn_like(p) if n.endswith("norm.weight") else 0.25 * torch.randn_like(p))
model.save_pretrained(sys.argv[1], safe_serialization=True)
PY
cp "$tmp/tok/tokenizer.json" "$tmp/tok/tokenizer_config.json" "$hf/"
/usr/bin/python3 - "$tmp/docs.jsonl" <<'PY'
import json, random, sys
r = random.Random(53)
with open(sys.argv[1], "w") as f:
    for i in range(60):
        words = ["".join(r.choice("abcdefghij0123456789xyz") for _ in range(r.randint(1, 6))) for _ in range(40)]
        f.write(json.dumps({"text": " ".join(words)}) + "\n")
PY
$K prepare --model "$hf" --input "$tmp/docs.jsonl" --out "$tmp/data" --min-tokens 57 >"$tmp/prep.log" 2>&1 ||
    { fail "setup: prepare --model" "$(tail -2 "$tmp/prep.log")"; exit 1; }
mt() { /usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("model_type"), c.get("architectures"), c.get("sliding_window", "absent"))' "$1/config.json"; }
is_mistral() { [ "$(mt "$1")" = "mistral ['MistralForCausalLM'] None" ]; }

ntest=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["inputs"][0]["kept_per_split"]["test"])' "$tmp/data/manifest.json")
[ "$ntest" -ge 4 ] || { fail "setup: the test split" "$ntest documents, 4 wanted"; exit 1; }

# ---- eval: every policy on the CPU and on the emulated GPU
ev=(--model "$hf" --data "$tmp/data" --L 48 --S 8 --K L/8 --refresh-qc 2 --max-docs 4 --bootstrap 20 --batch 2)
$K eval "${ev[@]}" --device cpu --out "$tmp/e_cpu" >"$tmp/e_cpu.log" 2>&1; rc=$?
out=$($G eval "${ev[@]}" --device cuda --out "$tmp/e_gpu" 2>&1); grc=$?
# the policies must differ on this model (4 PPLs at least), or agreeing would show little
cmp=$(/usr/bin/python3 tests/eval_cells.py --rel 1e-4 --devices cpu,cuda --distinct 4 "$tmp/e_cpu/eval.json" \
    "$tmp/e_gpu/eval.json" 2>&1)
read -r cells worst bad <<<"$cmp"
check "eval --device cpu and --device cuda (emulated) on a MistralForCausalLM directory: $cells cells (every policy variant) match (worst PPL rel diff $worst, same keys, same strides)" \
    '[ $rc -eq 0 ] && [ $grc -eq 0 ] && grep -q "CUDA decode engine" <<<"$out" && [ "$cells" = 11 ] && [ "$bad" = none ]' \
    "rc $rc/$grc: $cmp $(tail -2 "$tmp/e_cpu.log") $(tail -2 <<<"$out")"

# kvpress (transformers' MistralForCausalLM underneath) as the oracle of the
# policies both implement: the kept keys and the NLLs (tests/kvpress_peer.py)
if python_has "$PY" kvpress; then
    "$PY" tests/kvpress_peer.py --check --kvcpt "$K" --workdir "$tmp/kvpress" --model "$hf" --data "$tmp/data" \
        --context 48 --last 8 --budget 6 --max-docs 4 --threads 1 2>"$tmp/kvpress.err" | sed 's/^\(ok\|FAIL\) - /\1 - mistral, kvpress peer: /'
    [ "${PIPESTATUS[0]}" -eq 0 ] || fail "mistral, kvpress peer" "$(tail -5 "$tmp/kvpress.err")"
else echo "skip - mistral, kvpress peer: $PY lacks kvpress (make setup)"; fi

# ---- train: 3 CPT steps with each mask, CPU and emulated GPU
cat >"$tmp/cfg.json" <<JSON
{"model": "$hf", "init": "pretrained", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "global_batch": 2,
 "micro_batch": 2, "steps": 3, "warmup_steps": 1, "lr": 1e-3, "optim": "adamw", "eval_interval": 0,
 "eval_batches": 0, "ckpt_interval": 0, "keep_last": 1}
JSON
losses() { grep -o '"loss":[^,]*' "$1/log.jsonl" 2>/dev/null | cut -d: -f2 | paste -sd' '; }
masks=("causal|--set mask=0" "refreshkv|--set mask=1" "evict|--set mask=1 --set mask_evict=1 --set mask_restride=4")
for m in "${masks[@]}"; do
    name=${m%%|*}
    read -ra sets <<<"${m#*|}"
    $K train --config "$tmp/cfg.json" "${sets[@]}" --set out="$tmp/t_cpu_$name" --set device=cpu >"$tmp/t_cpu_$name.log" 2>&1; rc=$?
    $G train --config "$tmp/cfg.json" "${sets[@]}" --set out="$tmp/t_gpu_$name" --set device=cuda >"$tmp/t_gpu_$name.log" 2>&1; grc=$?
    a=$(losses "$tmp/t_cpu_$name") b=$(losses "$tmp/t_gpu_$name")
    worst=$(paste <(tr ' ' '\n' <<<"$a") <(tr ' ' '\n' <<<"$b") | awk '
        { n++; d = $1 - $2; if (d < 0) d = -d; if ($1 == "" || $2 == "" || d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad++; if (d > w) w = d }
        END { if (n == 3 && !bad) printf "%.2e", w; else print "bad" }')
    check "train ${m#*|} (3 steps): the emulated GPU's losses within 1e-5 of the CPU's (worst |d| $worst); out/model a Mistral on both" \
        '[ $rc -eq 0 ] && [ $grc -eq 0 ] && grep -q "device cuda" "$tmp/t_gpu_$name.log" && [ "$worst" != bad ] &&
         is_mistral "$tmp/t_cpu_$name/model" && is_mistral "$tmp/t_gpu_$name/model"' \
        "rc $rc/$grc: cpu [$a] gpu [$b]; $(mt "$tmp/t_gpu_$name/model" 2>&1); $(tail -2 "$tmp/t_gpu_$name.log")"
done
check "the three masks train differently (causal, RefreshKV, evict: the last losses differ)" \
    '[ "$(losses "$tmp/t_cpu_causal")" != "$(losses "$tmp/t_cpu_refreshkv")" ] &&
     [ "$(losses "$tmp/t_cpu_refreshkv")" != "$(losses "$tmp/t_cpu_evict")" ]' \
    "causal [$(losses "$tmp/t_cpu_causal")] refreshkv [$(losses "$tmp/t_cpu_refreshkv")] evict [$(losses "$tmp/t_cpu_evict")]"

# ---- the GPU-trained RefreshKV model exported and reloaded by transformers
"$PY" - "$K" "$dump" "$tmp/t_gpu_refreshkv/model" <<'PY'
import sys
from types import SimpleNamespace
sys.path.insert(0, "tests")
from hf_oracle import export_reloads, report  # noqa: E402
from transformers import MistralForCausalLM  # noqa: E402
kvcpt, dump, src = sys.argv[1:4]
export_reloads(SimpleNamespace(kvcpt=kvcpt, dump=dump), src, "[mistral, trained on the emulated GPU -> transformers]",
               MistralForCausalLM, "mistral")
sys.exit(1 if report.failed else 0)
PY
[ $? -eq 0 ] || fail "export of the GPU-trained model" "see the lines above"

# ---- convert both ways: the family and the numbers kept
$K convert --from "$hf" --to "$tmp/nat" >"$tmp/c1.log" 2>&1; rc1=$?
$K convert --from "$tmp/nat" --to "$tmp/back" --to-format hf >"$tmp/c2.log" 2>&1; rc2=$?
ppl() { /usr/bin/python3 -c 'import json,sys; print(" ".join("%r" % r["ppl"] for r in json.load(open(sys.argv[1]))["results"]))' "$1/eval.json" 2>&1; }
pe=(--data "$tmp/data" --L 48 --S 8 --K L/8 --policies full,streaming,refreshkv --max-docs 3 --bootstrap 10 --quiet)
for d in hf nat back; do
    m=$hf; [ $d = hf ] || m=$tmp/$d
    $K eval --model "$m" "${pe[@]}" --out "$tmp/p_$d" >/dev/null 2>&1
done
check "convert HF -> native -> HF: both conversions run, the round trip is MistralForCausalLM with sliding_window null, and all three evaluate alike" \
    '[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && is_mistral "$tmp/back" && [ -n "$(ppl "$tmp/p_hf")" ] &&
     [ "$(ppl "$tmp/p_nat")" = "$(ppl "$tmp/p_hf")" ] && [ "$(ppl "$tmp/p_back")" = "$(ppl "$tmp/p_hf")" ]' \
    "rc $rc1/$rc2, $(mt "$tmp/back" 2>&1): $(ppl "$tmp/p_hf") / $(ppl "$tmp/p_nat") / $(ppl "$tmp/p_back"); $(tail -1 "$tmp/c2.log")"

# ---- plan and bench on the directory
nparams=$(/usr/bin/python3 - "$hf/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    h = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
n = 0
for k, v in h.items():
    if k != "__metadata__":
        p = 1
        for s in v["shape"]: p *= s
        n += p
print(n)
PY
)
pl=$($K plan --preset "$hf" --ranks 1 --seq 56 --json 2>&1)
pc=$($K plan --config "$tmp/cfg.json" --ranks 1 --engine cuda --json 2>&1); pcr=$?
check "plan --preset DIR: bf16 parameters of the safetensors' $nparams elements; plan --config (model DIR, engine cuda) runs" \
    '/usr/bin/python3 -c "import json,sys; r = json.loads(sys.argv[1])[0]; sys.exit(r[\"params\"] != 2 * $nparams)" "$pl" && [ $pcr -eq 0 ]' \
    "$pl / $pc"
bm=(--preset "$hf" --batch 1 --seq 56 --L 48 --K 6 --steps 1 --warmup 0 --json)
bc=$($K bench model "${bm[@]}" --device cpu --python "$PY" 2>"$tmp/bc.err")
bg=$($G bench model "${bm[@]}" --device cuda 2>"$tmp/bg.err")
res=$(/usr/bin/python3 - "$bc" "$bg" "$nparams" <<'PY' 2>&1
import json, sys
c, g, n = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
bad = [f"{k}: {x}" for k, x in (("cpu params", c["params"]), ("cuda params", g["params"]), ("torch params", c.get("torch_params")))
       if x != n]
bad += [f"{d} tokens_per_s {j['tokens_per_s']}" for d, j in (("cpu", c), ("cuda", g)) if not j["tokens_per_s"] > 0]
if not c.get("torch_tokens_per_s", 0) > 0: bad.append("no PyTorch peer figure")
if c.get("torch_class") != "MistralForCausalLM": bad.append(f"the peer ran {c.get('torch_class')}")
print("; ".join(bad) or "ok")
PY
)
check "bench model --preset DIR: the CPU (its PyTorch peer a MistralForCausalLM) and the emulated CUDA engine time the $nparams-parameter Mistral" \
    '[ "$res" = ok ]' "$res; $(tail -2 "$tmp/bc.err") $(tail -2 "$tmp/bg.err")"
bd=$($K bench decode --preset "$hf" --L 48 --steps 4 --device cpu --json 2>&1); rc=$?
bx=$($K bench matmul --preset "$hf" --seq 56 --reps 1 --json 2>&1); rcx=$?
check "bench decode and bench matmul --preset DIR run" \
    '[ $rc -eq 0 ] && [ $rcx -eq 0 ] && [ "$(grep -c "\"policy\"" <<<"$bd")" = 3 ] && grep -q "\"shapes\"" <<<"$bx"' "$bd / $bx"

if python_has "$PY" kvpress; then
    be=$($K bench eval --model "$hf" --data "$tmp/data" --L 48 --S 8 --K 6 --shared-only --python "$PY" --json 2>"$tmp/be.err")
    check "bench eval --model DIR: kvcpt and kvpress (MistralForCausalLM) timed on the same documents" \
        '/usr/bin/python3 -c "import json,sys; j = json.loads(sys.argv[1]); sys.exit(not (j[\"kvcpt_seconds\"] > 0 and j[\"kvpress_seconds\"] > 0))" "$be"' \
        "$be $(tail -2 "$tmp/be.err")"
else echo "skip - mistral, bench eval: $PY lacks kvpress (make setup)"; fi

# ---- a sliding window is refused, naming the field, by every command
sw() { # DIR, value (a JSON value, or absent)
    cp -r "$hf" "$1"
    /usr/bin/python3 - "$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
if sys.argv[2] == "absent": del c["sliding_window"]
else: c["sliding_window"] = json.loads(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
}
sw "$tmp/sw" 16
want="config field 'sliding_window' is 16: sliding-window attention is not implemented yet for mistral"
refused "eval: sliding_window 16 refused, naming the field" "$want" $K eval --model "$tmp/sw" --data "$tmp/data" --L 48 --S 8 --out "$tmp/x1"
refused "eval --device cuda (emulated): sliding_window 16 refused" "$want" $G eval --model "$tmp/sw" --data "$tmp/data" --L 48 --S 8 --device cuda --out "$tmp/x2"
refused "train: sliding_window 16 refused" "$want" $K train --config "$tmp/cfg.json" --set model="$tmp/sw" --set out="$tmp/x3"
refused "convert: sliding_window 16 refused" "$want" $K convert --from "$tmp/sw" --to "$tmp/x4"
refused "plan: sliding_window 16 refused" "$want" $K plan --preset "$tmp/sw" --ranks 1 --seq 56
refused "bench model: sliding_window 16 refused" "$want" $K bench model --preset "$tmp/sw" --seq 56 --steps 1 --no-peers
sw "$tmp/sw_absent" absent
refused "eval: an absent sliding_window (transformers' 4096) refused, saying so" \
    "config field 'sliding_window' is absent, which transformers' MistralForCausalLM reads as 4096" \
    $K eval --model "$tmp/sw_absent" --data "$tmp/data" --L 48 --S 8 --out "$tmp/x5"
