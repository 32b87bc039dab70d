#!/usr/bin/env bash
# The built-in default job on CPU: synthetic associative-recall data ->
# pretrain a small Llama-shaped model (causal) -> RefreshKV CPT -> evaluate
# every policy before and after. Re-running continues where it stopped.
# Sizes can be overridden: L=1024 S=32 PRE_STEPS=... ./launch/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/demo}; L=${L:-256}; S=${S:-32}; K=${K:-$((L / 8))}
PRE_STEPS=${PRE_STEPS:-400}; CPT_STEPS=${CPT_STEPS:-100}; DOCS=${DOCS:-2000}
[ -x ./kvcpt ] || make -j"$(nproc)"
mkdir -p "$OUT"
[ -f "$OUT/data/manifest.json" ] || ./kvcpt prepare --synthetic recall --vocab 64 --doc-tokens $((L + S + 1)) \
    --query-tail $((S + 1)) --docs "$DOCS" --out "$OUT/data"
common=(--set data="$OUT/data" --set L="$L" --set S="$S" --set K="$K" --set global_batch=8 --set micro_batch=8
        --set optim=adamw8bit --set warmup_steps=20 --set eval_interval=100 --set ckpt_interval=100)
[ -f "$OUT/pretrain/model/model.kvcpt" ] || ./kvcpt train --resume "${common[@]}" --set model=launch/configs/demo-model.json \
    --set init=random --set mask=0 --set steps="$PRE_STEPS" --set lr=3e-3 --set out="$OUT/pretrain"
[ -f "$OUT/cpt/model/model.kvcpt" ] || ./kvcpt train --resume "${common[@]}" --set model="$OUT/pretrain/model" \
    --set init=pretrained --set mask=1 --set steps="$CPT_STEPS" --set lr=1e-3 --set out="$OUT/cpt"
./kvcpt eval --model "$OUT/pretrain/model" --model "$OUT/cpt/model" --data "$OUT/data" --context "$L" --last "$S" \
    --budget L/8 --refresh-qc 5,10 --refresh-fixed 10,25 --max-docs "${EVAL_DOCS:-100}" --out "$OUT/eval"
