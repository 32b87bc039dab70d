#!/usr/bin/env bash
# Token ids of ./kvcpt tokenize must equal llama3-tokenizer-js (node) on every
# document of ../shared/corpus and on tests/data/tokenizer_cases.jsonl, with
# special tokens as ordinary text (default) and parsed (--allow-special).
# One node process and one kvcpt process per set; outputs compared by cmp.
set -u
cd "$(dirname "$0")/.."
oracle=data/oracle/llama3_oracle.mjs
corpus_dir=${KVCPT_CORPUS:-../shared/corpus}
if ! command -v node >/dev/null || [ ! -d third_party/node_modules/llama3-tokenizer-js ]; then
    echo "skip - tokenizer oracle: node or llama3-tokenizer-js missing (run make setup)"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

compare() { # name jsonl-file flags...
    local name=$1 input=$2; shift 2
    if ! node "$oracle" --roundtrip "$@" <"$input" >"$tmp/oracle.txt" 2>"$tmp/oracle.err"; then
        echo "FAIL - $name: oracle failed: $(head -3 "$tmp/oracle.err")"; return
    fi
    if ! ./kvcpt tokenize --jsonl "$@" <"$input" >"$tmp/ours.txt" 2>"$tmp/ours.err"; then
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

compare "tokenizer ids == oracle, adversarial cases" tests/data/tokenizer_cases.jsonl
compare "tokenizer ids == oracle, adversarial cases, --allow-special" tests/data/tokenizer_cases.jsonl --allow-special
shopt -s nullglob
files=("$corpus_dir"/*.jsonl.zst)
if [ ${#files[@]} -eq 0 ]; then
    echo "skip - tokenizer ids == oracle on the corpus: no $corpus_dir/*.jsonl.zst"
else
    zstdcat "${files[@]}" >"$tmp/corpus.jsonl"
    compare "tokenizer ids == oracle, corpus" "$tmp/corpus.jsonl"
    compare "tokenizer ids == oracle, corpus, --allow-special" "$tmp/corpus.jsonl" --allow-special
fi
