#!/usr/bin/env bash
# scripts/realmodel_cpt_table.py on the SmolLM2 CPT runs kept in
# docs/realmodel-runs/2026-11-26-cpt (no model is run): the summary it makes
# from the raw eval.json, config.json and log.jsonl files is the committed
# cpt-summary.md byte for byte, and a mask whose every PPL is the paper
# mask's times 1.01 on each seed reads 1.0100 over the paper's mask, with no
# spread across seeds; with --arms, a causal control 1.01x the mask arm's
# reads 0.9901 mask over causal with the exact paired tests' p-values.
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${PYTHON:-python3}
runs=docs/realmodel-runs/2026-11-26-cpt
cmd="CONTEXTS=1024 S=50 EVAL_DOCS=12 QC=5,10 CPT_STEPS=8 CPT_BATCH=2 CPT_LR=5e-6 SEEDS=1,2,3 CPT_MASKS=evict,restride10 MASK_SEEDS=1,2,3 launch/realmodel.sh"
o=$tmp/out
mkdir -p "$o/eval-1024"
cp "$runs/before-eval-1024.json" "$o/eval-1024/eval.json"
cp "$runs/times.tsv" "$o/times.tsv"
for r in paper-seed1 paper-seed2 paper-seed3 evict-seed1 evict-seed2 evict-seed3 restride10-seed1 restride10-seed2 restride10-seed3; do
    mkdir -p "$o/cpt-$r/eval-1024"
    cp "$runs/$r-config.json" "$o/cpt-$r/config.json"
    cp "$runs/$r-log.jsonl" "$o/cpt-$r/log.jsonl"
    cp "$runs/$r-eval-1024.json" "$o/cpt-$r/eval-1024/eval.json"
done
"$PY" scripts/realmodel_cpt_table.py --out "$o" --contexts 1024 --seeds 1,2,3 --masks evict,restride10 \
    --mask-seeds 1,2,3 --command "$cmd" >"$tmp/summary.md" 2>"$tmp/err" && rc=0 || rc=$?
if [ "$rc" = 0 ] && cmp -s "$tmp/summary.md" "$runs/cpt-summary.md"; then
    ok "realmodel_cpt_table.py remakes docs/realmodel-runs/2026-11-26-cpt/cpt-summary.md from its raw files"
else
    fail "cpt summary" "exit $rc: $(cat "$tmp/err"; diff "$tmp/summary.md" "$runs/cpt-summary.md" | head -20)"
fi

# a made-up mask 'restride3': every PPL (whole and per document) 1.01 times the paper mask's, seed by seed
for s in 1 2 3; do
    mkdir -p "$o/cpt-restride3-seed$s/eval-1024"
    cp "$o/cpt-paper-seed$s/config.json" "$o/cpt-paper-seed$s/log.jsonl" "$o/cpt-restride3-seed$s/"
    "$PY" - "$o/cpt-paper-seed$s/eval-1024/eval.json" "$o/cpt-restride3-seed$s/eval-1024/eval.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["results"]:
    if r["ppl"] is not None:
        r["ppl"] *= 1.01
        r["ppl_per_document"] = [p * 1.01 for p in r["ppl_per_document"]]
json.dump(j, open(sys.argv[2], "w"))
PY
done
"$PY" scripts/realmodel_cpt_table.py --out "$o" --contexts 1024 --seeds 1,2,3 --masks restride3 --mask-seeds 1,2,3 \
    --command x >"$tmp/made.md" 2>"$tmp/err" && rc=0 || rc=$?
row=$(sed -n '/^Mask restride3 over the paper/,$p' "$tmp/made.md" | grep '^| refreshkv (QC 5, s 0.85) |')
if [ "$rc" = 0 ] && [ "$row" = "| refreshkv (QC 5, s 0.85) | 1.0100 [1.0100, 1.0100] |" ] &&
    [ "$(sed -n '/^Mask restride3 over the paper/,$p' "$tmp/made.md" | grep -c '| 1.0100 \[1.0100, 1.0100\] |')" = 12 ]; then
    ok "a mask 1.01x the paper mask's on every seed reads 1.0100 [1.0100, 1.0100] over it, for all 12 variants"
else
    fail "mask across seeds" "exit $rc, row '$row': $(cat "$tmp/err")"
fi

# --arms mask,causal on the same records: the paper mask's runs as the mask
# arm, and a made-up control whose every PPL (whole and per document) is
# the mask arm's times 1.01, seed by seed, config mask=0. Every variant then
# reads 0.9901 [0.9901, 0.9901] mask over causal, 12 of 12 documents below 1,
# sign and Wilcoxon p both 2/2^12 = 0.00049 (every document agrees; all
# differences tie), Holm 12 x that = 0.0059; the recipe line says the runs
# differ only in the mask.
a=$tmp/arms
mkdir -p "$a/eval-1024"
cp "$o/eval-1024/eval.json" "$a/eval-1024/"
for s in 1 2 3; do
    mkdir -p "$a/cpt-mask-seed$s/eval-1024" "$a/cpt-causal-seed$s/eval-1024"
    cp "$o/cpt-paper-seed$s/config.json" "$o/cpt-paper-seed$s/log.jsonl" "$a/cpt-mask-seed$s/"
    cp "$o/cpt-paper-seed$s/eval-1024/eval.json" "$a/cpt-mask-seed$s/eval-1024/"
    cp "$o/cpt-paper-seed$s/log.jsonl" "$a/cpt-causal-seed$s/"
    "$PY" - "$a/cpt-mask-seed$s" "$a/cpt-causal-seed$s" <<'PY'
import json, sys
m, c = sys.argv[1:3]
cfg = json.load(open(m + "/config.json"))
cfg["mask"] = 0
json.dump(cfg, open(c + "/config.json", "w"))
j = json.load(open(m + "/eval-1024/eval.json"))
for r in j["results"]:
    if r["ppl"] is not None:
        r["ppl"] *= 1.01
        r["ppl_per_document"] = [p * 1.01 for p in r["ppl_per_document"]]
json.dump(j, open(c + "/eval-1024/eval.json", "w"))
PY
done
"$PY" scripts/realmodel_cpt_table.py --out "$a" --contexts 1024 --seeds 1,2,3 --arms mask,causal --command x \
    >"$tmp/arms.md" 2>"$tmp/err" && rc=0 || rc=$?
head=$(sed -n '/mask over causal, after CPT (the headline)/,/Answers at L = 1024/p' "$tmp/arms.md")
n=$(grep -cE '^\| [a-z].* \| 0\.9901 \[0\.9901, 0\.9901\] \| 0\.9901 \[0\.9901, 0\.9901\] \| 12 of 12 \| 4\.9e-04 \| 4\.9e-04 \| 0\.0059 \|$' <<<"$head")
if [ "$rc" = 0 ] && [ "$n" = 12 ] && grep -q "equal recipe: the 6 runs' training configs agree on every key but the arm's" "$tmp/arms.md" &&
    grep -q "lowered the PPL more than plain causal CPT (interval below 1 and Holm p < 0.05): full, streaming" "$tmp/arms.md"; then
    ok "--arms mask,causal: a control 1.01x the mask arm's reads 0.9901, 12 of 12 documents, sign and Wilcoxon p 4.9e-04, Holm 0.0059, for all 12 variants"
else
    fail "--arms mask over causal" "exit $rc, $n rows as expected: $(cat "$tmp/err"; grep '^| full' <<<"$head")"
fi
