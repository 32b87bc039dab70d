#!/usr/bin/env bash
# Added tokens whose listed ids Hugging Face `tokenizers` does not use, and
# merges of two forms, against tokenizers itself. On a GPT-2 style
# vocabulary of 264 tokens (the 256 bytes in GPT-2's order, then 8 merges),
# each file lists added tokens: at a vocabulary token's id ("QQQ" at the id
# of "b"), far past the vocabulary (100000), with the content of a
# vocabulary token listed at another id ("\u00e9" at 264), and variants (the
# same as a special token, several at one id, a list out of order, a
# content written in the byte-level alphabet). For each, kvcpt's ids of a
# few texts, its decoding of every id and its vocabulary size must equal
# tokenizers'. A file whose merges mix "A B" strings and ["A", "B"] pairs is
# refused by both. Skips without tokenizers in the venv.
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
if ! python_has "$PY" tokenizers; then
    echo "skip - added tokens against HF tokenizers: tokenizers is not installed in $PY; run 'make setup'"
    exit 0
fi
# writes the files into $tmp and, for each, tokenizers' answers: NAME.want
# holds the vocabulary size, the ids of each text (special tokens parsed, as
# encode does by default) and the decoding of every
# id; the texts go to texts.jsonl and the ids to decode to NAME.all
"$PY" - "$tmp" <<'PY' || { fail "fixtures" "the Python fixture writer failed"; exit 0; }
import json, os, sys
from tokenizers import Tokenizer

out = sys.argv[1]
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, extra = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + extra)
        extra += 1
letter = dict(zip(bs, map(chr, cs)))  # GPT-2's bytes_to_unicode
vocab = {letter[b]: i for i, b in enumerate(bs)}  # GPT-2's order: printable bytes first
merges = []
for a, b in [("a", "b"), ("t", "h"), ("th", "e"), ("\u0120", "t"), ("i", "n"), ("o", "n"), ("e", "r"), ("\u0120", "the")]:
    merges.append(a + " " + b)
    vocab[a + b] = len(vocab)
assert len(vocab) == 264
base = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}}


def added(content, id, special=False):
    return {"id": id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


cases = {
    "taken_id": [added("QQQ", vocab["b"])],
    "far_id": [added("QQQ", 100000)],
    "vocab_content": [added("\u00e9", 264)],
    "vocab_content_special": [added("\u00e9", 264, special=True), added("<s>", 0, special=True)],
    "one_id_many": [added("AAA", 300), added("BBB", 264), added("\u00e9", 5), added("CCC", 264),
                    added("\u0120x", 0), added("ab", 1)],
    "out_of_order": [added("<b>", 265, special=True), added("<a>", 264, special=True), added("the", 7)],
}
texts = ["QQQ b \u00e9 AAA BBB CCC ab x the", "QQQQQQ bb caf\u00e9 <s>the<a><b> the ther", " x xx AAAB \u00e9\u00e9"]
with open(os.path.join(out, "texts.jsonl"), "w") as f:
    f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
for name, toks in cases.items():
    path = os.path.join(out, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dict(base, added_tokens=toks), f, ensure_ascii=False)
    tok = Tokenizer.from_file(path)
    n = tok.get_vocab_size(with_added_tokens=True)
    ids = list(range(n))
    with open(os.path.join(out, name + ".all"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    with open(os.path.join(out, name + ".want"), "w", encoding="utf-8") as f:
        f.write("vocabulary %d\n" % n)
        for t in texts:
            f.write(" ".join(map(str, tok.encode(t, add_special_tokens=False).ids)) + "\n")
        f.write(json.dumps(tok.decode(ids, skip_special_tokens=False)) + "\n")
for name, form in [("mixed_string_first", ["a b", ["t", "h"]]), ("mixed_pair_first", [["a", "b"], "t h"])]:
    path = os.path.join(out, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(dict(base, model=dict(base["model"], merges=form + merges[2:])), f, ensure_ascii=False)
    try:
        Tokenizer.from_file(path)
        print("loaded", file=open(os.path.join(out, name + ".hf"), "w"))
    except Exception as e:
        print("refused: %s" % e, file=open(os.path.join(out, name + ".hf"), "w"))
PY

for name in taken_id far_id vocab_content vocab_content_special one_id_many out_of_order; do
    f=$tmp/$name.json
    {
        # the vocabulary's size: one past the last id kvcpt decodes
        echo 4294967295 | "$K" tokenize --tokenizer "$f" --decode 2>&1 | sed -n 's/.*outside the vocabulary of \([0-9]*\).*/vocabulary \1/p'
        "$K" tokenize --tokenizer "$f" --jsonl --allow-special <"$tmp/texts.jsonl"
        "$K" tokenize --tokenizer "$f" --decode <"$tmp/$name.all" |
            "$PY" -c 'import json, sys; print(json.dumps(sys.stdin.buffer.read().decode("utf-8", "replace")))'
    } >"$tmp/$name.got" 2>"$tmp/$name.err"
    if cmp -s "$tmp/$name.want" "$tmp/$name.got"; then
        ok "added tokens, $name: vocabulary size, ids of 3 texts and the decoding of every id equal HF tokenizers' ($(head -1 "$tmp/$name.got"))"
    else
        fail "added tokens, $name" "kvcpt vs HF tokenizers: $(diff "$tmp/$name.got" "$tmp/$name.want" | head -6 | tr '\n' '|') $(grep -v warning "$tmp/$name.err" | head -3)"
    fi
done

for name in mixed_string_first mixed_pair_first; do
    "$K" tokenize --tokenizer "$tmp/$name.json" </dev/null >"$tmp/out" 2>&1; rc=$?
    if [ $rc -ge 1 ] && [ $rc -le 127 ] && grep -q "model.merges\[1\] is a .* but model.merges\[0\] is a" "$tmp/out" &&
        grep -q "^refused" "$tmp/$name.hf"; then
        ok "merges mixing \"A B\" strings and [A, B] pairs ($name): refused by kvcpt naming model.merges[1], as by HF tokenizers"
    else
        fail "merges mixing strings and pairs ($name)" "kvcpt exit $rc: $(head -c 300 "$tmp/out"); HF: $(cat "$tmp/$name.hf")"
    fi
done
