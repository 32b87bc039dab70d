#!/usr/bin/env bash
# Token ids of "$K" tokenize must equal the reference implementations on
# every document of ../shared/corpus and on tests/data/tokenizer_cases.jsonl:
#   Hugging Face `tokenizers` on the same tokenizer.json, with special tokens
#   as ordinary text (default) and parsed (--allow-special). Parsed, only
#   where Llama 3.0 and 3.1 name the special tokens alike: the shared
#   tokenizer.json has 3.0's names, kvcpt uses 3.1's (SPEC section 7), which
#   renamed 128004, 128005, 128008, 128010 and renumbered the reserved ones;
#   `tiktoken` with Meta's Llama 3 ranks and pattern (llama_models), specials
#   as ordinary text (Meta names some special tokens differently).
# One oracle process and one kvcpt process per set; outputs compared by cmp.
set -u
cd "$(dirname "$0")/.."
K=${KVCPT_BIN:-./kvcpt}
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
oracle=tests/tokenizer_oracle.py
tokjson=third_party/tokenizers/llama3.1/tokenizer.json
corpus_dir=${KVCPT_CORPUS:-../shared/corpus}
if ! "$PY" -c "import tokenizers, tiktoken, llama_models.llama3.tokenizer" 2>/dev/null || [ ! -f "$tokjson" ]; then
    echo "FAIL - tokenizer oracle: $PY cannot import tokenizers, tiktoken and llama_models, or $tokjson is missing; run 'make setup'"
    exit 1
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

compare() { # name engine jsonl-file flags...
    local name=$1 engine=$2 input=$3; shift 3
    if ! "$PY" "$oracle" --engine "$engine" --tokenizer "$tokjson" --roundtrip "$@" <"$input" >"$tmp/oracle.txt" 2>"$tmp/oracle.err"; then
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
compare "tokenizer ids == HF tokenizers, adversarial cases" hf "$cases"
grep -Ev 'reserved_special_token_|finetune_right_pad_id|eom_id|python_tag' "$cases" >"$tmp/same_names.jsonl"
compare "tokenizer ids == HF tokenizers, adversarial cases named alike in 3.0 and 3.1, --allow-special" hf \
    "$tmp/same_names.jsonl" --allow-special
compare "tokenizer ids == tiktoken (Meta's ranks), adversarial cases" tiktoken "$cases"
shopt -s nullglob
files=("$corpus_dir"/*.jsonl.zst)
if [ ${#files[@]} -eq 0 ]; then
    echo "FAIL - tokenizer ids on the corpus: no $corpus_dir/*.jsonl.zst"
else
    zstdcat "${files[@]}" >"$tmp/corpus.jsonl"
    compare "tokenizer ids == HF tokenizers, corpus" hf "$tmp/corpus.jsonl"
    compare "tokenizer ids == HF tokenizers, corpus, --allow-special" hf "$tmp/corpus.jsonl" --allow-special
    compare "tokenizer ids == tiktoken (Meta's ranks), corpus" tiktoken "$tmp/corpus.jsonl"
fi
