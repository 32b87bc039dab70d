#!/usr/bin/env bash
# kvcpt convert --from FILE.gguf on metadata that would convert silently
# wrong (tests/gguf_tiny.py writes each file, edited by key): floats that are
# not finite or out of range, RoPE scaling kvcpt's Llama lacks, a tokenizer
# without merges, merges naming strings that are not tokens, token types
# outside llama.cpp's enum. Each is refused with exit status 1..127 and a
# message naming the key, nothing written and the GGUF file unchanged; the
# edits that are valid convert, and the tokenizer.json converted loads in
# kvcpt and in Hugging Face `tokenizers` (when the venv has it) with the same
# ids.
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
tiny() { /usr/bin/python3 tests/gguf_tiny.py "$@"; }

n=0
refused() { # label, text the message must hold, gguf_tiny.py arguments...
    local label=$1 want=$2 g d before rc
    shift 2
    n=$((n + 1)) g="$tmp/in$n.gguf" d="$tmp/out$n"
    if ! tiny "$g" "$@" 2>"$tmp/tiny.err"; then fail "$label" "gguf_tiny.py failed: $(cat "$tmp/tiny.err")"; return; fi
    before=$(sha256sum <"$g")
    "$K" convert --from "$g" --to "$d" >"$tmp/out" 2>&1; rc=$?
    if [ $rc -ge 1 ] && [ $rc -le 127 ] && grep -qF -- "$want" "$tmp/out" && [ ! -e "$d" ] &&
        [ "$(sha256sum <"$g")" = "$before" ]; then
        ok "$label: refused naming it ($(grep -m1 -oF -- "$want" "$tmp/out")), nothing written, input unchanged"
    else
        fail "$label" "exit $rc, want a refusal holding '$want' and no $d: $(head -c 600 "$tmp/out"); left: $(ls -A "$d" 2>/dev/null)"
    fi
}

# converts; prints config.json's rope_theta and rms_norm_eps
converted() { # label, gguf_tiny.py arguments...
    local label=$1 g d rc
    shift
    n=$((n + 1)) g="$tmp/in$n.gguf" d="$tmp/out$n"
    tiny "$g" "$@" && "$K" convert --from "$g" --to "$d" >"$tmp/out" 2>&1; rc=$?
    last=$d
    if [ $rc -eq 0 ] && [ -s "$d/tokenizer.json" ]; then return 0; fi
    fail "$label" "exit $rc: $(head -c 600 "$tmp/out")"
    return 1
}
cfg() { /usr/bin/python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c.get("rope_theta"), c.get("rms_norm_eps"))' "$1/config.json"; }

# ---- floats: finite, in range, and representable in the model's float32
theta=llama.rope.freq_base eps=llama.attention.layer_norm_rms_epsilon
refused "$theta = +inf (float32)" "key '$theta' = inf is out of range" --set "$theta=f32:inf"
refused "$theta = -inf" "key '$theta' = -inf is out of range" --set "$theta=f32:-inf"
refused "$theta = NaN" "key '$theta' = nan is out of range" --set "$theta=f32:nan"
refused "$theta = 1e300 (float64, infinite in float32)" "key '$theta' = 1e+300 is out of range" --set "$theta=f64:1e300"
refused "$theta = 1 (every pair rotating alike)" "key '$theta' = 1 is out of range" --set "$theta=f32:1"
refused "$theta = 0 (uint32)" "key '$theta' = 0 is out of range" --set "$theta=u32:0"
# general.architecture through the family table (model/arch.c): its keys
# are read under the family's name, a qwen2 file must hold the q/k/v biases
# (tests/gguf_oracle.py converts one that does), an unknown family is named
refused "general.architecture qwen2 over llama.* keys" "metadata key 'qwen2.embedding_length' is missing" \
    --set "general.architecture=str:qwen2"
refused "a qwen2 file without q/k/v biases" "no tensor for model.layers.0.self_attn.q_proj.bias" --arch qwen2
refused "general.architecture gemma" "general.architecture is 'gemma', an architecture kvcpt does not know" \
    --set "general.architecture=str:gemma"
refused "$eps = +inf" "key '$eps' = inf is out of range" --set "$eps=f32:inf"
refused "$eps = NaN" "key '$eps' = nan is out of range" --set "$eps=f32:nan"
refused "$eps = 0" "key '$eps' = 0 is out of range" --set "$eps=f32:0"
refused "$eps = -1e-5" "key '$eps' = -1e-05 is out of range" --set "$eps=f32:-1e-5"
refused "$eps = 1e-300 (float64, 0 in float32)" "key '$eps' = 1e-300 is out of range" --set "$eps=f64:1e-300"
refused "$eps = 2" "key '$eps' = 2 is out of range" --set "$eps=f32:2"
refused "llama.rope.scaling.factor = +inf" "key 'llama.rope.scaling.factor' = inf is out of range" \
    --set "llama.rope.scaling.factor=f32:inf"
refused "llama.rope.scaling.factor = 4 (linear by default in llama.cpp)" \
    "key 'llama.rope.scaling.factor' = 4 scales RoPE positions, which is not supported" --set "llama.rope.scaling.factor=f32:4"
refused "llama.rope.scale_linear = 2 (the older key)" "key 'llama.rope.scale_linear' = 2 scales RoPE positions" \
    --set "llama.rope.scale_linear=f32:2"
refused "llama.rope.scaling.factor = -1" "key 'llama.rope.scaling.factor' = -1 is out of range" \
    --set "llama.rope.scaling.factor=f32:-1"
refused "llama.rope.scaling.attn_factor = NaN" "key 'llama.rope.scaling.attn_factor' = nan is out of range" \
    --set "llama.rope.scaling.attn_factor=f32:nan"
refused "llama.rope.scaling.attn_factor = 0.5" "key 'llama.rope.scaling.attn_factor' = 0.5 is not supported" \
    --set "llama.rope.scaling.attn_factor=f32:0.5"
refused "llama.rope.scaling.type yarn" "llama.rope.scaling.type 'yarn' is not supported" --set "llama.rope.scaling.type=str:yarn"
if converted "$theta 500000 as float64, no scaling spelled three ways" --set "$theta=f64:500000" \
    --set "llama.rope.scaling.factor=f32:1" --set "llama.rope.scale_linear=f32:0" --set "llama.rope.scaling.type=str:linear"; then
    res=$(cfg "$last")
    [ "$res" = "500000.0 1e-05" ] && ok "$theta 500000 as float64 and the identity RoPE scaling convert: rope_theta 500000" ||
        fail "float64 $theta" "config.json rope_theta, rms_norm_eps = $res, want 500000.0 1e-05"
fi

# ---- the tokenizer
refused "no tokenizer.ggml.merges" "metadata key 'tokenizer.ggml.merges' is missing" --drop tokenizer.ggml.merges
refused "an empty tokenizer.ggml.merges" "tokenizer.ggml.merges is empty" --set 'tokenizer.ggml.merges=strs:[]'
refused "a merge of a string that is no token (\"x y\")" \
    'tokenizer.ggml.merges[2] ("x y"): its left token "x" is not in tokenizer.ggml.tokens' --merge "x y"
refused "a merge whose right half is no token (\"a y\")" \
    'tokenizer.ggml.merges[2] ("a y"): its right token "y" is not in tokenizer.ggml.tokens' --merge "a y"
refused "a merge whose result is no token (\"e n\")" \
    'tokenizer.ggml.merges[2] ("e n"): the merged token "en" is not in tokenizer.ggml.tokens' --merge "e n"
refused "a merge of merged tokens whose result is no token (\"ab \\u0120a\")" \
    'tokenizer.ggml.merges[2] ("ab Ġa"): the merged token "abĠa" is not in tokenizer.ggml.tokens' --merge "ab Ġa"
# Hugging Face takes a repeated merge at its later rank; kvcpt's loader
# refuses it, and the conversion checks what it built with that loader
refused "a repeated merge (kvcpt's tokenizer refuses it)" \
    "tokenizer.json built from gguf '$tmp/in$((n + 1)).gguf'': model.merges[2] repeats an earlier merge" --merge "a b"
# SentencePiece (tokenizer.ggml.model llama): scores instead of merges, one
# finite float32 per token (27 tokens)
scores() { "$PY" -c 'import json, sys; s = [-float(i) for i in range(int(sys.argv[1]))]
if len(sys.argv) > 2: s[int(sys.argv[2])] = float(sys.argv[3])
print(json.dumps(s))' "$@"; }
refused "llama tokenizer: scores of another count" "tokenizer.ggml.scores has 26 entries but tokenizer.ggml.tokens 27" \
    --model llama --set "tokenizer.ggml.scores=f32s:$(scores 26)"
refused "llama tokenizer: a NaN score" "tokenizer.ggml.scores[5] is not finite" \
    --model llama --set "tokenizer.ggml.scores=f32s:$(scores 27 5 nan)"
refused "llama tokenizer: integer scores" "key 'tokenizer.ggml.scores' is array of" \
    --model llama --set "tokenizer.ggml.scores=ints:[$(seq -s, 0 26)]"
refused "token type 42" "tokenizer.ggml.token_type[5] = 42 is not one of llama.cpp's token types" --token-type 5=42
refused "token type -1" "tokenizer.ggml.token_type[0] = -1 is not one of llama.cpp's token types" --token-type 0=-1
refused "token type 7 (one past byte)" "tokenizer.ggml.token_type[25] = 7 is not one of llama.cpp's token types" \
    --token-type 25=7

# every llama.cpp type converts (unused, byte and undefined as normal
# tokens, user-defined as a non-special added token), and what converts
# loads in kvcpt and in Hugging Face with the same ids
if converted "token types 0..6" --token-type 3=0 --token-type 4=2 --token-type 5=4 --token-type 6=5 --token-type 7=6; then
    printf '%s\n' '{"text": "ab aab 3a<|im_end|>bb"}' '{"text": "a a ab ba  n 0123 cab"}' >"$tmp/texts.jsonl"
    if ! "$K" tokenize --tokenizer "$last/tokenizer.json" --jsonl <"$tmp/texts.jsonl" >"$tmp/ours" 2>"$tmp/err"; then
        fail "the converted tokenizer.json loads in kvcpt" "$(head -3 "$tmp/err")"
    elif ! python_has "$PY" tokenizers; then
        ok "the converted tokenizer.json (types 0..6) loads in kvcpt"
        echo "skip - the converted tokenizer.json in Hugging Face tokenizers: not installed in $PY"
    elif "$PY" tests/tokenizer_oracle.py --engine hf --tokenizer "$last/tokenizer.json" --add-special \
        <"$tmp/texts.jsonl" >"$tmp/theirs" 2>"$tmp/err" && cmp -s "$tmp/ours" "$tmp/theirs"; then
        ok "the converted tokenizer.json (types 0..6, 27 tokens) loads in kvcpt and in HF tokenizers: ids equal ($(head -1 "$tmp/ours"))"
    else
        fail "converted tokenizer.json, kvcpt vs HF tokenizers" "ours $(tr '\n' '|' <"$tmp/ours"), theirs $(tr '\n' '|' <"$tmp/theirs") $(head -3 "$tmp/err")"
    fi
fi
