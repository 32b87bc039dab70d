#!/usr/bin/env bash
# The real-text experiment (the paper's Table 5 in miniature):
# Llama 3.1 tokenizer on ../shared/corpus (LaTeX as the ArXiv stand-in, books
# as the Book stand-in) -> pretrain a small Llama-3-shaped model from scratch
# at context L + S (causal) -> RefreshKV CPT (L = 8192, S = 50, K = L/8) ->
# every policy at 8k and 16k, before -> after. Each stage is skipped when its
# output exists and training resumes from its newest checkpoint, so a cut-off
# run continues where it stopped: just run it again.
#   launch/realtext.sh                       # the full sizes (meant for a GPU machine)
#   L=256 S=8 PRE_STEPS=20 CPT_STEPS=5 CONTEXTS=256,512 MODEL=... launch/realtext.sh   # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/realtext}; CORPUS=${CORPUS:-../shared/corpus}
L=${L:-8192}; S=${S:-50}; K=${K:-$((L / 8))}; CONTEXTS=${CONTEXTS:-8192,16384}
MODEL=${MODEL:-launch/configs/realtext-model.json}
PRE_STEPS=${PRE_STEPS:-600}; CPT_STEPS=${CPT_STEPS:-150}; BATCH=${BATCH:-8}; EVAL_DOCS=${EVAL_DOCS:-0}
NP=${NP:-1}
[ -x ./kvcpt ] || make -j"$(nproc)"
launch=(./kvcpt); [ "$NP" -gt 1 ] && launch=(mpirun -np "$NP" --bind-to none ./kvcpt)
mkdir -p "$OUT"
stage() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)" >&2; }

stage "prepare: Llama 3.1 tokenizer on $CORPUS, documents >= L + S + 1 tokens"
[ -f "$OUT/data/manifest.json" ] || ./kvcpt prepare --input "$CORPUS" --min-tokens $((L + S + 1)) --out "$OUT/data"

common=(--set data="$OUT/data" --set L="$L" --set S="$S" --set K="$K" --set global_batch="$BATCH"
        --set micro_batch=1 --set optim=adamw8bit --set warmup_steps="${WARMUP:-20}" --set eval_interval=50
        --set ckpt_interval=25 --set keep_last=2)
stage "pretrain from scratch, causal, context $((L + S))"
[ -f "$OUT/pretrain/model/config.json" ] || "${launch[@]}" train --resume "${common[@]}" --set model="$MODEL" \
    --set init=random --set mask=0 --set steps="$PRE_STEPS" --set lr=1e-3 --set out="$OUT/pretrain"
stage "CPT with the RefreshKV mask (L=$L S=$S K=$K)"
[ -f "$OUT/cpt/model/config.json" ] || "${launch[@]}" train --resume "${common[@]}" --set model="$OUT/pretrain/model" \
    --set init=pretrained --set mask=1 --set steps="$CPT_STEPS" --set lr=2e-4 --set out="$OUT/cpt"
stage "evaluate every policy at $CONTEXTS, before -> after"
max_docs=(); [ "$EVAL_DOCS" -gt 0 ] && max_docs=(--max-docs "$EVAL_DOCS")
[ -f "$OUT/eval/eval.json" ] && { echo "done already: $OUT/eval/eval.json (delete it to evaluate again)" >&2; exit 0; }
./kvcpt eval --model "$OUT/pretrain/model" --model "$OUT/cpt/model" --data "$OUT/data" --split test \
    --L "$CONTEXTS" --S "$S" --K L/8 --policies all "${max_docs[@]}" --out "$OUT/eval"
