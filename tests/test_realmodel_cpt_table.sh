#!/usr/bin/env bash
# scripts/realmodel_cpt_table.py on the SmolLM2 CPT runs kept in
# docs/realmodel-runs/2026-11-26-cpt (no model is run): the summary it makes
# from the raw eval.json, config.json and log.jsonl files is the committed
# cpt-summary.md byte for byte, and a mask whose every PPL is the paper
# mask's times 1.01 on each seed reads 1.0100 over the paper's mask, with no
# spread across seeds.
. "$(dirname "$0")/lib.sh"
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
