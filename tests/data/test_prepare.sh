#!/usr/bin/env bash
# kvcpt prepare: shard contents equal `kvcpt tokenize --bos` of the kept
# documents (Llama 3.1; with SmolLM2, which adds no BOS, `kvcpt tokenize`,
# the manifest and the shard flags saying so), split counts add up, output is independent of the thread count,
# input hashes are right; every kind of bad input fails naming the file
# and position, leaving the previous complete dataset as it was and nothing
# half-written (docs/data.md); --out inside an input directory is not read back as
# input, and a killed run's leftovers do not get in the next run's way.
set -u
cd "$(dirname "$0")/../.."
K=${KVCPT_BIN:-./kvcpt}
corpus=${KVCPT_CORPUS:-../shared/corpus}
if [ ! -f third_party/tokenizers/llama3.1/tokenizer.json ]; then
    echo "skip - prepare: tokenizer.json missing (run make setup)"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }

# --- a small mixed input: plain .jsonl, .jsonl.zst, .txt, in a directory ---
mkdir -p "$tmp/in/sub"
zstdcat "$corpus/books.jsonl.zst" | head -n 30 >"$tmp/in/books.jsonl"
zstdcat "$corpus/arxiv-latex.jsonl.zst" | head -n 20 | zstd -q -o "$tmp/in/sub/arxiv.jsonl.zst"
printf 'A short text file.\nSecond line.\n' >"$tmp/in/sub/note.txt"
printf '{"text": "tiny"}\n\n{"text": "also tiny", "meta": {}}\n' >"$tmp/in/tiny.jsonl"

"$K" prepare --input "$tmp/in" --out "$tmp/out1" --min-tokens 6 --threads 1 2>"$tmp/log1" \
    && "$K" prepare --input "$tmp/in" --out "$tmp/out2" --min-tokens 6 --threads 2 2>"$tmp/log2"
if [ $? -ne 0 ]; then fail "prepare runs" "$(tail -3 "$tmp/log1" "$tmp/log2")"; exit 0; fi
ok "prepare runs on a directory of .jsonl, .jsonl.zst and .txt"

same=1
for f in manifest.json train/shard_000000.bin dev/shard_000000.bin test/shard_000000.bin; do
    [ -f "$tmp/out1/$f" ] || continue
    cmp -s "$tmp/out1/$f" "$tmp/out2/$f" || same=0
done
[ $same -eq 1 ] && ok "output is identical with 1 and 2 threads" || fail "thread independence" "outputs differ"

# expected ids: every document through `kvcpt tokenize --bos`, in input order
{
    cat "$tmp/in/books.jsonl" "$tmp/in/tiny.jsonl" | grep -v '^$'
    zstdcat "$tmp/in/sub/arxiv.jsonl.zst"
    python3 -c 'import json,sys; print(json.dumps({"text": open(sys.argv[1], encoding="utf-8").read()}))' "$tmp/in/sub/note.txt"
} >"$tmp/all.jsonl"
"$K" tokenize --jsonl --bos <"$tmp/all.jsonl" >"$tmp/expected.txt"
# check_shards OUT EXPECTED BOS_ID|none SPECIAL_NAMES: contents, counts, BOS fields
check_shards() {
python3 - "$@" >"$tmp/check.txt" 2>&1 <<'PY'
import hashlib, json, struct, sys, os
out, expected_path, bos, names = sys.argv[1:5]
m = json.load(open(os.path.join(out, "manifest.json")))
want_bos = None if bos == "none" else int(bos)
assert m["tokenizer"]["bos_id"] == want_bos and m["bos_prepended"] == (want_bos is not None), "manifest BOS fields"
assert m["tokenizer"]["special_token_names"] == names, "special_token_names"
docs = {}
for split, info in m["splits"].items():
    got = []
    for sh in info["shards"]:
        b = open(os.path.join(out, sh["file"]), "rb").read()
        magic, ver, hb, nd, nt, idx = struct.unpack_from("<8sIIQQQ", b)
        assert magic == b"KVTOKSHD" and ver == 1 and hb == 64, "header"
        flags = struct.unpack_from("<I", b, 44)[0]
        assert flags == (1 if want_bos is not None else 0), "shard flag BOS"
        assert len(b) == idx + 8 * (nd + 1), "size"
        toks = struct.unpack_from("<%dI" % nt, b, 64)
        offs = struct.unpack_from("<%dQ" % (nd + 1), b, idx)
        got += [" ".join(map(str, toks[offs[i]:offs[i + 1]])) for i in range(nd)]
    assert len(got) == info["documents"], "documents count of " + split
    assert sum(len(d.split()) for d in got) == info["tokens"], "token count of " + split
    docs[split] = got
expected = [l.rstrip("\n") for l in open(expected_path)]
kept = [e for e in expected if len(e.split()) >= m["min_tokens"]]
every = docs["train"] + docs["dev"] + docs["test"]
assert sorted(every) == sorted(kept), "shards hold %d docs, expected %d kept" % (len(every), len(kept))
assert want_bos is None or all(d.startswith("%d " % want_bos) for d in every), "BOS"
assert m["documents_read"] == len(expected) and m["documents_dropped_short"] == len(expected) - len(kept), "counts"
for i in m["inputs"]:
    assert hashlib.sha256(open(i["path"], "rb").read()).hexdigest() == i["sha256"], "sha256 of " + i["path"]
print("checked", len(every), "documents")
PY
}
check_shards "$tmp/out1" "$tmp/expected.txt" 128000 llama-3.1
[ $? -eq 0 ] && ok "shards hold exactly the kept documents, ids == kvcpt tokenize --bos; counts, sha256, BOS 128000 in manifest and shard flags" \
             || fail "shard contents" "$(tail -3 "$tmp/check.txt")"

# each input's kept documents per split (manifest inputs[].kept_per_split):
# a split holds them in input order, so the split's documents from cum to
# cum + count are that input's kept documents of the split, in the input's
# order, and an input's three ranges hold all its kept documents
for f in books.jsonl tiny.jsonl sub/note.txt sub/arxiv.jsonl.zst; do
    case "$f" in
        *.txt) python3 -c 'import json,sys; print(json.dumps({"text": open(sys.argv[1], encoding="utf-8").read()}))' "$tmp/in/$f" ;;
        *.zst) zstdcat "$tmp/in/$f" ;;
        *) grep -v '^$' "$tmp/in/$f" ;;
    esac | "$K" tokenize --jsonl --bos >"$tmp/exp-$(basename "$f").txt"
done
if python3 - "$tmp/out1" "$tmp" >"$tmp/per.txt" 2>&1 <<'PY'
import json, os, struct, sys
out, t = sys.argv[1:3]
m = json.load(open(os.path.join(out, "manifest.json")))
split_docs = {}
for split, info in m["splits"].items():
    got = []
    for sh in info["shards"]:
        b = open(os.path.join(out, sh["file"]), "rb").read()
        nd, nt, idx = struct.unpack_from("<QQQ", b, 16)
        toks = struct.unpack_from("<%dI" % nt, b, 64)
        offs = struct.unpack_from("<%dQ" % (nd + 1), b, idx)
        got += [" ".join(map(str, toks[offs[i]:offs[i + 1]])) for i in range(nd)]
    split_docs[split] = got
at = {s: 0 for s in split_docs}
for i in m["inputs"]:
    n = i["kept_per_split"]
    assert sum(n.values()) == i["documents_kept"], "%s: kept_per_split %r, documents_kept %d" % (i["path"], n, i["documents_kept"])
    kept = [l.rstrip("\n") for l in open(os.path.join(t, "exp-" + os.path.basename(i["path"]) + ".txt"))]
    kept = [d for d in kept if len(d.split()) >= m["min_tokens"]]
    mine = []
    for s in ("train", "dev", "test"):
        part = split_docs[s][at[s]:at[s] + n[s]]
        it = iter(kept)
        assert all(d in it for d in part), "%s: its %s documents are not in its order" % (i["path"], s)
        mine += part
        at[s] += n[s]
    assert sorted(mine) == sorted(kept), "%s: its ranges hold %d documents, it kept %d" % (i["path"], len(mine), len(kept))
assert at == {s: len(d) for s, d in split_docs.items()}, "the inputs' counts do not cover the splits: %r" % at
print(", ".join("%s %r" % (os.path.basename(i["path"]), i["kept_per_split"]) for i in m["inputs"]))
PY
then ok "manifest: each input's kept documents per split, the split's documents in input order ($(tail -1 "$tmp/per.txt"))"
else fail "kept_per_split" "$(tail -3 "$tmp/per.txt")"; fi

# --- SmolLM2: its post-processor adds no BOS, so neither does prepare ---
smollm2=third_party/models/smollm2-135m/tokenizer.json
if [ -f "$smollm2" ]; then
    if "$K" prepare --input "$tmp/in" --out "$tmp/out_sm" --min-tokens 6 --tokenizer "$smollm2" 2>"$tmp/log_sm" \
        && "$K" tokenize --tokenizer "$smollm2" --jsonl <"$tmp/all.jsonl" >"$tmp/expected_sm.txt" \
        && check_shards "$tmp/out_sm" "$tmp/expected_sm.txt" none added_tokens; then
        ok "SmolLM2: no BOS prepended, ids == kvcpt tokenize; manifest bos_id null, bos_prepended false, shard flag clear"
    else
        fail "SmolLM2 prepare" "$(tail -3 "$tmp/log_sm" "$tmp/check.txt")"
    fi
else
    echo "skip - SmolLM2 prepare: $smollm2 is missing (make setup installs it)"
fi

# --- bad input: error names file + position, non-zero exit. The new dataset
# is built beside --out and replaces the previous one only once complete, so
# an error, even one met while reading the last input, leaves the previous
# complete dataset exactly as it was, and no build directory behind. ---
bad_case() { # name expected-substring file
    local name=$1 expect=$2 input=$3 out="$tmp/bad_out"
    rm -rf "$out"; cp -r "$tmp/out1" "$out"
    "$K" prepare --input "$tmp/in/books.jsonl" --input "$input" --out "$out" --min-tokens 6 2>"$tmp/err"
    local rc=$?
    local left; left=$(find "$tmp" -maxdepth 1 -name 'bad_out.*' | head -3)
    if [ $rc -eq 0 ]; then fail "$name" "exit status 0"
    elif ! grep -qF -- "$expect" "$tmp/err"; then fail "$name" "stderr lacks '$expect': $(head -c 300 "$tmp/err")"
    elif ! grep -qF -- "$input" "$tmp/err"; then fail "$name" "stderr does not name $input"
    elif ! diff -r -q "$tmp/out1" "$out" >/dev/null; then fail "$name" "the previous dataset was changed or removed"
    elif [ -n "$left" ]; then fail "$name" "left behind: $left"
    else ok "$name"; fi
}
printf '{"text": "ok"}\n{"text": "fine"}\n{"text": "broken\n' >"$tmp/malformed.jsonl"
bad_case "malformed JSON line is reported with its line" "line 3" "$tmp/malformed.jsonl"
printf '{"text": "ok"}\n{"body": "no text"}\n' >"$tmp/notext.jsonl"
bad_case "missing \"text\" is reported with its line" "line 2" "$tmp/notext.jsonl"
printf '{"text": "ok"}\n{"text": "bad \xff\xfe byte"}\n' >"$tmp/badutf8.jsonl"
bad_case "invalid UTF-8 in JSON Lines is reported with its line" "line 2: invalid UTF-8" "$tmp/badutf8.jsonl"
printf 'valid start \xc3\x28 then invalid' >"$tmp/badutf8.txt"
bad_case "invalid UTF-8 in a .txt is reported with its byte offset" "invalid UTF-8 at byte offset 12" "$tmp/badutf8.txt"
head -c 300000 "$corpus/books.jsonl.zst" >"$tmp/truncated.jsonl.zst"
bad_case "truncated .zst is reported" "truncated zstd stream" "$tmp/truncated.jsonl.zst"
python3 -c 'import sys; b=bytearray(open(sys.argv[1],"rb").read()); b[20000:20400]=bytes(400); open(sys.argv[2],"wb").write(b)' \
    "$corpus/books.jsonl.zst" "$tmp/corrupt.jsonl.zst"
bad_case "corrupt .zst is reported with its offset" "corrupt zstd data near compressed offset" "$tmp/corrupt.jsonl.zst"
# found before anything is written: the previous complete output stays as it was
bad_case "missing input file is reported" "cannot read input" "$tmp/does-not-exist.jsonl"
printf 'x' >"$tmp/data.csv"
bad_case "unsupported input type is reported" "unknown type" "$tmp/data.csv"
# manifest.json is UTF-8 JSON: a file name that is not UTF-8 would vanish from
# its "inputs" (jansson drops such a string silently), so it is refused
mkdir -p "$tmp/badname"
printf '{"text": "a document under a file name with byte 0xff"}\n' >"$tmp/badname/x$(printf '\377').jsonl"
bad_case "an input file name that is not UTF-8 is refused, naming its byte and offset" \
    "is not valid UTF-8 (byte 0xff at offset" "$tmp/badname"

# a bad line in the last of several files, found after the others were
# tokenized: the previous dataset is still complete and unchanged
cp "$tmp/in/books.jsonl" "$tmp/late.jsonl"
printf '{"text": "fine"}\n{"text": broken}\n' >>"$tmp/late.jsonl"
bad_case "a malformed last line of the last input keeps the previous dataset" "line 32" "$tmp/late.jsonl"

# --- the output directory inside an input directory: the second run must not
# read its own manifest.json and shards back as input (nor delete them) ---
mkdir -p "$tmp/nest"
head -n 5 "$tmp/in/books.jsonl" >"$tmp/nest/docs.jsonl"
inputs_of() { python3 -c 'import json,sys; print(" ".join(i["path"] for i in json.load(open(sys.argv[1]))["inputs"]))' "$1"; }
if ! "$K" prepare --input "$tmp/nest" --out "$tmp/nest/o" 2>"$tmp/nest1.log"; then
    fail "--out inside --input: first run" "$(tail -2 "$tmp/nest1.log")"
else
    cp "$tmp/nest/o/manifest.json" "$tmp/nest_manifest1.json"
    "$K" prepare --input "$tmp/nest" --out "$tmp/nest/o" 2>"$tmp/nest2.log"
    rc=$?
    if [ $rc -ne 0 ]; then fail "--out inside --input: second run" "status $rc: $(tail -2 "$tmp/nest2.log")"
    elif [ "$(inputs_of "$tmp/nest/o/manifest.json")" != "$tmp/nest/docs.jsonl" ]; then
        fail "--out inside --input: second run" "inputs are: $(inputs_of "$tmp/nest/o/manifest.json")"
    elif ! cmp -s "$tmp/nest_manifest1.json" "$tmp/nest/o/manifest.json"; then
        fail "--out inside --input: second run" "its manifest differs from the first run's"
    elif [ -n "$(find "$tmp/nest" -maxdepth 1 -name 'o.*')" ]; then
        fail "--out inside --input: second run" "left behind: $(find "$tmp/nest" -maxdepth 1 -name 'o.*')"
    else ok "--out inside an --input directory: a second run skips its own output and writes the same dataset"; fi
fi

# --- leftovers of a killed run (its build directory, or the previous dataset
# it was swapping out) lie beside --out, here inside the input directory too:
# the next run neither reads nor trips over them, and removes them ---
sleep 0 &
dead=$!
wait $dead
for kind in tmp old; do
    mkdir -p "$tmp/nest/o.$kind-$dead/train"
    printf '{\n  "format": "half written"\n' >"$tmp/nest/o.$kind-$dead/manifest.json"
    printf 'x' >"$tmp/nest/o.$kind-$dead/train/shard_000000.bin"
done
if ! "$K" prepare --input "$tmp/nest" --out "$tmp/nest/o" 2>"$tmp/nest3.log"; then
    fail "leftovers of a killed run" "$(tail -2 "$tmp/nest3.log")"
elif ! cmp -s "$tmp/nest_manifest1.json" "$tmp/nest/o/manifest.json"; then
    fail "leftovers of a killed run" "the manifest differs from the first run's"
elif [ -n "$(find "$tmp/nest" -maxdepth 1 -name 'o.*')" ]; then
    fail "leftovers of a killed run" "still there: $(find "$tmp/nest" -maxdepth 1 -name 'o.*')"
else ok "leftover build and swap directories of a killed run are neither read nor in the way, and are removed"; fi

# --- a pre-tokenizer regex failure names the document and the byte offset in
# its text. A Split pattern with a repeated group needs PCRE2 JIT stack for
# every repetition, so a long run of "ab" exhausts it; the search that fails
# starts after the first "ab", at byte 2 of line 2's text. ---
python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:ab)+"
json.dump(j, open(sys.argv[2], "w"))' third_party/tokenizers/llama3.1/tokenizer.json "$tmp/groups.json"
python3 -c 'import json; print(json.dumps({"text": "fine"})); print(json.dumps({"text": "ab xyz " + "ab" * 1000000}))' \
    >"$tmp/groups.jsonl"
want="pre-tokenizer regex (stage 0) failed searching from byte offset 2 of the text: JIT stack limit reached"
if "$K" prepare --tokenizer "$tmp/groups.json" --input "$tmp/groups.jsonl" --out "$tmp/groups_out" 2>"$tmp/groups.err"; then
    fail "a regex failure in prepare names the file, line and byte offset" "exit status 0"
elif ! grep -qF -- "'$tmp/groups.jsonl' line 2: $want" "$tmp/groups.err"; then
    fail "a regex failure in prepare names the file, line and byte offset" "$(tail -c 300 "$tmp/groups.err")"
else ok "a regex failure in prepare names the file, line and byte offset in the document's text"; fi
if "$K" tokenize --tokenizer "$tmp/groups.json" --jsonl <"$tmp/groups.jsonl" >/dev/null 2>"$tmp/groups.err"; then
    fail "a regex failure in tokenize --jsonl names the line and byte offset" "exit status 0"
elif ! grep -qF -- "stdin line 2: $want" "$tmp/groups.err"; then
    fail "a regex failure in tokenize --jsonl names the line and byte offset" "$(tail -c 300 "$tmp/groups.err")"
else ok "a regex failure in tokenize --jsonl names the line and byte offset in its text"; fi

# --- --split: the documents of each split are those a separate reading of
# the rule (docs/data.md) puts there, from the text's hash: 80,10,10 (the
# default, and the rule of earlier datasets, h % 10: 0-7 train, 8 dev, 9
# test), 50,20,30, 90,10,0 (no test split written) and none (train alone);
# a small corpus's empty split is said at prepare time ---
python3 -c 'import json
for i in range(60): print(json.dumps({"text": "split document %d: %s" % (i, "word " * (i % 7))}))' >"$tmp/split.jsonl"
cat >"$tmp/split_rule.py" <<'PY'
M = (1 << 64) - 1
def fnv(b):
    h = 0xcbf29ce484222325
    for c in b: h = ((h ^ c) * 0x100000001b3) & M
    return h
def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
    return x ^ (x >> 31)
def split_of(text, shares, seed=0):
    """0 train, 1 dev, 2 test"""
    h = mix(fnv(text.encode()) ^ seed)
    if shares == [80, 10, 10]:  # the rule of earlier datasets, written as it was
        b = h % 10
        return 0 if b < 8 else 1 if b == 8 else 2
    b = h % 100
    key = (b % 10) * 10 + b // 10
    return 0 if key < shares[0] else 1 if key < shares[0] + shares[1] else 2
PY
split_check() { # spec, out
    PYTHONPATH=$tmp python3 - "$1" "$2" "$tmp/split.jsonl" <<'PY'
import json, os, sys
from split_rule import split_of
spec, out, src = sys.argv[1:4]
shares = [100, 0, 0] if spec == "none" else [int(v) for v in spec.split(",")]
names = ["train", "dev", "test"]
want = [0, 0, 0]
for line in open(src):
    want[split_of(json.loads(line)["text"], shares)] += 1
m = json.load(open(out + "/manifest.json"))
got = {k: v["documents"] for k, v in m["splits"].items()}
expect = {names[i]: want[i] for i in range(3) if shares[i] > 0}
dirs = sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d)))
if got != expect or dirs != sorted(expect):
    print("manifest %s, directories %s; the rule gives %s" % (got, dirs, expect))
PY
}
for spec in 80,10,10 50,20,30 90,10,0 none; do
    if ! "$K" prepare --input "$tmp/split.jsonl" --out "$tmp/split_$spec" --split "$spec" 2>"$tmp/split.err"; then
        fail "--split $spec" "$(tail -2 "$tmp/split.err")"
    elif why=$(split_check "$spec" "$tmp/split_$spec") && [ -z "$why" ]; then
        ok "--split $spec: the documents of each split are the rule's, a 0 share written as no split at all"
    else fail "--split $spec" "$why"; fi
done
"$K" prepare --input "$tmp/split.jsonl" --out "$tmp/split_default" 2>/dev/null
cmp -s "$tmp/split_default/manifest.json" "$tmp/split_80,10,10/manifest.json" && \
    cmp -s "$tmp/split_default/dev/shard_000000.bin" "$tmp/split_80,10,10/dev/shard_000000.bin" &&
    ok "no --split is --split 80,10,10, byte for byte" || fail "the default split" "differs from --split 80,10,10"
# four documents the rule puts in train and test, none in dev
PYTHONPATH=$tmp python3 -c 'import json, sys
from split_rule import split_of
lines = [l for l in open(sys.argv[1]) if split_of(json.loads(l)["text"], [80, 10, 10]) != 1]
sys.stdout.write("".join(lines[:4]))' "$tmp/split.jsonl" >"$tmp/split4.jsonl"
"$K" prepare --input "$tmp/split4.jsonl" --out "$tmp/split4" 2>"$tmp/split4.err"
if grep -q "note: the dev split holds no document (its share is 10 percent of 4); train then runs no dev evaluation" "$tmp/split4.err" &&
   grep -q -- "--split none" "$tmp/split4.err"; then
    ok "a small corpus's empty dev split is said at prepare time, with what it means and the --split to use"
else fail "empty dev split note" "$(cat "$tmp/split4.err")"; fi
for bad in 90,10 50,30,30 0,50,50 80,10,x; do
    if "$K" prepare --input "$tmp/split.jsonl" --out "$tmp/split_bad" --split "$bad" 2>"$tmp/split.err"; then
        fail "--split $bad refused" "exit status 0"
    elif grep -q -- "--split '$bad'" "$tmp/split.err" && [ ! -e "$tmp/split_bad" ]; then ok "--split $bad refused, naming it"
    else fail "--split $bad refused" "$(cat "$tmp/split.err")"; fi
done
