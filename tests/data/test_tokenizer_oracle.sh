#!/usr/bin/env bash
# Token ids of "$K" tokenize must equal the reference implementations on the
# documents of ../shared/corpus (each cut to its first $KVCPT_ORACLE_DOC_CHARS
# characters, 16000 by default, to keep the suite quick) and on
# tests/data/tokenizer_cases.jsonl (digits of many scripts, whitespace
# fringes, contractions, special tokens spelled out in the text) and 3000
# seeded random strings of such fringes (tests/tokenizer_fuzz.py):
#   Hugging Face `tokenizers` on the same tokenizer.json:
#   encode(text, add_special_tokens=True), so with the BOS the tokenizer's
#   post-processor adds (kvcpt tokenize --bos for Llama 3.1, nothing for
#   SmolLM2, which adds none), special tokens as ordinary text (default) and
#   parsed (--allow-special);
#   `tiktoken` with Meta's Llama 3 ranks and pattern (llama_models), Llama
#   3.1 only, specials as ordinary text (Meta names some special tokens
#   differently).
# Tokenizers: Llama 3.1 (required); SmolLM2-135M (Digits then GPT-2's
# pattern, no BOS, specials inside the vocabulary), and its vocabulary
# behind GPT-2's and Qwen2's pre-tokenizers (tests/tokenizer_fixtures.py),
# skipped when third_party/models/smollm2-135m/tokenizer.json is missing.
# With specials parsed, Llama 3.1 is compared only where Llama 3.0 and 3.1
# name the special tokens alike: the shared tokenizer.json has 3.0's names,
# kvcpt uses 3.1's (data/special_tokens.h), which renamed 128004, 128005, 128008,
# 128010 and renumbered the reserved ones.
# One oracle process and one kvcpt process per set; outputs compared by cmp.
set -u
cd "$(dirname "$0")/../.."
K=${KVCPT_BIN:-./kvcpt}
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
oracle=tests/tokenizer_oracle.py
llama=third_party/tokenizers/llama3.1/tokenizer.json
smollm2=third_party/models/smollm2-135m/tokenizer.json
corpus_dir=${KVCPT_CORPUS:-../shared/corpus}
doc_chars=${KVCPT_ORACLE_DOC_CHARS:-16000}
if ! "$PY" -c "import tokenizers, tiktoken, llama_models.llama3.tokenizer" 2>/dev/null || [ ! -f "$llama" ]; then
    echo "FAIL - tokenizer oracle: $PY cannot import tokenizers, tiktoken and llama_models, or $llama is missing; run 'make setup'"
    exit 1
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# compare NAME ENGINE TOKENIZER INPUT "ORACLE FLAGS" [KVCPT FLAGS...]
compare() {
    local name=$1 engine=$2 tokjson=$3 input=$4 oflags=$5; shift 5
    # shellcheck disable=SC2086 # the oracle's flags are words
    if ! "$PY" "$oracle" --engine "$engine" --tokenizer "$tokjson" $oflags <"$input" >"$tmp/oracle.txt" 2>"$tmp/oracle.err"; then
        echo "FAIL - $name: oracle failed: $(head -3 "$tmp/oracle.err")"; return
    fi
    if ! "$K" tokenize --tokenizer "$tokjson" --jsonl "$@" <"$input" >"$tmp/ours.txt" 2>"$tmp/ours.err"; then
        echo "FAIL - $name: kvcpt tokenize failed: $(head -3 "$tmp/ours.err")"; return
    fi
    local docs; docs=$(wc -l <"$tmp/oracle.txt")
    if cmp -s "$tmp/oracle.txt" "$tmp/ours.txt"; then
        echo "ok - $name ($docs documents identical)"
    else
        local line; line=$(diff <(cat -n "$tmp/oracle.txt") <(cat -n "$tmp/ours.txt") | sed -n '2s/^< *\([0-9]*\).*/\1/p')
        echo "FAIL - $name: ids differ from the oracle at document ${line:-?} of $docs"
    fi
}

cases=tests/data/tokenizer_cases.jsonl
fuzz=$tmp/fuzz.jsonl
"$PY" tests/tokenizer_fuzz.py 3000 1 >"$fuzz" || echo "FAIL - tokenizer_fuzz.py did not run"
shopt -s nullglob
files=("$corpus_dir"/*.jsonl.zst)
corpus=""
if [ ${#files[@]} -eq 0 ]; then
    echo "FAIL - tokenizer ids on the corpus: no $corpus_dir/*.jsonl.zst"
else
    corpus=$tmp/corpus.jsonl
    zstdcat "${files[@]}" | "$PY" -c '
import json, sys
n = int(sys.argv[1])
for line in sys.stdin:
    if line.strip():
        print(json.dumps({"text": json.loads(line)["text"][:n]}))' "$doc_chars" >"$corpus"
fi

# Llama 3.1: BOS from its TemplateProcessing; ignore_merges; 256 specials after the vocabulary
compare "Llama 3.1 ids == HF tokenizers, adversarial cases" hf "$llama" "$cases" "--add-special --roundtrip" --bos
grep -Ev 'reserved_special_token_|finetune_right_pad_id|eom_id|python_tag' "$cases" >"$tmp/same_names.jsonl"
compare "Llama 3.1 ids == HF tokenizers, adversarial cases named alike in 3.0 and 3.1, --allow-special" hf "$llama" \
    "$tmp/same_names.jsonl" "--add-special --allow-special --roundtrip" --bos --allow-special
compare "Llama 3.1 ids == tiktoken (Meta's ranks), adversarial cases" tiktoken "$llama" "$cases" "--roundtrip"
compare "Llama 3.1 ids == HF tokenizers, random fringe strings, --allow-special" hf "$llama" "$fuzz" \
    "--add-special --allow-special --roundtrip" --bos --allow-special
compare "Llama 3.1 ids == tiktoken (Meta's ranks), random fringe strings" tiktoken "$llama" "$fuzz" "--roundtrip"
if [ -n "$corpus" ]; then
    compare "Llama 3.1 ids == HF tokenizers, corpus" hf "$llama" "$corpus" "--add-special --roundtrip" --bos
    compare "Llama 3.1 ids == HF tokenizers, corpus, --allow-special" hf "$llama" "$corpus" \
        "--add-special --allow-special --roundtrip" --bos --allow-special
    compare "Llama 3.1 ids == tiktoken (Meta's ranks), corpus" tiktoken "$llama" "$corpus" "--roundtrip"
fi

# long runs of one kind of character, each one pre-token or many: white space
# (spaces, then a word, tabs and line breaks mixed in, line breaks alone), a
# letter, a digit.
"$PY" - "$tmp/runs.jsonl" "$tmp/runs_huge.jsonl" <<'PY'
import json, sys
runs = [" " * 100000, " " * 1000000, " " * 1000000 + "word", "word" + " " * 999999 + "\n", " \t\n" * 300000,
        "\t \r\n  " * 150000 + "x", "\n" * 1000000, "\r\n" * 400000 + " tail", " " * 500000 + "\n" + " " * 500000 + "x",
        "x" + "\u3000 " * 300000 + "y", "a" * 1000000, "7" * 1000000, "x " * 400000]
with open(sys.argv[1], "w") as f:
    f.writelines(json.dumps({"text": t}) + "\n" for t in runs)
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"text": " " * 10500000 + "a"}) + "\n")
PY
compare "Llama 3.1 ids == HF tokenizers, runs of 1e5-1e6 spaces, line breaks, mixed white space, letters, digits" \
    hf "$llama" "$tmp/runs.jsonl" "--add-special --roundtrip" --bos
# Llama 3's \s*[\r\n]+ takes a white-space run whole, then backs off a
# character at a time looking for a line break: past 10 million characters
# that exceeds PCRE2's default match limit, and Oniguruma's retry limit in
# Hugging Face too (it panics). kvcpt lifts the limit; the reference is then
# Hugging Face with GPT-2's pattern in the Split, which cuts this text into
# the same two pieces as Llama 3's (all spaces but the last, then " a")
# without backing off, and Llama 3.1's own BPE.
"$PY" -c 'import json, sys
j = json.load(open(sys.argv[1]))
split = j["pre_tokenizer"]["pretokenizers"][0]
assert split["type"] == "Split"
split["pattern"]["Regex"] = r"\x27s|\x27t|\x27re|\x27ve|\x27m|\x27ll|\x27d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
json.dump(j, open(sys.argv[2], "w"))' "$llama" "$tmp/llama_gpt2_split.json"
if ! "$PY" "$oracle" --engine hf --tokenizer "$tmp/llama_gpt2_split.json" --add-special <"$tmp/runs_huge.jsonl" \
    >"$tmp/oracle.txt" 2>"$tmp/oracle.err"; then
    echo "FAIL - Llama 3.1, 10.5 million spaces then a word: oracle failed: $(tail -2 "$tmp/oracle.err")"
elif ! "$K" tokenize --tokenizer "$llama" --jsonl --bos <"$tmp/runs_huge.jsonl" >"$tmp/ours.txt" 2>"$tmp/ours.err"; then
    echo "FAIL - Llama 3.1, 10.5 million spaces then a word: kvcpt tokenize failed: $(head -2 "$tmp/ours.err")"
elif cmp -s "$tmp/oracle.txt" "$tmp/ours.txt"; then
    echo "ok - Llama 3.1, 10.5 million spaces then a word (past PCRE2's default match limit): ids == HF tokenizers' BPE of the same pieces"
else
    echo "FAIL - Llama 3.1, 10.5 million spaces then a word: ids differ from HF tokenizers' BPE of the same pieces"
fi

# no ids decode to no text: Hugging Face's decode([]) is "", which is valid
# UTF-8, so --json prints {"text": ""} and the raw output is empty
want=$("$PY" -c 'import json, sys; from tokenizers import Tokenizer
print(json.dumps({"text": Tokenizer.from_file(sys.argv[1]).decode([])}))' "$llama")
for input in "" "[]"; do
    got=$(printf '%s' "$input" | "$K" tokenize --tokenizer "$llama" --decode --json 2>"$tmp/dec.err")
    rc=$?
    raw=$(printf '%s' "$input" | "$K" tokenize --tokenizer "$llama" --decode 2>>"$tmp/dec.err" | od -An -c)
    rc_raw=$?
    if [ $rc -eq 0 ] && [ "$got" = "$want" ] && [ $rc_raw -eq 0 ] && [ -z "$raw" ]; then
        echo "ok - tokenize --decode of '$input' (no ids): --json prints $want as HF decode([]), raw prints nothing"
    else
        echo "FAIL - tokenize --decode of '$input' (no ids): --json gave '$got' (status $rc, want '$want'), raw '$raw': $(head -2 "$tmp/dec.err")"
    fi
done

# SmolLM2 and the GPT-2 / Qwen2 styles on its vocabulary: no BOS, 17 specials
# at ids 0..16, a few control bytes without a token (so no round trip)
if [ ! -f "$smollm2" ]; then
    echo "skip - SmolLM2, GPT-2 and Qwen2 style tokenizer ids: $smollm2 is missing (make setup installs it)"
    exit 0
fi
if "$K" tokenize --tokenizer "$smollm2" --bos </dev/null >/dev/null 2>"$tmp/bos.err"; then
    echo "FAIL - SmolLM2: tokenize --bos accepted although its post-processor adds no BOS"
else
    grep -q "adds no BOS" "$tmp/bos.err" && echo "ok - SmolLM2: tokenize --bos refused, it adds no BOS" \
        || echo "FAIL - SmolLM2: tokenize --bos refused without saying why: $(head -2 "$tmp/bos.err")"
fi
compare "SmolLM2 ids == HF tokenizers, adversarial cases" hf "$smollm2" "$cases" "--add-special"
compare "SmolLM2 ids == HF tokenizers, adversarial cases, --allow-special" hf "$smollm2" "$cases" \
    "--add-special --allow-special" --allow-special
compare "SmolLM2 ids == HF tokenizers, random fringe strings" hf "$smollm2" "$fuzz" "--add-special"
compare "SmolLM2 ids == HF tokenizers, runs of 1e5-1e6 spaces, line breaks, mixed white space, letters, digits" \
    hf "$smollm2" "$tmp/runs.jsonl" "--add-special"
if [ -n "$corpus" ]; then
    compare "SmolLM2 ids == HF tokenizers, corpus" hf "$smollm2" "$corpus" "--add-special"
    compare "SmolLM2 ids == HF tokenizers, corpus, --allow-special" hf "$smollm2" "$corpus" \
        "--add-special --allow-special" --allow-special
fi
if ! "$PY" tests/tokenizer_fixtures.py "$smollm2" "$tmp/styles" 2>"$tmp/fixtures.err"; then
    echo "FAIL - GPT-2 and Qwen2 style tokenizers: tests/tokenizer_fixtures.py failed: $(head -3 "$tmp/fixtures.err")"
    exit 0
fi
for style in gpt2 qwen2; do
    compare "$style-style ids == HF tokenizers, adversarial cases" hf "$tmp/styles/$style.json" "$cases" "--add-special"
    compare "$style-style ids == HF tokenizers, adversarial cases, --allow-special" hf "$tmp/styles/$style.json" "$cases" \
        "--add-special --allow-special" --allow-special
    compare "$style-style ids == HF tokenizers, random fringe strings, --allow-special" hf "$tmp/styles/$style.json" \
        "$fuzz" "--add-special --allow-special" --allow-special
done
