#!/usr/bin/env bash
# The tokenizer families beyond GPT-2-style byte-level BPE against Hugging
# Face `tokenizers`, on files it trains here from the corpus
# (tests/tokenizer_families.py, a few seconds):
#   SentencePiece-style BPE (vocabulary as text, "<0xNN>" byte fallback,
#   <unk>, <s> in front) in four layouts: Llama 2 / TinyLlama's legacy
#   normalizer Prepend("▁") + Replace(" " -> "▁") with no pre-tokenizer,
#   Metaspace prepend_scheme first without split (Mistral, Llama 2
#   non-legacy), Metaspace always and never with split and the Metaspace
#   decoder, and a vocabulary lacking two byte tokens (<unk>, fused);
#   byte-level BPE with Qwen2's normalizer NFC and its split pattern.
# For each: kvcpt tokenize's ids equal encode()'s on held-out text (later
# parts of the documents than trained on, NFD input, combining marks, emoji,
# CJK, control bytes, characters only the byte fallback covers, long runs of
# spaces and digits) and 1000 fringe strings (tests/tokenizer_fuzz.py),
# special tokens as text and parsed; `tokenize --decode --jsonl` equals
# decode() on those ids and on 2000 seeded random id sequences heavy in
# byte tokens (valid and broken UTF-8 for ByteFallback); added tokens with
# normalized true matched in normalized text; `prepare` writes
# Hugging Face's ids into its shards. Then GGUF files
# carrying these tokenizers (llama SentencePiece with scores, gpt2 with pre
# qwen2), written by the gguf package, through `kvcpt convert`
# (tests/gguf_tokenizer_oracle.py): ids equal to transformers' GGUF
# tokenizer conversion. Skips without tokenizers or the corpus (the GGUF
# part without gguf, transformers or numpy).
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
oracle=tests/tokenizer_oracle.py
corpus_dir=${KVCPT_CORPUS:-../shared/corpus}
if ! python_has "$PY" tokenizers; then
    echo "skip - tokenizer families: tokenizers is not installed in $PY; run 'make setup'"
    exit 0
fi
shopt -s nullglob
files=("$corpus_dir"/*.jsonl.zst)
if [ ${#files[@]} -eq 0 ]; then
    echo "skip - tokenizer families: no $corpus_dir/*.jsonl.zst to train on"
    exit 0
fi
if ! zstdcat "${files[@]}" | "$PY" tests/tokenizer_families.py "$tmp" 2>"$tmp/train.err"; then
    fail "tokenizer families" "tests/tokenizer_families.py failed: $(tail -3 "$tmp/train.err")"
    exit 0
fi
held=$tmp/heldout.jsonl
"$PY" tests/tokenizer_fuzz.py 1000 7 >"$tmp/fuzz.jsonl"

# ids NAME TOKENIZER INPUT "ORACLE FLAGS" [KVCPT FLAGS...]: the oracle's ids stay in $tmp/oracle.txt
ids() {
    local name=$1 tokjson=$2 input=$3 oflags=$4; shift 4
    # shellcheck disable=SC2086 # the oracle's flags are words
    if ! "$PY" "$oracle" --engine hf --tokenizer "$tokjson" $oflags <"$input" >"$tmp/oracle.txt" 2>"$tmp/oracle.err"; then
        fail "$name" "oracle failed: $(head -3 "$tmp/oracle.err")"; return 1
    fi
    if ! "$K" tokenize --tokenizer "$tokjson" --jsonl "$@" <"$input" >"$tmp/ours.txt" 2>"$tmp/ours.err"; then
        fail "$name" "kvcpt tokenize failed: $(head -3 "$tmp/ours.err")"; return 1
    fi
    local docs; docs=$(wc -l <"$tmp/oracle.txt")
    if cmp -s "$tmp/oracle.txt" "$tmp/ours.txt"; then
        ok "$name ($docs documents identical)"
    else
        local line; line=$(diff <(cat -n "$tmp/oracle.txt") <(cat -n "$tmp/ours.txt") | sed -n '2s/^< *\([0-9]*\).*/\1/p')
        fail "$name" "ids differ from the oracle at document ${line:-?} of $docs"
    fi
}

# decoded NAME TOKENIZER IDS: decode() of each line of ids, compared as JSON strings
decoded() {
    local name=$1 tokjson=$2 input=$3
    if ! "$PY" "$oracle" --engine hf --tokenizer "$tokjson" --decode <"$input" >"$tmp/dec_oracle.jsonl" 2>"$tmp/oracle.err"; then
        fail "$name" "oracle failed: $(head -3 "$tmp/oracle.err")"; return
    fi
    if ! "$K" tokenize --tokenizer "$tokjson" --decode --jsonl <"$input" >"$tmp/dec_ours.jsonl" 2>"$tmp/ours.err"; then
        fail "$name" "kvcpt tokenize --decode failed: $(head -3 "$tmp/ours.err")"; return
    fi
    local why
    if why=$("$PY" -c 'import json, sys
a = [json.loads(l)["text"] for l in open(sys.argv[1])]
b = [json.loads(l)["text"] for l in open(sys.argv[2])]
bad = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
if bad:
    i = bad[0]
    sys.exit("%d of %d sequences differ, the first at line %d: %r vs %r" % (len(bad), len(a), i + 1,
             a[i] if i < len(a) else None, b[i] if i < len(b) else None))
print(len(a))' "$tmp/dec_oracle.jsonl" "$tmp/dec_ours.jsonl" 2>&1); then
        ok "$name ($why sequences decode identically)"
    else
        fail "$name" "$why"
    fi
}

# seeded random id sequences over VOCAB, heavy in the byte tokens 3..258
random_ids() {
    "$PY" - "$1" <<'PY'
import random, sys
n_vocab = int(sys.argv[1])
rng = random.Random(11)
utf8_bytes = [0x20, 0x41, 0xC3, 0xA9, 0xE4, 0xB8, 0xAD, 0xF0, 0x9F, 0xA6, 0x99, 0x80]
for _ in range(2000):
    seq = [rng.choice([rng.randrange(n_vocab), rng.randint(3, 258), 3 + rng.choice(utf8_bytes)])
           for _ in range(rng.randint(0, 12))]
    print(" ".join(map(str, seq)))
PY
}

for name in sp_legacy sp_first sp_always sp_never sp_holes qwen2_nfc; do
    tok=$tmp/$name.json
    bos=--bos; [ "$name" = qwen2_nfc ] && bos=""
    ids "$name ids == HF tokenizers, held-out text and fringes" "$tok" "$held" "" && cp "$tmp/oracle.txt" "$tmp/held_ids.txt"
    # shellcheck disable=SC2086 # empty or one flag
    ids "$name ids == HF tokenizers, held-out text, its BOS, --allow-special" "$tok" "$held" \
        "--add-special --allow-special" $bos --allow-special
    if ids "$name ids == HF tokenizers, random fringe strings, --allow-special" "$tok" "$tmp/fuzz.jsonl" \
        "--allow-special" --allow-special; then
        cat "$tmp/held_ids.txt" "$tmp/oracle.txt" >"$tmp/both_ids.txt"
        decoded "$name decode == HF tokenizers, ids of the held-out text and fringe strings" "$tok" "$tmp/both_ids.txt"
    fi
    if [ "$name" != qwen2_nfc ]; then
        n_vocab=$("$PY" -c 'import sys
from tokenizers import Tokenizer
print(Tokenizer.from_file(sys.argv[1]).get_vocab_size())' "$tok")
        random_ids "$n_vocab" >"$tmp/random_ids.txt"
        decoded "$name decode == HF tokenizers, random id sequences heavy in byte tokens" "$tok" "$tmp/random_ids.txt"
    fi
done

# added tokens with normalized true are matched in normalized text, their
# content normalized too: "foo bar" behind the legacy Prepend + Replace is
# "▁foo▁bar", "cafe\u0301" behind NFC is "caf\u00e9"
"$PY" - "$tmp" <<'PY'
import json, os, sys
d = sys.argv[1]
for src, dst in (("sp_legacy", "sp_normadd"), ("qwen2_nfc", "qwen2_normadd")):
    j = json.load(open(os.path.join(d, src + ".json"), encoding="utf-8"))
    n = len(j["model"]["vocab"])
    j["added_tokens"] += [{"id": n + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                           "normalized": True, "special": False} for i, c in enumerate(["foo bar", "cafe\u0301"])]
    json.dump(j, open(os.path.join(d, dst + ".json"), "w", encoding="utf-8"), ensure_ascii=False)
with open(os.path.join(d, "normadd.jsonl"), "w") as f:
    for t in ["say foo bar now", "foo bar", "xfoo bar", "a caf\u00e9 and cafe\u0301 x", "cafe\u0301"]:
        f.write(json.dumps({"text": t}) + "\n")
PY
cat "$tmp/normadd.jsonl" "$held" >"$tmp/normadd_all.jsonl"
for name in sp_normadd qwen2_normadd; do
    ids "$name (normalized added tokens) ids == HF tokenizers" "$tmp/$name.json" "$tmp/normadd_all.jsonl" ""
done

# prepare tokenizes with the same tokenizer: every kept document holds
# Hugging Face's encode(text) (its BOS in front, special tokens as text)
for name in sp_legacy qwen2_nfc; do
    if ! "$K" prepare --input "$held" --tokenizer "$tmp/$name.json" --min-tokens 1 --split none --threads 2 \
        --out "$tmp/prep_$name" >"$tmp/prep.log" 2>&1; then
        fail "$name: prepare" "$(tail -3 "$tmp/prep.log")"; continue
    fi
    if why=$("$PY" - "$held" "$tmp/$name.json" "$tmp/prep_$name" 2>&1 <<'PY'
import json, sys
sys.path.insert(0, "tests")
from kvpress_peer import read_docs
from tokenizers import Tokenizer
held, tok_path, data = sys.argv[1:4]
tok = Tokenizer.from_file(tok_path)
tok.encode_special_tokens = True  # prepare reads special tokens as text unless --allow-special
want = sorted(tok.encode(json.loads(l)["text"]).ids for l in open(held, encoding="utf-8"))
got = sorted([int(x) for x in d] for split in json.load(open(data + "/manifest.json"))["splits"] for d in read_docs(data, split))
want = [w for w in want if len(w) >= 1]
missing = [w for w in got if w not in want]
assert got and not missing, "%d of %d prepared documents are no document's HF ids (first ids %s)" % (
    len(missing), len(got), missing[0][:8] if missing else None)
print(len(got))
PY
    ); then
        ok "$name: prepare writes HF tokenizers' ids for each of its $why documents"
    else
        fail "$name: prepare's ids" "$(tail -2 <<<"$why")"
    fi
done

# the fixtures exercise what they are for: byte fallback on the held-out text,
# and NFC changing some of it
"$PY" "$oracle" --engine hf --tokenizer "$tmp/sp_first.json" <"$held" >"$tmp/sp_ids.txt"
n_bytes=$(tr ' ' '\n' <"$tmp/sp_ids.txt" | awk '$1 >= 3 && $1 <= 258' | wc -l)
n_nfc=$("$PY" -c 'import json, sys, unicodedata
print(sum(unicodedata.normalize("NFC", json.loads(l)["text"]) != json.loads(l)["text"] for l in open(sys.argv[1])))' "$held")
if [ "$n_bytes" -gt 50 ] && [ "$n_nfc" -ge 3 ]; then
    ok "the held-out text needs the byte fallback ($n_bytes byte tokens) and NFC ($n_nfc texts change)"
else
    fail "held-out text" "$n_bytes byte tokens, $n_nfc texts that NFC changes: the comparison would not test them"
fi

if python_has "$PY" gguf transformers numpy; then
    HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1 OMP_NUM_THREADS=1 \
        "$PY" tests/gguf_tokenizer_oracle.py --kvcpt "$K" --families "$tmp" --workdir "$tmp/gguf" \
        >"$tmp/gguf.out" 2>"$tmp/gguf.err"
    rc=$?
    cat "$tmp/gguf.out"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL' "$tmp/gguf.out"; then
        fail "GGUF tokenizer oracle" "tests/gguf_tokenizer_oracle.py exited $rc: $(tail -3 "$tmp/gguf.err")"
    fi
else
    echo "skip - GGUF tokenizers of these families: gguf, transformers or numpy is not installed in $PY"
fi
