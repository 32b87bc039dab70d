#!/usr/bin/env bash
# kvcpt eval from the command line: two models side by side
# (before -> after), every policy, JSON and PNG written; bad input rejected.
. "$(dirname "$0")/lib.sh"
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 200 --out "$tmp/data" >/dev/null
# the "before" model: 20 steps without the mask; "after": 10 more steps with it
base='"model":"tiny","data":"'$tmp'/data","L":48,"S":8,"K":6,"global_batch":4,"micro_batch":2,"lr":3e-3,"warmup_steps":2'
echo "{$base,\"mask\":0,\"steps\":20,\"out\":\"$tmp/pre\"}" > "$tmp/pre.json"
echo "{$base,\"mask\":1,\"steps\":10,\"init\":\"pretrained\",\"model\":\"$tmp/pre/model\",\"out\":\"$tmp/cpt\"}" > "$tmp/cpt.json"
$K train --config "$tmp/pre.json" >/dev/null 2>&1 && $K train --config "$tmp/cpt.json" >/dev/null 2>&1 \
    && ok "pretrain then CPT from the pretrained model" || fail "pretrain then CPT" "train failed"
out=$($K eval --model "$tmp/pre/model" --model "$tmp/cpt/model" --data "$tmp/data" --L 40,48 --S 8 \
      --K L/8 --refresh-qc 2 --out "$tmp/ev" --max-docs 6 2>&1)
rows=$(grep -cE -- " -> [0-9]" <<<"$out")
[ "$rows" -eq 11 ] && ok "before -> after table has every policy variant (11 rows)" || fail "table" "$rows rows: $out"
n=$(/usr/bin/python3 -c "import json;r=json.load(open('$tmp/ev/eval.json'))['results'];print(len(r), len({x['policy'].split(' ')[0] for x in r}), all(x['documents']==6 for x in r))" 2>&1)
[ "$n" = "44 8 True" ] && ok "eval.json: 8 policies (11 variants) x 2 contexts x 2 models, 6 documents each" || fail "eval.json" "$n"
[ -s "$tmp/ev/eval.png" ] && ok "eval.png written" || fail "eval.png" "missing (is gnuplot installed? make setup)"
grep -q '"effective_stride_per_layer"' "$tmp/ev/eval.json" && ok "refreshkv reports effective stride per layer" || fail "stride" "absent"
# what produced the numbers: the BLAS core and threads, and the commit
# (git's, with "+changes" when tracked files differed; "unknown" outside a checkout)
want=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
meta=$(/usr/bin/python3 -c "import json;j=json.load(open('$tmp/ev/eval.json'));b=j['blas'];print(j['commit'], b['core'] != '', b['blas_threads'] >= 1, b['omp_threads'] >= 1)" 2>&1)
case "$meta" in "$want"*" True True True") ok "eval.json records the commit ($meta) and the BLAS core and threads";;
    *) fail "eval.json provenance" "got '$meta', the commit should start with $want";; esac
# mqar data (its manifest marks answers): top-1 accuracy per answer class and
# per decode step. The classes are recomputed here from the shard's tokens by
# the rule of data/answers.h, written independently.
$K prepare --synthetic mqar --vocab 64 --doc-tokens 57 --query-tail 16 --values 3 --markers 12 --docs 200 \
    --out "$tmp/mqar" >/dev/null
out=$($K eval --model "$tmp/pre/model" --model "$tmp/cpt/model" --data "$tmp/mqar" --L 48 --S 8 --K L/8 \
      --refresh-qc 2 --out "$tmp/evq" --max-docs 6 2>&1)
grep -q "top-1 accuracy of the answers" <<<"$out" && ok "eval on mqar data prints the answers' accuracy table" \
    || fail "answers table" "$out"
chk=$(/usr/bin/python3 - "$tmp" <<'PY' 2>&1
import json, struct, sys
t = sys.argv[1]
man = json.load(open(f"{t}/mqar/manifest.json")); a = man["answers"]; n = man["synthetic"]["doc_tokens"]
raw = open(f"{t}/mqar/test/shard_000000.bin", "rb").read()
docs = [struct.unpack_from(f"<{n}I", raw, 64 + 4 * n * d) for d in range(6)]
def classes(tok):
    out, seen, last, rep = [], set(), None, False
    for i, x in enumerate(tok):
        c = "none"
        if a["marker_lo"] <= x < a["marker_hi"]:
            rep = x in seen; seen.add(x); last = i
        elif last is not None and rep and i - last <= a["values"]:
            c = "first" if i - last == 1 else "rest"
        out.append(c)
    return out
want = {"first": 0, "rest": 0, "none": 0}
for tok in docs:
    for c in classes(tok)[48:56]: want[c] += 1
bad = []
for r in json.load(open(f"{t}/evq/eval.json"))["results"]:
    got = {k: v["tokens"] for k, v in r["answers"].items()}
    ps = r["per_step"]
    mean_top1 = sum(ps["top1_accuracy"]) / len(ps["top1_accuracy"])
    if got != want: bad.append(f"{r['policy']}: classes {got} != {want}")
    if len(ps["mean_nll"]) != 8 or abs(mean_top1 - r["top1_accuracy"]) > 1e-12: bad.append(f"{r['policy']}: per_step")
print("; ".join(bad) if bad else f"ok {want}")
PY
)
case "$chk" in ok*) ok "eval.json: answer classes per cell match an independent count ($chk), per-step curves of S entries";;
    *) fail "eval.json answers" "$chk";; esac
[ -s "$tmp/evq/eval_steps.png" ] && [ -s "$tmp/evq/eval_steps_before.png" ] \
    && ok "per-step accuracy curves written (eval_steps.png, eval_steps_before.png)" || fail "eval_steps png" "missing"
# --batch: the same results for any batch size. The test split mixes
# documents long enough (57 and 60 tokens) with too-short ones (40) between
# them, and 4 does not divide the eligible count, so the last batch is partial.
for n in 57 40 60; do
    $K prepare --synthetic recall --vocab 64 --doc-tokens $n --query-tail 9 --docs 60 --out "$tmp/mix$n" >/dev/null
done
mkdir -p "$tmp/mix/test"
/usr/bin/python3 - "$tmp" <<'PY'
import json, shutil, sys
t = sys.argv[1]; man = json.load(open(f"{t}/mix57/manifest.json")); shards = []
for i, n in enumerate([57, 40, 60]):
    shutil.copy(f"{t}/mix{n}/test/shard_000000.bin", f"{t}/mix/test/shard_{i:06d}.bin")
    e = json.load(open(f"{t}/mix{n}/manifest.json"))["splits"]["test"]["shards"][0]
    shards.append(dict(e, file=f"test/shard_{i:06d}.bin"))
man["splits"]["test"] = {"documents": sum(e["documents"] for e in shards), "tokens": sum(e["tokens"] for e in shards), "shards": shards}
json.dump(man, open(f"{t}/mix/manifest.json", "w"))
PY
for b in 1 4 64; do
    $K eval --model "$tmp/pre/model" --model "$tmp/cpt/model" --data "$tmp/mix" --L 40,48 --S 8 --K L/8 \
        --refresh-qc 2 --batch $b --bootstrap 50 --out "$tmp/b$b" >/dev/null 2>&1 || fail "eval --batch $b" "exit status $?"
    sed '/decode_ms_per_token/d' "$tmp/b$b/eval.json" >"$tmp/b$b.json" # the only field that is a timing
done
docs=$(/usr/bin/python3 -c "import json;j=json.load(open('$tmp/b1/eval.json'));print(j['documents_skipped_too_short'], {r['documents'] for r in j['results']})" 2>&1)
case "$docs" in 0*|*,*) fail "mixed-length test split" "expected skipped documents and one count per cell: $docs" ;;
*) ok "mixed-length test split: skipped, eligible = $docs" ;; esac
cmp -s "$tmp/b1.json" "$tmp/b4.json" && ok "eval --batch 4 (last batch partial, short documents between) equals --batch 1 byte for byte" \
    || fail "eval --batch 4" "$(diff "$tmp/b1.json" "$tmp/b4.json" | head -5)"
cmp -s "$tmp/b1.json" "$tmp/b64.json" && ok "eval --batch 64 (one batch of all documents) equals --batch 1 byte for byte" \
    || fail "eval --batch 64" "$(diff "$tmp/b1.json" "$tmp/b64.json" | head -5)"
expect_err() {
    local name=$1 want=$2; shift 2
    if o=$($K eval "$@" 2>&1); then fail "$name" "accepted"; elif grep -qF -- "$want" <<<"$o"; then ok "$name"; else fail "$name" "$o"; fi
}
m="$tmp/pre/model"
expect_err "budget above context" "above the context 48" --model "$m" --data "$tmp/data" --L 48 --S 8 --K 60 --out "$tmp/x"
expect_err "unknown policy" "unknown policy 'snapkvv'; known policies: full, streaming" --model "$m" --data "$tmp/data" --L 48 --S 8 --policies full,snapkvv --out "$tmp/x"
expect_err "batch 0" "--batch must be >= 1" --model "$m" --data "$tmp/data" --L 48 --S 8 --batch 0 --out "$tmp/x"
expect_err "every document too short" "--L 50: context 50 + --S 7 + 1 needs a document of 58 tokens, but the longest of split 'test' (15 documents) has 57" --model "$m" --data "$tmp/data" --L 50 --S 7 --out "$tmp/x"
# every policy in the registry (eval/policy.c) is named in eval --help, with
# what it keeps
names=$(grep -oE '^ *\{"[a-z0-9]+", policy_[a-z0-9_]+_create' eval/policy.c | sed -E 's/^ *\{"([a-z0-9]+)".*/\1/')
help=$($K eval --help)
missing=""
for n in $names; do grep -qE "^  $n +[A-Za-z]" <<<"$help" || missing="$missing $n"; done
[ -n "$names" ] && [ -z "$missing" ] && ok "eval --help names all $(wc -w <<<"$names") registered policies" \
    || fail "eval --help lists the policies" "missing:${missing:- (none found in eval/policy.c)}"
# a corpus too small to hold documents back: --split all scores every split
# at once (here 70/30 and no test split, so --split test names what there is)
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 12 --split 70,30,0 --out "$tmp/small" >/dev/null
n=$(/usr/bin/python3 -c "import json;s=json.load(open('$tmp/small/manifest.json'))['splits'];print(' '.join('%s=%d' % (k, v['documents']) for k, v in s.items()))")
$K eval --model "$m" --data "$tmp/small" --split all --L 48 --S 8 --policies full --out "$tmp/all" --quiet >/dev/null 2>"$tmp/err"
d=$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/all/eval.json'))['results'][0]['documents'])" 2>&1)
[ "$d" = 12 ] && ok "eval --split all scores the documents of every split ($n: $d)" || fail "eval --split all" "$d documents ($n): $(tail -2 "$tmp/err")"
expect_err "eval --split test of data without one names the splits it has" "has no split 'test' (it has: train, dev; 'all' names every split at once)" \
    --model "$m" --data "$tmp/small" --split test --L 48 --S 8 --out "$tmp/x"
