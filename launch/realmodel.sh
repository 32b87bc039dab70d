#!/usr/bin/env bash
# The real-model table: SmolLM2-135M-Instruct (a pretrained Llama-architecture
# model, trained context 8192; `make setup` converts it into
# third_party/models/smollm2-135m) on the test split of ../shared/corpus,
# prepared with the model's own tokenizer; every policy at each context with
# S = 50 and K = L/8 (the RefreshKV paper's Table 5 setting), 95% intervals.
# A context above 8192 is beyond what the model was trained on and is
# labelled so. The same documents serve every context: the data keeps only
# documents long enough for the largest one.
#
# Each context is a stage of its own, skipped when its eval.json exists, so a
# cut-off run continues where it stopped: just run it again. At the end
# scripts/realmodel_table.py writes $OUT/results-smollm2.md.
#   launch/realmodel.sh                                       # 2048, 4096, 8192
#   CONTEXTS=2048,4096,8192,16384 EVAL_DOCS=8 launch/realmodel.sh
#   CONTEXTS=256 S=8 EVAL_DOCS=2 QC=5 OUT=/tmp/rm launch/realmodel.sh     # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/realmodel}; CORPUS=${CORPUS:-../shared/corpus}; MODEL=${MODEL:-third_party/models/smollm2-135m}
CONTEXTS=${CONTEXTS:-2048,4096,8192}; S=${S:-50}; EVAL_DOCS=${EVAL_DOCS:-8}; QC=${QC:-5,10}
[ -x ./kvcpt ] || make -j"$(nproc)" kvcpt
for f in config.json model.safetensors tokenizer.json; do
    [ -f "$MODEL/$f" ] || { echo "realmodel: $MODEL/$f is missing; run make setup" >&2; exit 1; }
done
mkdir -p "$OUT"
stage() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)" >&2; }
timed() { # name, command...: runs it and records its wall seconds in $OUT/times.tsv
    local name=$1 t0=$SECONDS
    shift
    "$@"
    printf '%s\t%d\n' "$name" $((SECONDS - t0)) >>"$OUT/times.tsv"
}
largest=0
for L in ${CONTEXTS//,/ }; do
    [[ "$L" =~ ^[1-9][0-9]*$ ]] || { echo "realmodel: CONTEXTS holds '$L', not a positive integer" >&2; exit 1; }
    [ "$L" -gt "$largest" ] && largest=$L
done

stage "prepare: $MODEL/tokenizer.json on $CORPUS, documents >= $((largest + S + 1)) tokens"
[ -f "$OUT/data/manifest.json" ] || timed prepare ./kvcpt prepare --input "$CORPUS" --tokenizer "$MODEL/tokenizer.json" \
    --min-tokens $((largest + S + 1)) --out "$OUT/data"

for L in ${CONTEXTS//,/ }; do
    stage "evaluate every policy at L = $L (S = $S, K = L/8, $EVAL_DOCS documents)"
    if [ -f "$OUT/eval-$L/eval.json" ]; then echo "done already: $OUT/eval-$L/eval.json" >&2; continue; fi
    timed "eval L=$L" ./kvcpt eval --model "$MODEL" --data "$OUT/data" --split test --L "$L" --S "$S" --K L/8 \
        --policies all --refresh-qc "$QC" --max-docs "$EVAL_DOCS" --out "$OUT/eval-$L"
done

stage "the table"
python3 scripts/realmodel_table.py --out "$OUT" --model "$MODEL" --contexts "$CONTEXTS" \
    --command "CONTEXTS=$CONTEXTS S=$S EVAL_DOCS=$EVAL_DOCS QC=$QC launch/realmodel.sh" >"$OUT/results-smollm2.md"
echo "wrote $OUT/results-smollm2.md" >&2
