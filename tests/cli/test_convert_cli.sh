#!/usr/bin/env bash
# kvcpt convert from the command line: --help lists the options, and bad
# input exits non-zero with the file and byte offset named (never a crash).
set -u
cd "$(dirname "$0")/../.."
K=${KVCPT_BIN:-./kvcpt}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
check() { if eval "$2"; then echo "ok - $1"; else echo "FAIL - $1: $3"; fi; }

help=$("$K" convert --help)
check "convert --help lists its options" \
  'for o in --from --to --to-format --to-dtype --shard-size --overwrite; do grep -q -- "$o" <<<"$help" || exit 1; done' "$help"

"$K" convert --from "$tmp" >"$tmp/out" 2>&1; rc=$?
check "missing --to is an error" '[ $rc -ne 0 ] && grep -q "are required" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"

mkdir -p "$tmp/bad"
printf '{"vocab_size":64,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":8}' >"$tmp/bad/config.json"
# header length field claims 2 GB
printf '\x00\x00\x00\x80\x00\x00\x00\x00{}' >"$tmp/bad/model.safetensors"
"$K" convert --from "$tmp/bad" --to "$tmp/out_dir" >"$tmp/out" 2>&1; rc=$?
check "2 GB header claim: clean error naming file and offset" \
  '[ $rc -eq 1 ] && grep -q "bad/model.safetensors.* at byte 0: header length 2147483648 exceeds" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
check "nothing written for a failed conversion" '[ ! -e "$tmp/out_dir/model.kvcpt" ]' "output exists"

printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":{"dtype":"F32"' >"$tmp/bad/model.safetensors"
"$K" convert --from "$tmp/bad" --to "$tmp/out_dir" >"$tmp/out" 2>&1; rc=$?
check "truncated JSON header: clean error" '[ $rc -eq 1 ] && grep -q "invalid JSON header" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"

# a config.json carrying both RoPE layouts (transformers 4's rope_theta +
# rope_scaling, 5's rope_parameters) that disagree: refused, both named
mkdir -p "$tmp/rope"
printf '{"vocab_size":64,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"rope_theta":500000.0,"rope_parameters":{"rope_type":"default","rope_theta":10000.0}}' >"$tmp/rope/config.json"
"$K" plan --preset "$tmp/rope" >"$tmp/out" 2>&1; rc=$?
check "rope_theta and rope_parameters.rope_theta disagree: refused naming both" \
  '[ $rc -ne 0 ] && grep -q "rope_theta.*rope_parameters.rope_theta.*disagree" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
printf '{"vocab_size":64,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64},"rope_parameters":{"rope_type":"default","rope_theta":10000.0}}' >"$tmp/rope/config.json"
"$K" plan --preset "$tmp/rope" >"$tmp/out" 2>&1; rc=$?
check "rope_scaling and rope_parameters disagree: refused naming both" \
  '[ $rc -ne 0 ] && grep -q "rope_scaling.*rope_parameters.*different" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"

# ---- GGUF sources (tests/gguf_tiny.py writes tiny llama files with the
# standard library; the numerical checks are tests/model/test_gguf_oracle.sh's)
G="$tmp/gguf"; mkdir -p "$G"
tiny() { /usr/bin/python3 tests/gguf_tiny.py "$@"; }
tiny "$G/ok.gguf"
"$K" convert --from "$G/ok.gguf" --to "$G/hf" >"$tmp/out" 2>"$tmp/err"; rc=$?
check "GGUF -> HF: config.json, model.safetensors, tokenizer.json, tokenizer_config.json written" \
  '[ $rc -eq 0 ] && for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do [ -s "$G/hf/$f" ] || exit 1; done' \
  "rc $rc: $(cat "$tmp/out" "$tmp/err")"
check "GGUF -> HF: a fast conversion prints no progress lines" '[ ! -s "$tmp/err" ]' "$(cat "$tmp/err")"
"$K" convert --from "$G/hf" --to "$G/native" --to-format native >"$tmp/out" 2>&1; rc=$?
check "the converted directory loads in kvcpt (config and tensor layout accepted)" '[ $rc -eq 0 ]' "rc $rc: $(cat "$tmp/out")"
"$K" convert --from "$G/ok.gguf" --to "$G/native2" --to-format native >"$tmp/out" 2>&1; rc=$?
check "GGUF -> native directly: the same model.kvcpt as through HF" \
  '[ $rc -eq 0 ] && cmp -s "$G/native/model.kvcpt" "$G/native2/model.kvcpt" && [ -s "$G/native2/tokenizer.json" ]' "rc $rc: $(cat "$tmp/out")"
res=$(/usr/bin/python3 - "$G/hf" <<'PY' 2>&1
import json, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
t = json.load(open(d + "/tokenizer.json"))
tc = json.load(open(d + "/tokenizer_config.json"))
want = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 40, "max_position_embeddings": 128,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
bad = {k: c.get(k) for k in want if c.get(k) != want[k]}
if c["rms_norm_eps"] != 1e-5 or c["rope_theta"] != 10000.0: bad["eps/theta"] = (c["rms_norm_eps"], c["rope_theta"])
pre = t["pre_tokenizer"]["pretokenizers"]
if [p["type"] for p in pre] != ["Digits", "ByteLevel"] or not pre[0]["individual_digits"]: bad["pre"] = pre
if [a["content"] for a in t["added_tokens"]] != ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] or \
   not all(a["special"] for a in t["added_tokens"]): bad["added"] = t["added_tokens"]
m = t["model"]
if m["merges"] != ["a b", "\u0120 a"] or m["vocab"]["ab"] != 24 or m["ignore_merges"] or t["normalizer"] is not None:
    bad["model"] = {k: m[k] for k in ("merges", "ignore_merges")}
if t["post_processor"]["type"] != "ByteLevel": bad["post"] = t["post_processor"]
if (tc["bos_token"], tc["eos_token"], tc["add_bos_token"], tc["model_max_length"], tc["chat_template"]) != \
   ("<|im_start|>", "<|im_end|>", False, 128, "{{ messages }}"): bad["tokenizer_config"] = tc
print(bad or "ok")
PY
)
check "GGUF -> HF: config, tokenizer.json and tokenizer_config.json hold the metadata's values" '[ "$res" = ok ]' "$res"

"$K" convert --from "$G/ok.gguf" --to "$G/hf" >"$tmp/out" 2>&1; rc=$?
check "GGUF -> a directory holding a model: refused without --overwrite" \
  '[ $rc -eq 1 ] && grep -q "already holds .*--overwrite" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
mkdir -p "$G/only_tok" && echo '{}' >"$G/only_tok/tokenizer.json"
"$K" convert --from "$G/ok.gguf" --to "$G/only_tok" >"$tmp/out" 2>&1; rc=$?
check "GGUF -> a directory holding only a tokenizer.json: refused too" '[ $rc -eq 1 ] && [ "$(cat "$G/only_tok/tokenizer.json")" = "{}" ]' \
  "rc $rc: $(cat "$tmp/out")"
"$K" convert --from "$G/ok.gguf" --to "$G/hf" --overwrite >"$tmp/out" 2>&1; rc=$?
check "GGUF -> HF with --overwrite replaces it" '[ $rc -eq 0 ]' "rc $rc: $(cat "$tmp/out")"

# Without --overwrite, any one file a conversion writes, copies or removes
# is a refusal naming it, and the destination is left as it was: HF -> native,
# native -> HF and GGUF -> HF/native alike.
"$K" convert --from "$G/hf" --to "$G/nat_src" --to-format native >"$tmp/out" 2>&1 || echo "setup: $(cat "$tmp/out")"
dest_refused() { # label, file, convert arguments...
    local label=$1 name=$2 d="$G/dest_$RANDOM$RANDOM"
    shift 2
    mkdir -p "$d" && echo '{"mine": 1}' >"$d/$name"
    "$K" convert "$@" --to "$d" >"$tmp/out" 2>&1; rc=$?
    check "$label -> a directory holding only $name: refused naming it, nothing touched"       '[ $rc -eq 1 ] && grep -q "already holds .$name.*--overwrite" "$tmp/out" && [ "$(cat "$d/$name")" = "{\"mine\": 1}" ] && [ "$(ls -A "$d")" = "$name" ]'       "rc $rc: $(cat "$tmp/out"); left: $(ls -A "$d")"
}
for f in config.json tokenizer.json tokenizer_config.json generation_config.json special_tokens_map.json \
    model.safetensors.index.json model.safetensors model-00001-of-00002.safetensors model.kvcpt; do
    dest_refused "HF -> native" "$f" --from "$G/hf" --to-format native
    dest_refused "native -> HF" "$f" --from "$G/nat_src"
done
for f in config.json tokenizer_config.json model.safetensors.index.json; do
    dest_refused "GGUF -> HF" "$f" --from "$G/ok.gguf"
    dest_refused "GGUF -> native" "$f" --from "$G/ok.gguf" --to-format native
done
mkdir -p "$G/keep_cfg" && echo '{}' >"$G/keep_cfg/config.json" && echo notes >"$G/keep_cfg/README.md"
"$K" convert --from "$G/hf" --to "$G/keep_cfg" --overwrite >"$tmp/out" 2>&1; rc=$?
check "HF -> native with --overwrite over a config.json: replaced, unrelated files kept" \
  '[ $rc -eq 0 ] && grep -q vocab_size "$G/keep_cfg/config.json" && [ -s "$G/keep_cfg/model.kvcpt" ] && [ "$(cat "$G/keep_cfg/README.md")" = notes ]' \
  "rc $rc: $(cat "$tmp/out")"
# a native export over an HF one: the old safetensors go (transformers
# reads only those, so it would load the previous model)
cp -r "$G/hf" "$G/hf_then_native"
"$K" convert --from "$G/nat_src" --to "$G/hf_then_native" --to-format native --overwrite >"$tmp/out" 2>&1; rc=$?
check "native export with --overwrite over an HF export: no old *.safetensors left beside model.kvcpt" \
  '[ $rc -eq 0 ] && [ -s "$G/hf_then_native/model.kvcpt" ] && [ -z "$(ls "$G/hf_then_native" | grep safetensors)" ]' \
  "rc $rc: $(cat "$tmp/out"); left: $(ls "$G/hf_then_native")"
mkdir -p "$G/notes" && echo notes >"$G/notes/README.md"
"$K" convert --from "$G/hf" --to "$G/notes" >"$tmp/out" 2>&1; rc=$?
check "HF -> native into a directory holding only unrelated files: converted" '[ $rc -eq 0 ] && [ -s "$G/notes/model.kvcpt" ]' \
  "rc $rc: $(cat "$tmp/out")"

# An input in --to is never replaced or removed, whatever its name, with or
# without --overwrite: the input itself, a hard link or a symlink to it there
# is refused naming both, and --to is left as it was. A GGUF named
# model.safetensors converted into its own directory used to replace itself.
inside_refused() { # label, dir (--to), option the message names, convert arguments...
    local label=$1 d=$2 opt=$3 before after
    shift 3
    before=$(cd "$d" && ls -lL --time-style=+%s.%N . | sha256sum)
    sums=$(cd "$d" && find -L . -type f -exec sha256sum {} + | sort)
    "$K" convert "$@" --to "$d" >"$tmp/out" 2>&1; rc=$?
    after=$(cd "$d" && ls -lL --time-style=+%s.%N . | sha256sum)
    check "$label: refused naming --to's entry and the input, nothing touched" \
      '[ $rc -eq 1 ] && grep -q "holds .*the same file as the input .*($opt)" "$tmp/out" && [ "$before" = "$after" ] && [ "$sums" = "$(cd "$d" && find -L . -type f -exec sha256sum {} + | sort)" ]' \
      "rc $rc: $(cat "$tmp/out"); left: $(ls -A "$d")"
}
I="$tmp/inputs"; mkdir -p "$I/self" "$I/any" "$I/sym" "$I/hard" "$I/shards_to" "$I/cfg_to" "$I/sub/deeper"
cp "$G/ok.gguf" "$I/self/model.safetensors"
inside_refused "a GGUF named model.safetensors converted into its own directory with --overwrite" "$I/self" --from \
  --from "$I/self/model.safetensors" --overwrite
cp "$G/ok.gguf" "$I/any/weights.bin.tmp"
inside_refused "a GGUF of any other name in --to, without --overwrite" "$I/any" --from --from "$I/any/weights.bin.tmp"
cp "$G/ok.gguf" "$I/ext.gguf" && ln -s "$I/ext.gguf" "$I/sym/model.safetensors"
inside_refused "--to holding a symlink to the GGUF input, with --overwrite" "$I/sym" --from --from "$I/ext.gguf" --overwrite
ln "$I/ext.gguf" "$I/hard/config.json.tmp"
inside_refused "--to holding a hard link to the GGUF input under a .tmp name" "$I/hard" --from --from "$I/ext.gguf"
"$K" convert --from "$G/hf" --to "$I/shards" --to-format hf --shard-size 4KB >"$tmp/out" 2>&1 || echo "setup: $(cat "$tmp/out")"
shard2=$(cd "$I/shards" && ls model-00002-of-*.safetensors)
ln "$I/shards/$shard2" "$I/shards_to/model.kvcpt.tmp" # the native writer's temporary name
inside_refused "--to holding model.kvcpt.tmp, a hard link to the second index shard ($shard2)" "$I/shards_to" --from \
  --from "$I/shards" --to-format native
cp "$G/hf/config.json" "$I/cfg_to/config.json"
inside_refused "--config inside --to" "$I/cfg_to" --config --from "$G/hf" --config "$I/cfg_to/config.json" --overwrite
# the conversion touches --to's own entries only: an input in a subdirectory is read and kept
cp "$G/ok.gguf" "$I/sub/deeper/model.safetensors"
"$K" convert --from "$I/sub/deeper/model.safetensors" --to "$I/sub" --overwrite >"$tmp/out" 2>&1; rc=$?
check "a GGUF in a subdirectory of --to: converted, the input kept" \
  '[ $rc -eq 0 ] && [ -s "$I/sub/model.safetensors" ] && cmp -s "$I/sub/deeper/model.safetensors" "$G/ok.gguf"' "rc $rc: $(cat "$tmp/out")"

# config.json asking for biases kvcpt's Llama has no tensors for: refused
# naming the field and the file, nothing written (the model would run
# without them, and the flag used to be copied to the output's config.json)
bias_cfg() { # DIR FIELD VALUE: $G/hf with FIELD set to VALUE (JSON) in its config.json
    rm -rf "$1" && cp -r "$G/hf" "$1" && /usr/bin/python3 - "$1/config.json" "$2" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(c, open(sys.argv[1], "w"))
PY
}
for f in attention_bias mlp_bias; do
    bias_cfg "$I/b_$f" $f true
    "$K" convert --from "$I/b_$f" --to "$I/b_${f}_out" --to-format native >"$tmp/out" 2>&1; rc=$?
    check "convert: config.json with $f true refused naming the field and file, nothing written" \
      '[ $rc -eq 1 ] && grep -q "b_$f/config.json: config field .$f. is true" "$tmp/out" && [ ! -e "$I/b_${f}_out" ]' "rc $rc: $(cat "$tmp/out")"
done
bias_cfg "$I/b_str" mlp_bias '"yes"'
"$K" convert --from "$G/hf" --config "$I/b_str/config.json" --to "$I/b_str_out" --to-format native >"$tmp/out" 2>&1; rc=$?
check "convert --config with mlp_bias \"yes\": refused, must be true or false" \
  '[ $rc -eq 1 ] && grep -q "b_str/config.json: config field .mlp_bias. must be true or false" "$tmp/out" && [ ! -e "$I/b_str_out" ]' "rc $rc: $(cat "$tmp/out")"
bias_cfg "$I/b_null" attention_bias null
"$K" convert --from "$I/b_null" --to "$I/b_null_out" --to-format native >"$tmp/out" 2>&1; rc=$?
check "attention_bias null (as absent) beside mlp_bias false: converted" '[ $rc -eq 0 ] && [ -s "$I/b_null_out/model.kvcpt" ]' \
  "rc $rc: $(cat "$tmp/out")"

tiny "$G/untied.gguf" --untied --pre llama-bpe --add-bos
"$K" convert --from "$G/untied.gguf" --to "$G/untied" >"$tmp/out" 2>&1; rc=$?
res=$(/usr/bin/python3 - "$G/untied" "third_party/tokenizers/llama3.1/tokenizer.json" <<'PY' 2>&1
import json, os, sys
d, llama = sys.argv[1:]
c = json.load(open(d + "/config.json"))
t = json.load(open(d + "/tokenizer.json"))
bad = []
if c["tie_word_embeddings"] is not False: bad.append("tie_word_embeddings %r" % c["tie_word_embeddings"])
if not t["model"]["ignore_merges"]: bad.append("ignore_merges false for llama-bpe")
if os.path.exists(llama):  # Meta's own file: the same pre-split and BOS template, token aside
    ref = json.load(open(llama))
    if t["pre_tokenizer"] != ref["pre_tokenizer"]: bad.append("pre_tokenizer differs from Llama 3.1's")
    post = json.dumps(t["post_processor"]).replace("<|im_start|>", "<|begin_of_text|>").replace("[1]", "[128000]")
    if json.loads(post) != ref["post_processor"]: bad.append("post_processor differs: %s" % post)
print("; ".join(bad) or "ok")
PY
)
check "untied llama-bpe GGUF with add_bos_token: lm_head kept, Llama 3.1's pre-split and BOS template" \
  '[ $rc -eq 0 ] && [ "$res" = ok ]' "rc $rc: $(cat "$tmp/out") $res"

tiny "$G/q4k.gguf" --q4k blk.1.ffn_up.weight
"$K" convert --from "$G/q4k.gguf" --to "$G/q4k" >"$tmp/out" 2>&1; rc=$?
check "a Q4_K tensor: refused naming the type and the tensor, nothing written" \
  '[ $rc -eq 1 ] && grep -q "at byte [0-9]*: tensor .blk.1.ffn_up.weight. is Q4_K, which kvcpt cannot dequantize" "$tmp/out" && [ ! -e "$G/q4k/model.safetensors" ] && [ ! -e "$G/q4k/config.json" ]' \
  "rc $rc: $(cat "$tmp/out")"
tiny "$G/dsk.gguf" --pre deepseek-llm
"$K" convert --from "$G/dsk.gguf" --to "$G/dsk" >"$tmp/out" 2>&1; rc=$?
check "an unknown tokenizer.ggml.pre: refused by name, nothing written" \
  '[ $rc -eq 1 ] && grep -q "tokenizer.ggml.pre .deepseek-llm. is not supported" "$tmp/out" && [ ! -e "$G/dsk/config.json" ]' "rc $rc: $(cat "$tmp/out")"
tiny "$G/spm.gguf" --model llama
"$K" convert --from "$G/spm.gguf" --to "$G/spm" >"$tmp/out" 2>&1; rc=$?
check "a SentencePiece tokenizer (tokenizer.ggml.model llama) without tokenizer.ggml.scores: refused by name" \
  '[ $rc -eq 1 ] && grep -q "metadata key .tokenizer.ggml.scores. is missing" "$tmp/out" && [ ! -e "$G/spm/config.json" ]' \
  "rc $rc: $(cat "$tmp/out")"
tiny "$G/bert.gguf" --model bert
"$K" convert --from "$G/bert.gguf" --to "$G/bert" >"$tmp/out" 2>&1; rc=$?
check "a WordPiece tokenizer (tokenizer.ggml.model bert): refused by name" \
  '[ $rc -eq 1 ] && grep -q "tokenizer.ggml.model .bert. is not supported" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
head -c 3000 "$G/ok.gguf" >"$G/trunc.gguf"
"$K" convert --from "$G/trunc.gguf" --to "$G/trunc" >"$tmp/out" 2>&1; rc=$?
check "a truncated GGUF: refused naming the file and the byte offset, nothing written" \
  '[ $rc -eq 1 ] && grep -q "gguf .*trunc.gguf. at byte [0-9]*: .*truncated" "$tmp/out" && [ ! -e "$G/trunc/config.json" ]' "rc $rc: $(cat "$tmp/out")"
printf 'not a gguf file' >"$G/text.gguf"
"$K" convert --from "$G/text.gguf" --to "$G/text" >"$tmp/out" 2>&1; rc=$?
check "a file that is not GGUF: bad magic named" '[ $rc -eq 1 ] && grep -q "at byte 0: bad magic" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
"$K" convert --from "$G/ok.gguf" --to "$G/cfg" --config "$G/hf/config.json" >"$tmp/out" 2>&1; rc=$?
check "--config with a GGUF source: refused" '[ $rc -eq 1 ] && grep -q "does not apply to a GGUF source" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"

# ---- --to-dtype overflow: a finite value past the dtype's largest finite one
# (F16 65504, BF16 ~3.39e38) would round to inf; refused naming the tensor,
# the element, the value and the maximum, with nothing written. Values that
# are already inf or NaN in the source are copied: no conversion made them.
st() { # set FILE TENSOR INDEX VALUE (F32 tensor) | get FILE TENSOR INDEX: element of a safetensors file
    /usr/bin/python3 - "$@" <<'PY'
import json, math, struct, sys
op, path, name, i = sys.argv[1:5]
i = int(i)
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    t = json.loads(f.read(n))[name]
    size = {"F32": 4, "BF16": 2, "F16": 2}[t["dtype"]]
    f.seek(8 + n + t["data_offsets"][0] + i * size)
    if op == "set":
        assert t["dtype"] == "F32"
        f.write(struct.pack("<f", float(sys.argv[5])))
    else:
        b = f.read(size)
        v = struct.unpack("<f", b)[0] if size == 4 else struct.unpack("<e", b)[0] if t["dtype"] == "F16" \
            else struct.unpack("<f", b"\0\0" + b)[0]
        print(t["dtype"], "nan" if math.isnan(v) else repr(v))
PY
}
W=model.layers.0.mlp.up_proj.weight # [64, 32]: element 37 is row 1, column 5
O="$tmp/ovf"; mkdir -p "$O"
big_hf() { # DIR VALUE: the F32 HF model with element 37 of $W set to VALUE
    rm -rf "$1" && cp -r "$G/hf" "$1" && st set "$1/model.safetensors" $W 37 "$2"
}
refused_dtype() { # label, value printed, max printed, dest, convert arguments... (ELEM: the element named)
    local label=$1 val=$2 max=$3 d=$4 elem=${ELEM:-"37 (row 1, column 5)"}
    shift 4
    "$K" convert "$@" --to "$d" >"$tmp/out" 2>&1; rc=$?
    check "$label: refused naming the tensor, element, value and the dtype's maximum; nothing written" \
      '[ $rc -eq 1 ] && grep -q "tensor .$W. as [BF0-9]*: element $elem is $val, beyond [BF0-9]*.s largest finite value $max" "$tmp/out" && [ ! -e "$d" ]' \
      "rc $rc: $(cat "$tmp/out"); left: $(ls -A "$d" 2>/dev/null)"
}
big_hf "$O/h1e5" 1e5
big_hf "$O/h34" 3.4e38
refused_dtype "HF -> native --to-dtype f16 with a 1e5" 100000 65504 "$O/n16" --from "$O/h1e5" --to-format native --to-dtype f16
refused_dtype "HF -> native --to-dtype bf16 with a 3.4e38" "3.39999995e+38" "3.38953139e+38" "$O/nb16" \
  --from "$O/h34" --to-format native --to-dtype bf16
"$K" convert --from "$O/h1e5" --to "$O/n1e5" >"$tmp/out" 2>&1 && "$K" convert --from "$O/h34" --to "$O/n34" >>"$tmp/out" 2>&1 ||
  echo "setup: $(cat "$tmp/out")"
refused_dtype "native -> HF --to-dtype f16 with a 1e5" 100000 65504 "$O/hf16" --from "$O/n1e5" --to-dtype f16
refused_dtype "native -> HF --to-dtype bf16 with a 3.4e38" "3.39999995e+38" "3.38953139e+38" "$O/hbf16" --from "$O/n34" --to-dtype bf16
"$K" convert --from "$O/n1e5" --to "$O/bf" --to-dtype bf16 >"$tmp/out" 2>&1 || echo "setup: $(cat "$tmp/out")"
refused_dtype "BF16 HF -> native --to-dtype f16 with a 1e5 (99840 in BF16)" 99840 65504 "$O/bf_n16" \
  --from "$O/bf" --to-format native --to-dtype f16
# --overwrite over a model: the refusal leaves that model as it was
"$K" convert --from "$G/hf" --to "$O/prev" --to-format native >"$tmp/out" 2>&1 || echo "setup: $(cat "$tmp/out")"
cp "$O/prev/model.kvcpt" "$O/prev.kvcpt" && cp "$O/prev/config.json" "$O/prev.json"
"$K" convert --from "$O/h1e5" --to "$O/prev" --to-format native --to-dtype f16 --overwrite >"$tmp/out" 2>&1; rc=$?
check "overflow refused with --overwrite: the model already there is untouched" \
  '[ $rc -eq 1 ] && cmp -s "$O/prev/model.kvcpt" "$O/prev.kvcpt" && cmp -s "$O/prev/config.json" "$O/prev.json"' "rc $rc: $(cat "$tmp/out")"
# the edges: F16's largest finite value, and 65519 which rounds down to it, convert; 65520 rounds to inf
big_hf "$O/edge" 65519 && st set "$O/edge/model.safetensors" $W 38 65504
"$K" convert --from "$O/edge" --to "$O/edge16" --to-dtype f16 --to-format native >"$tmp/out" 2>&1 &&
  "$K" convert --from "$O/edge16" --to "$O/edge16h" >>"$tmp/out" 2>&1; rc=$?
res="$(st get "$O/edge16h/model.safetensors" $W 37) $(st get "$O/edge16h/model.safetensors" $W 38)"
check "65519 and 65504 convert to F16 as 65504" '[ $rc -eq 0 ] && [ "$res" = "F16 65504.0 F16 65504.0" ]' "rc $rc: $res $(cat "$tmp/out")"
big_hf "$O/edge2" 65520
refused_dtype "65520 (rounds to inf in F16)" 65520 65504 "$O/edge2_16" --from "$O/edge2" --to-dtype f16 --to-format native
# inf and NaN already in the source: copied, exit 0
big_hf "$O/inf" inf && st set "$O/inf/model.safetensors" $W 38 nan && st set "$O/inf/model.safetensors" $W 39 -inf
for dt in f16 bf16; do
    "$K" convert --from "$O/inf" --to "$O/inf_$dt" --to-dtype $dt --to-format native >"$tmp/out" 2>&1 &&
      "$K" convert --from "$O/inf_$dt" --to "$O/inf_${dt}_h" >>"$tmp/out" 2>&1; rc=$?
    res=$(for i in 37 38 39; do st get "$O/inf_${dt}_h/model.safetensors" $W $i; done | tr '\n' ' ')
    check "inf, NaN and -inf in the source convert to $dt as themselves" \
      '[ $rc -eq 0 ] && [ "$(cut -d" " -f2,4,6 <<<"$res")" = "inf nan -inf" ]' "rc $rc: $res $(cat "$tmp/out")"
done
# GGUF sources: the same refusal, before the destination is created
tiny "$G/big.gguf" --first blk.0.ffn_up.weight=1e5
ELEM="0 (row 0, column 0)" refused_dtype "GGUF -> HF --to-dtype f16 with a 1e5" 100000 65504 "$G/big16" --from "$G/big.gguf" --to-dtype f16
tiny "$G/big38.gguf" --first blk.0.ffn_up.weight=3.4e38
ELEM="0 (row 0, column 0)" refused_dtype "GGUF -> native --to-dtype bf16 with a 3.4e38" "3.39999995e+38" "3.38953139e+38" "$G/big38" \
  --from "$G/big38.gguf" --to-dtype bf16 --to-format native
