#!/usr/bin/env bash
# Models in and out as Hugging Face directories, on a tiny llama GGUF
# (tests/gguf_tiny.py --all-bytes: a byte-level tokenizer kvcpt loads):
#   - train writes out/model as config.json, model.safetensors (shards and
#     model.safetensors.index.json above model_shard_size),
#     generation_config.json and the tokenizer the data was prepared with
#     (found by the manifest's sha256 beside the model, in a GGUF model, or at
#     the path prepare recorded; none, said so, for synthetic data or when no
#     file has those bytes), and no model.kvcpt;
#   - eval --model and train's model take a GGUF file as it is, with the
#     same numbers as its conversion; a hub id (org/name) is answered with
#     `kvcpt convert` and `make setup`;
#   - out/model is read back by eval and by train init=pretrained; an older
#     native directory (model.kvcpt) still evaluates to the same numbers;
#   - prepare --model DIR tokenizes with DIR/tokenizer.json.
# The Python here is the standard library's (no venv needed).
. "$(dirname "$0")/../lib.sh" || exit 1
py=/usr/bin/python3
$py tests/gguf_tiny.py "$tmp/g.gguf" --all-bytes
$K convert --from "$tmp/g.gguf" --to "$tmp/hf" >"$tmp/conv.log" 2>&1 || { fail "setup: convert" "$(cat "$tmp/conv.log")"; exit 1; }
$py - "$tmp/docs.jsonl" <<'PY'
import json, random, sys
r = random.Random(5)
with open(sys.argv[1], "w") as f:
    for i in range(40):
        words = ["".join(r.choice("abcdefghij0123456789xyz") for _ in range(r.randint(1, 6))) for _ in range(60)]
        f.write(json.dumps({"text": " ".join(words)}) + "\n")
PY
sha() { sha256sum <"$1" | cut -d' ' -f1; }
field() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokenizer"][sys.argv[2]])' "$1/manifest.json" "$2"; }

# ---- prepare --model DIR
$K prepare --model "$tmp/hf" --input "$tmp/docs.jsonl" --out "$tmp/data" --min-tokens 57 >/dev/null 2>"$tmp/err"; rc=$?
$K prepare --tokenizer "$tmp/hf/tokenizer.json" --input "$tmp/docs.jsonl" --out "$tmp/data_t" --min-tokens 57 >/dev/null 2>&1
check "prepare --model DIR tokenizes with DIR/tokenizer.json (manifest path and sha256; shards = --tokenizer's)" \
    '[ $rc -eq 0 ] && [ "$(field "$tmp/data" path)" = "$tmp/hf/tokenizer.json" ] &&
     [ "$(field "$tmp/data" sha256)" = "$(sha "$tmp/hf/tokenizer.json")" ] && diff -r "$tmp/data/train" "$tmp/data_t/train" >/dev/null' \
    "rc $rc: $(cat "$tmp/err")"
refused "prepare --model FILE.gguf: refused, naming kvcpt convert" "kvcpt convert --from $tmp/g.gguf" \
    $K prepare --model "$tmp/g.gguf" --input "$tmp/docs.jsonl" --out "$tmp/d_x"
refused "prepare --model with --tokenizer: refused" "not both" \
    $K prepare --model "$tmp/hf" --tokenizer "$tmp/hf/tokenizer.json" --input "$tmp/docs.jsonl" --out "$tmp/d_x"
mkdir -p "$tmp/notok" && cp "$tmp/hf/config.json" "$tmp/notok/"
refused "prepare --model DIR without tokenizer.json: refused naming it" "holds no tokenizer.json" \
    $K prepare --model "$tmp/notok" --input "$tmp/docs.jsonl" --out "$tmp/d_x"
refused "prepare --model preset: refused (no tokenizer)" "has no tokenizer" \
    $K prepare --model tiny --input "$tmp/docs.jsonl" --out "$tmp/d_x"

# ---- hub ids and missing paths
hub="kvcpt does not download models"
refused "eval --model org/name: kvcpt convert and make setup named" "$hub" \
    $K eval --model HuggingFaceTB/SmolLM2-135M --data "$tmp/data" --L 48 --out "$tmp/e_x"
grep -q "kvcpt convert --from FILE.gguf" "$tmp/out" && grep -q "make setup" "$tmp/out" &&
    ok "the hub-id message names 'kvcpt convert' and 'make setup'" || fail "hub-id message" "$(cat "$tmp/out")"
refused "train model=org/name: the same advice" "$hub" \
    $K train --set model=meta-llama/Llama-3.1-8B --set data="$tmp/data" --set out="$tmp/r_x"
refused "prepare --model org/name: the same advice" "$hub" \
    $K prepare --model org/name --input "$tmp/docs.jsonl" --out "$tmp/d_x"
refused "eval --model ./missing: no file, no preset (not a hub id)" "no file or directory here, and no preset" \
    $K eval --model ./missing --data "$tmp/data" --L 48 --out "$tmp/e_x"

# ---- eval --model FILE.gguf: read in place, the same numbers as its conversion
ppl() { $py -c 'import json,sys; print(" ".join("%r" % r["ppl"] for r in json.load(open(sys.argv[1]))["results"]))' "$1/eval.json"; }
ev=(--data "$tmp/data" --L 48 --S 8 --max-docs 3 --policies full,streaming --bootstrap 10)
$K eval --model "$tmp/g.gguf" "${ev[@]}" --out "$tmp/e_gguf" >/dev/null 2>"$tmp/err"; rc=$?
$K eval --model "$tmp/hf" "${ev[@]}" --out "$tmp/e_hf" >/dev/null 2>&1
check "eval --model FILE.gguf runs and equals eval of its conversion" \
    '[ $rc -eq 0 ] && [ -n "$(ppl "$tmp/e_gguf")" ] && [ "$(ppl "$tmp/e_gguf")" = "$(ppl "$tmp/e_hf")" ]' \
    "rc $rc: $(tail -2 "$tmp/err") / $(ppl "$tmp/e_gguf" 2>&1) vs $(ppl "$tmp/e_hf" 2>&1)"

# ---- train: out/model as a Hugging Face directory with the data's tokenizer
tr=(--set init=pretrained --set data="$tmp/data" --set L=48 --set S=8 --set K=6 --set steps=2 --set warmup_steps=1
    --set global_batch=2 --set micro_batch=2 --set lr=1e-3)
$K train "${tr[@]}" --set model="$tmp/hf" --set out="$tmp/r_hf" >"$tmp/r_hf.log" 2>&1; rc=$?
m="$tmp/r_hf/model"
check "train from an HF directory: out/model holds config.json, model.safetensors, generation_config.json and no model.kvcpt" \
    '[ $rc -eq 0 ] && [ -s "$m/config.json" ] && [ -s "$m/model.safetensors" ] && [ -s "$m/generation_config.json" ] &&
     [ ! -e "$m/model.kvcpt" ] && [ ! -e "$m/model.safetensors.index.json" ]' "rc $rc: $(ls "$m" 2>&1) $(tail -2 "$tmp/r_hf.log")"
check "train: the model's tokenizer.json and tokenizer_config.json copied byte for byte, and the log says from where" \
    'cmp -s "$m/tokenizer.json" "$tmp/hf/tokenizer.json" && cmp -s "$m/tokenizer_config.json" "$tmp/hf/tokenizer_config.json" &&
     grep -q "the final model.s tokenizer: $tmp/hf/tokenizer.json" "$tmp/r_hf.log"' "$(ls "$m") $(grep "final model" "$tmp/r_hf.log")"
res=$($py - "$m" "$tmp/hf" <<'PY' 2>&1
import json, sys
out, src = (json.load(open(d + "/config.json")) for d in sys.argv[1:3])
gen = json.load(open(sys.argv[1] + "/generation_config.json"))
assert out.get("torch_dtype") == "float32", out.get("torch_dtype")
assert {k: v for k, v in out.items() if k not in ("torch_dtype", "dtype")} == \
    {k: v for k, v in src.items() if k not in ("torch_dtype", "dtype")}, "config.json fields differ from the source's"
assert gen.get("bos_token_id") == src.get("bos_token_id") and gen.get("eos_token_id") == src.get("eos_token_id"), gen
print("same")
PY
)
check "train: config.json is the source's with torch_dtype float32; generation_config.json carries its BOS/EOS ids" \
    '[ "$res" = same ]' "$res"
$K eval --model "$m" "${ev[@]}" --out "$tmp/e_r_hf" >/dev/null 2>&1
check "train: the trained model differs from the one it started from (eval)" \
    '[ -n "$(ppl "$tmp/e_r_hf")" ] && [ "$(ppl "$tmp/e_r_hf")" != "$(ppl "$tmp/e_hf")" ]' "$(ppl "$tmp/e_r_hf" 2>&1)"

$K train "${tr[@]}" --set model="$tmp/g.gguf" --set out="$tmp/r_gguf" >"$tmp/r_gguf.log" 2>&1; rc=$?
$K eval --model "$tmp/r_gguf/model" "${ev[@]}" --out "$tmp/e_r_gguf" >/dev/null 2>&1
check "train model=FILE.gguf (init=pretrained): the same trained model as from its conversion, and its tokenizer" \
    '[ $rc -eq 0 ] && [ "$(ppl "$tmp/e_r_gguf")" = "$(ppl "$tmp/e_r_hf")" ] &&
     cmp -s "$tmp/r_gguf/model/tokenizer.json" "$tmp/hf/tokenizer.json" && grep -q "the final model.s tokenizer: $tmp/g.gguf" "$tmp/r_gguf.log"' \
    "rc $rc: $(tail -2 "$tmp/r_gguf.log")"

$K train "${tr[@]}" --set model="$tmp/hf" --set out="$tmp/r_sh" --set model_shard_size=20KB >"$tmp/r_sh.log" 2>&1; rc=$?
n=$(ls "$tmp/r_sh/model" | grep -c '^model-[0-9]*-of-[0-9]*\.safetensors$')
$K eval --model "$tmp/r_sh/model" "${ev[@]}" --out "$tmp/e_r_sh" >/dev/null 2>&1
check "train model_shard_size=20KB: $n shards and model.safetensors.index.json, read back by eval with the same numbers" \
    '[ $rc -eq 0 ] && [ "$n" -gt 1 ] && [ -s "$tmp/r_sh/model/model.safetensors.index.json" ] && [ ! -e "$tmp/r_sh/model/model.safetensors" ] &&
     [ "$(ppl "$tmp/e_r_sh")" = "$(ppl "$tmp/e_r_hf")" ]' "rc $rc: $(ls "$tmp/r_sh/model") $(tail -2 "$tmp/r_sh.log")"
refused "train model_shard_size=lots: refused naming the key" "'model_shard_size' must be a size" \
    $K train "${tr[@]}" --set model="$tmp/hf" --set out="$tmp/r_x" --set model_shard_size=lots
$K train "${tr[@]}" --set model="$tmp/r_sh/model" --set out="$tmp/r_chain" --set steps=1 >"$tmp/chain.log" 2>&1; rc=$?
check "train init=pretrained from a sharded out/model; the tokenizer is carried on" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/r_chain/model/tokenizer.json" "$tmp/hf/tokenizer.json"' "rc $rc: $(tail -2 "$tmp/chain.log")"

$K convert --from "$m" --to "$tmp/native" --to-format native >/dev/null 2>&1
$K eval --model "$tmp/native" "${ev[@]}" --out "$tmp/e_native" >/dev/null 2>&1; rc=$?
check "an older native directory (model.kvcpt) still evaluates, to the same numbers" \
    '[ $rc -eq 0 ] && [ -s "$tmp/native/model.kvcpt" ] && [ "$(ppl "$tmp/e_native")" = "$(ppl "$tmp/e_r_hf")" ]' "rc $rc"
$K convert --from "$tmp/native" --to "$tmp/back" >/dev/null 2>&1; rc=$?
check "convert out/model -> native -> HF carries the tokenizer and generation files along" \
    '[ $rc -eq 0 ] && (for f in tokenizer.json tokenizer_config.json generation_config.json; do
         cmp -s "$m/$f" "$tmp/native/$f" && cmp -s "$m/$f" "$tmp/back/$f" || exit 1; done)' "rc $rc: $(ls "$tmp/back")"

# the tokenizer found at the path prepare recorded (no tokenizer_config.json
# beside it: a plain one naming the fast tokenizer is written), then gone
mkdir -p "$tmp/tok" && cp "$tmp/hf/tokenizer.json" "$tmp/tok/my-tokenizer.json"
$K prepare --tokenizer "$tmp/tok/my-tokenizer.json" --input "$tmp/docs.jsonl" --out "$tmp/data_r" --min-tokens 57 >/dev/null 2>&1
tt=(--set model="$tmp/hf/config.json" --set data="$tmp/data_r" --set L=48 --set S=8 --set K=6 --set steps=1 --set warmup_steps=0
    --set global_batch=2 --set micro_batch=2)
$K train "${tt[@]}" --set out="$tmp/r_rec" >"$tmp/r_rec.log" 2>&1; rc=$?
cls=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokenizer_class"])' "$tmp/r_rec/model/tokenizer_config.json" 2>&1)
check "train model=config.json (random init): the tokenizer at the data's recorded path, with a plain tokenizer_config.json ($cls)" \
    '[ $rc -eq 0 ] && cmp -s "$tmp/r_rec/model/tokenizer.json" "$tmp/tok/my-tokenizer.json" && [ "$cls" = PreTrainedTokenizerFast ]' \
    "rc $rc: $(ls "$tmp/r_rec/model") $(grep "final model" "$tmp/r_rec.log")"
echo '{}' >"$tmp/tok/my-tokenizer.json"
$K train "${tt[@]}" --set out="$tmp/r_gone" >"$tmp/r_gone.log" 2>&1; rc=$?
said=$(grep -n "NO tokenizer: .*copy the tokenizer.json the data was prepared with" "$tmp/r_gone.log" | cut -d: -f1)
step1=$(grep -n "^step 1/" "$tmp/r_gone.log" | cut -d: -f1)
check "train: the data's tokenizer changed since prepare: no tokenizer files, said before step 1 with what to copy" \
    '[ $rc -eq 0 ] && [ -s "$tmp/r_gone/model/model.safetensors" ] && ! ls "$tmp/r_gone/model" | grep -q tokenizer &&
     [ -n "$said" ] && [ -n "$step1" ] && [ "$said" -lt "$step1" ]' \
    "rc $rc: $(ls "$tmp/r_gone/model") $(grep "final model" "$tmp/r_gone.log")"
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/syn" >/dev/null
$K train "${tt[@]}" --set model=tiny --set data="$tmp/syn" --set out="$tmp/r_syn" >"$tmp/r_syn.log" 2>&1; rc=$?
check "train on synthetic data: no tokenizer, said so" \
    '[ $rc -eq 0 ] && ! ls "$tmp/r_syn/model" | grep -q tokenizer && grep -q "no tokenizer: the data .* is synthetic" "$tmp/r_syn.log"' \
    "rc $rc: $(grep "final model" "$tmp/r_syn.log")"
