#!/usr/bin/env bash
# kvcpt eval from the command line: two models side by side
# (before -> after), every policy, JSON and PNG written; bad input rejected.
. "$(dirname "$0")/../lib.sh" || exit 1
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
    # all but the timings and "run", which records the command line (--batch, --out) and the wall time
    /usr/bin/python3 -c "import json,sys;j=json.load(open(sys.argv[1]));j.pop('run')
for r in j['results']: r.pop('decode_ms_per_token')
print(json.dumps(j,indent=1))" "$tmp/b$b/eval.json" >"$tmp/b$b.json"
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
expect_err "batch 0" "--batch expects an integer >= 1, got '0'" --model "$m" --data "$tmp/data" --L 48 --S 8 --batch 0 --out "$tmp/x"
# --max-docs -1 used to run as 0 (all documents): negatives are refused by
# the option table, as for every count (--sinks) and size (--bootstrap)
expect_err "max-docs -1" "--max-docs expects an integer >= 0, got '-1'" --model "$m" --data "$tmp/data" --L 48 --S 8 --max-docs -1 --out "$tmp/x"
expect_err "max-docs=-5" "--max-docs expects an integer >= 0, got '-5'" --model "$m" --data "$tmp/data" --L 48 --S 8 --max-docs=-5 --out "$tmp/x"
expect_err "sinks -1" "--sinks expects an integer >= 0, got '-1'" --model "$m" --data "$tmp/data" --L 48 --S 8 --sinks -1 --out "$tmp/x"
expect_err "bootstrap 0" "--bootstrap expects an integer >= 1, got '0'" --model "$m" --data "$tmp/data" --L 48 --S 8 --bootstrap 0 --out "$tmp/x"
expect_err "S -3" "--S expects an integer >= 1, got '-3'" --model "$m" --data "$tmp/data" --L 48 --S -3 --out "$tmp/x"
[ ! -e "$tmp/x" ] && ok "the refused options wrote no --out directory" || fail "refused options" "$tmp/x was created"
# a model whose config.json asks for biases (kvcpt's Llama has none): refused
# naming the field and the file, before any model is evaluated
bias_model() { # DIR FIELD: a copy of the pretrained model with FIELD true in its config.json
    cp -r "$m" "$1" && /usr/bin/python3 - "$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c[sys.argv[2]] = True; json.dump(c, open(sys.argv[1], "w"))
PY
}
bias_model "$tmp/attn_bias" attention_bias
bias_model "$tmp/mlp_bias" mlp_bias
expect_err "model with attention_bias true" "attn_bias/config.json: config field 'attention_bias' is true" \
    --model "$tmp/attn_bias" --data "$tmp/data" --L 48 --S 8 --max-docs 2 --out "$tmp/xb1"
expect_err "second model with mlp_bias true" "mlp_bias/config.json: config field 'mlp_bias' is true" \
    --model "$m" --model "$tmp/mlp_bias" --data "$tmp/data" --L 48 --S 8 --max-docs 2 --out "$tmp/xb2"
[ ! -e "$tmp/xb2/eval.json" ] && ok "the biased second model is refused before the first one is evaluated" \
    || fail "biased second model" "$tmp/xb2/eval.json was written first"
expect_err "every document too short" "--L 50: context 50 + --S 7 + 1 needs a document of 58 tokens, but the longest of split 'test' (15 documents) has 57" --model "$m" --data "$tmp/data" --L 50 --S 7 --out "$tmp/x"
expect_err "copy share outside [0, 1]" "--max-copy-share 1.5 is not a share in [0, 1]" --model "$m" --data "$tmp/data" --L 40 --S 8 --max-copy-share 1.5 --out "$tmp/x"
expect_err "interleave without the inputs' counts" "--pick interleave: the manifest records no input's documents per split" --model "$m" --data "$tmp/mix" --L 40 --S 8 --pick interleave --out "$tmp/x"
# each model's config.json is read once, and that config (with --rope-scaling's
# scaling) is what the RoPE check and the load both use: a preset too, whose
# window past what its RoPE covers (tiny: 4096) is refused as beyond, before
# any model is loaded, like a model directory's
$K prepare --synthetic recall --vocab 64 --doc-tokens 4300 --query-tail 9 --docs 10 --split none --out "$tmp/long" >/dev/null
expect_err "a preset's context beyond its RoPE" "--L 4200: L + S = 4208 tokens are beyond the 4096 model 'tiny' covers" \
    --model tiny --data "$tmp/long" --split train --L 4200 --S 8 --policies full --out "$tmp/x"
# the command holds the options only: the document x variant x context loop
# is eval_run's (eval/eval_run.h), which cli/cmd_eval.c calls
n=$(wc -l <cli/cmd_eval.c)
loop=$(grep -E '#include "\.\./(eval/engine|eval/report|data/data_split)\.h"' cli/cmd_eval.c)
[ "$n" -le 150 ] && [ -z "$loop" ] && grep -q 'eval_run(&' cli/cmd_eval.c \
    && ok "cli/cmd_eval.c parses the options ($n lines) and calls eval_run" \
    || fail "cli/cmd_eval.c holds the options only" "$n lines (at most 150), calls eval_run: $(grep -c 'eval_run(&' cli/cmd_eval.c), includes: ${loop:-none of the loop headers}"
# --pick interleave and the copy share, on the mixed split given three
# inputs (manifest kept_per_split, as prepare records them): documents of 57,
# 40 (too short for L 40 + S 8 + 1) and 60 tokens. An independent Python
# reading of the shards gives the round robin over the inputs (the 40-token
# input passed over), each document's copy share (scored tokens whose 8
# tokens ending there also end earlier in the window) and, with
# --max-copy-share at the median, the documents passed over.
/usr/bin/python3 - "$tmp/mix/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["inputs"] = [{"path": "in%d.jsonl" % n, "kept_per_split": {"train": 0, "dev": 0, "test": sh["documents"]}}
               for n, sh in zip((57, 40, 60), m["splits"]["test"]["shards"])]
json.dump(m, open(sys.argv[1], "w"))
PY
oracle() { # MAX_COPY WANT: the documents an interleaved pick of $tmp/${mix:-mix} takes, their inputs and copy shares, as JSON
/usr/bin/python3 - "$tmp/${mix:-mix}" "$1" "$2" <<'PY'
import json, os, struct, sys
d, max_copy, want = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
m = json.load(open(os.path.join(d, "manifest.json")))
docs = []
for sh in m["splits"]["test"]["shards"]:
    b = open(os.path.join(d, sh["file"]), "rb").read()
    nd, nt, idx = struct.unpack_from("<QQQ", b, 16)
    toks = struct.unpack_from("<%dI" % nt, b, 64)
    offs = struct.unpack_from("<%dQ" % (nd + 1), b, idx)
    docs += [toks[offs[i]:offs[i + 1]] for i in range(nd)]
L, S = 40, 8
def copy_share(t):
    w = t[:L + S]
    grams = [tuple(w[j - 7:j + 1]) for j in range(7, L + S)]
    return sum(1 for i in range(L, L + S) if tuple(w[i - 7:i + 1]) in grams[:i - 7]) / S
queues, first = [], 0
for i in m["inputs"]:
    n = i["kept_per_split"]["test"]
    queues.append([(k, i["path"]) for k in range(first, first + n)])
    first += n
pick, skipped = [], 0
while len(pick) < want and any(queues):
    for q in queues:
        while q and len(pick) < want:
            k, src = q.pop(0)
            if len(docs[k]) < L + S + 1:
                continue
            c = copy_share(docs[k])
            if c > max_copy:
                skipped += 1
                continue
            pick.append((k, src, c))
            break
print(json.dumps({"index": [p[0] for p in pick], "source": [p[1] for p in pick], "copy": [p[2] for p in pick],
                  "skipped": skipped}))
PY
}
got() { /usr/bin/python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))['results'][0]
print(json.dumps({'index': r['document_index'], 'source': r['document_source'], 'copy': r['copy_share_per_document'],
                  'skipped': r['documents_skipped_copy_share']}))" "$1"; }
$K eval --model "$m" --data "$tmp/mix" --L 40 --S 8 --K L/8 --policies full --pick interleave --bootstrap 10 \
    --out "$tmp/il" >"$tmp/il.log" 2>&1 || fail "eval --pick interleave" "$(tail -2 "$tmp/il.log")"
want=$(oracle 1 1000) have=$(got "$tmp/il/eval.json")
if [ -n "$want" ] && [ "$want" = "$have" ] && grep -q '"in57.jsonl", "in60.jsonl", "in57.jsonl"' <<<"$have"; then
    ok "eval --pick interleave: inputs in turn (the too-short one passed over), each document's source and copy share as an independent reading of the shards"
else fail "eval --pick interleave" "want $want, have $have"; fi
# --max-copy-share on a split whose first input's documents end in a copy of
# an earlier span that covers the scored tokens (synthetic copy, a tail of
# 24: every scored token copies) and whose second input's copy only after
# them (a tail of 4): at 0.5 the first input's are passed over
for q in 24 4; do
    $K prepare --synthetic copy --vocab 64 --doc-tokens 57 --query-tail $q --docs 60 --out "$tmp/cp$q" >/dev/null
done
mkdir -p "$tmp/mixc/test"
/usr/bin/python3 - "$tmp" <<'PY'
import json, shutil, sys
t = sys.argv[1]; man = json.load(open(f"{t}/cp24/manifest.json")); shards = []
for i, d in enumerate(["cp24", "cp4"]):
    shutil.copy(f"{t}/{d}/test/shard_000000.bin", f"{t}/mixc/test/shard_{i:06d}.bin")
    shards.append(dict(json.load(open(f"{t}/{d}/manifest.json"))["splits"]["test"]["shards"][0], file=f"test/shard_{i:06d}.bin"))
man["splits"]["test"] = {"documents": sum(e["documents"] for e in shards), "tokens": sum(e["tokens"] for e in shards), "shards": shards}
man["inputs"] = [{"path": p, "kept_per_split": {"train": 0, "dev": 0, "test": e["documents"]}} for p, e in zip(["copy.jsonl", "late.jsonl"], shards)]
json.dump(man, open(f"{t}/mixc/manifest.json", "w"))
PY
$K eval --model "$m" --data "$tmp/mixc" --L 40 --S 8 --K L/8 --policies full --pick interleave --bootstrap 10 \
    --max-copy-share 0.5 --max-docs 5 --out "$tmp/ilc" >"$tmp/ilc.log" 2>&1 || fail "eval --max-copy-share" "$(tail -2 "$tmp/ilc.log")"
$K eval --model "$m" --data "$tmp/mixc" --L 40 --S 8 --K L/8 --policies full --pick interleave --bootstrap 10 \
    --max-docs 4 --out "$tmp/ilc1" >"$tmp/ilc1.log" 2>&1 || fail "eval --pick interleave on copies" "$(tail -2 "$tmp/ilc1.log")"
want=$(mix=mixc oracle 0.5 5) have=$(got "$tmp/ilc/eval.json") want1=$(mix=mixc oracle 1 4) have1=$(got "$tmp/ilc1/eval.json")
if [ -n "$want" ] && [ "$want" = "$have" ] && [ "$want1" = "$have1" ] && grep -q '"copy": \[1.0, 0.0, 1.0, 0.0\]' <<<"$have1" &&
    /usr/bin/python3 -c "import json,sys; j=json.loads(sys.argv[1]); sys.exit(not (set(j['source']) == {'late.jsonl'} and j['skipped'] > 0))" "$have"; then
    ok "eval --max-copy-share 0.5: documents whose scored tokens all copy (share 1.0) passed over and counted, the others taken"
else fail "eval --max-copy-share" "want $want / $want1, have $have / $have1"; fi
# every policy in the registry (eval/policy.c) is named in eval --help, with
# what it keeps
names=$(grep -oE '^ *\{"[a-z0-9]+", policy_[a-z0-9_]+_create' eval/policy.c | sed -E 's/^ *\{"([a-z0-9]+)".*/\1/')
help=$($K eval --help)
missing=""
for n in $names; do grep -qE "^  $n +[A-Za-z]" <<<"$help" || missing="$missing $n"; done
[ -n "$names" ] && [ -z "$missing" ] && ok "eval --help names all $(wc -w <<<"$names") registered policies" \
    || fail "eval --help lists the policies" "missing:${missing:- (none found in eval/policy.c)}"
# decode_ms_per_token is each policy's own: on the CPU every variant decodes
# in one batch, and each row gets the shared work (projections, logits) in
# equal shares and the attention and policy work it measured itself. At
# L = 2048 full attention reads 2048 keys a step, streaming 16: full costs
# several times more per token (20x to 50x measured on one thread), where an equal split of
# the batch's time would give both the same.
$K prepare --synthetic recall --vocab 64 --doc-tokens 2100 --query-tail 9 --docs 40 --out "$tmp/long" >/dev/null
# One OpenMP thread: on a loaded machine another thread's waits at the
# barriers of the shared work would otherwise blur the difference.
OMP_NUM_THREADS=1 $K eval --model "$m" --data "$tmp/long" --L 2048 --S 16 --K 16 --policies full,streaming --max-docs 2 \
    --quiet --out "$tmp/tm" >/dev/null 2>&1 || fail "eval at L = 2048" "exit status $?"
t=$(/usr/bin/python3 -c "
import json
r = {x['policy'].split(' ')[0]: x for x in json.load(open('$tmp/tm/eval.json'))['results']}
f, s = r['full']['decode_ms_per_token'], r['streaming']['decode_ms_per_token']
print('%.4f %.4f %s' % (f, s, f > 3 * s > 0))" 2>&1)
case "$t" in *True) ok "decode_ms_per_token is per policy: full $(cut -d' ' -f1 <<<"$t") ms, streaming $(cut -d' ' -f2 <<<"$t") ms a token at L = 2048";;
    *) fail "decode time per policy" "full, streaming ms/token, full > 3x streaming: $t";; esac
# a corpus too small to hold documents back: --split all scores every split
# at once (here 70/30 and no test split, so --split test names what there is)
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 12 --split 70,30,0 --out "$tmp/small" >/dev/null
n=$(/usr/bin/python3 -c "import json;s=json.load(open('$tmp/small/manifest.json'))['splits'];print(' '.join('%s=%d' % (k, v['documents']) for k, v in s.items()))")
$K eval --model "$m" --data "$tmp/small" --split all --L 48 --S 8 --policies full --out "$tmp/all" --quiet >/dev/null 2>"$tmp/err"
d=$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/all/eval.json'))['results'][0]['documents'])" 2>&1)
[ "$d" = 12 ] && ok "eval --split all scores the documents of every split ($n: $d)" || fail "eval --split all" "$d documents ($n): $(tail -2 "$tmp/err")"
# --split all with the inputs' counts (prepare's kept_per_split, given here):
# input a holds the first 3 train and the first dev document, b the rest;
# the pick goes round robin over the inputs, each input's train documents
# before its dev ones, and names each document's input
/usr/bin/python3 - "$tmp/small/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
tr, dv = m["splits"]["train"]["documents"], m["splits"]["dev"]["documents"]
m["inputs"] = [{"path": "a.jsonl", "kept_per_split": {"train": 3, "dev": 1, "test": 0}},
               {"path": "b.jsonl", "kept_per_split": {"train": tr - 3, "dev": dv - 1, "test": 0}}]
json.dump(m, open(sys.argv[1], "w"))
PY
$K eval --model "$m" --data "$tmp/small" --split all --pick interleave --max-docs 8 --L 48 --S 8 --policies full \
    --out "$tmp/alli" --quiet >/dev/null 2>"$tmp/err"
have=$(/usr/bin/python3 -c "
import json
r = json.load(open('$tmp/alli/eval.json'))['results'][0]
print(' '.join('%d:%s' % (i, s[0]) for i, s in zip(r['document_index'], r['document_source'])))" 2>&1)
tr=$(/usr/bin/python3 -c "import json;print(json.load(open('$tmp/small/manifest.json'))['splits']['train']['documents'])")
want="0:a 3:b 1:a 4:b 2:a 5:b $tr:a 6:b"
[ "$have" = "$want" ] && ok "eval --split all --pick interleave: inputs in turn across splits, each document's input named ($have)" \
    || fail "eval --split all --pick interleave" "want $want, have $have: $(tail -2 "$tmp/err")"
expect_err "eval --split test of data without one names the splits it has" "has no split 'test' (it has: train, dev; 'all' names every split at once)" \
    --model "$m" --data "$tmp/small" --split test --L 48 --S 8 --out "$tmp/x"
