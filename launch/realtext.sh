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
# every variable, its default and its range, checked before any work (launch/lib/env.sh)
. launch/lib/env.sh
env_text OUT runs/realtext; env_text CORPUS ../shared/corpus; env_text MODEL launch/configs/realtext-model.json
env_int L 8192 8 1048576; env_int S 50 1 65536; env_int K $((L / 8)) 1 "$L"; env_ints CONTEXTS 8192,16384 8 1048576
env_int PRE_STEPS 600 0 1000000000; env_int CPT_STEPS 150 0 1000000000; env_int WARMUP 20 0 1000000000
env_int BATCH 8 1 1000000; env_int EVAL_DOCS 0 0 1000000000; env_int NP 1 1 4096
(( BATCH % NP == 0 )) || env_fail "BATCH is $BATCH; each of the NP = $NP ranks takes one sequence at a time, so NP must divide it"
[ -x ./kvcpt ] || make -j"$(nproc)"
launch=(./kvcpt); [ "$NP" -gt 1 ] && launch=(mpirun -np "$NP" --bind-to none ./kvcpt)
mkdir -p "$OUT"
stage() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)" >&2; }

stage "prepare: Llama 3.1 tokenizer on $CORPUS, documents >= L + S + 1 tokens"
[ -f "$OUT/data/manifest.json" ] || ./kvcpt prepare --input "$CORPUS" --min-tokens $((L + S + 1)) --out "$OUT/data"

common=(--set data="$OUT/data" --set L="$L" --set S="$S" --set K="$K" --set global_batch="$BATCH"
        --set micro_batch=1 --set optim=adamw8bit --set warmup_steps="$WARMUP" --set eval_interval=50
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
