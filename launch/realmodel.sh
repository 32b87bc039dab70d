#!/usr/bin/env bash
# The real-model table: SmolLM2-135M-Instruct (a pretrained Llama-architecture
# model, trained context 8192; `make setup` converts it into
# third_party/models/smollm2-135m) on the test split of ../shared/corpus,
# prepared with the model's own tokenizer; every policy at each context with
# S = 50 and K = L/8 (the RefreshKV paper's Table 5 setting), 95% intervals.
# A context whose L + S passes 8192 is beyond what the model was trained on:
# it runs with ROPE_SCALING, a RoPE extension as transformers' rope_scaling
# (e.g. yarn:2 for L + S up to 16384: `kvcpt eval --rope-scaling`), named in
# the table; ROPE_SCALING=none runs it without one, labelled BEYOND, never a
# headline; unset, kvcpt eval refuses it. The same documents serve every
# context: the data keeps only documents long enough for the largest one.
#
# Each context is a stage of its own, skipped when its eval.json exists, so a
# cut-off run continues where it stopped: just run it again. At the end
# scripts/realmodel_table.py writes $OUT/results-smollm2.md.
#   launch/realmodel.sh                                       # 2048, 4096, 8192
#   CONTEXTS=2048,4096,8192,16334 ROPE_SCALING=yarn:2 EVAL_DOCS=8 launch/realmodel.sh
#   CONTEXTS=256 S=8 EVAL_DOCS=2 QC=5 OUT=/tmp/rm launch/realmodel.sh     # a smoke run
#
# CPT_STEPS=N > 0 adds the paper's experiment after that eval: RefreshKV
# continued pretraining from the pretrained checkpoint with the paper's mask
# (L = CPT_L, default the largest context; S; K = L/8) and its recipe scaled
# down: lr 5e-6 (CPT_LR), CPT_WARMUP warm-up steps then linear decay to 0,
# 8-bit AdamW, gradient clip 1.0, CPT_BATCH sequences per step; once per seed
# of SEEDS (the data order; default 1,2,3), each CPT model then evaluated with
# every policy at every context; scripts/realmodel_cpt_table.py then writes
# $OUT/cpt-summary.md, before -> after with 95% intervals across the seeds.
# CPT_MASKS adds variants of the mask that match inference (comma list of
# evict, restride<r>, evict+restride<r>: train keys mask_evict=1 and
# mask_restride=r), each run for the seeds of MASK_SEEDS (default SEEDS).
# Each CPT model is also exported as Hugging Face safetensors (DIR/hf).
# Every CPT, export and eval is a stage of its own with the same skip rule; a
# CPT cut off resumes from its last checkpoint (every CPT_CKPT steps).
# The documented CPU size (2 cores; docs/results-smollm2.md): one CPT step of
# 2 sequences at L = 1024 takes about 27 s on the quiet VM (50 s beside a
# test suite) and 4.5 GB peak RSS, so 24 steps (52k tokens) took 11 to 20
# minutes a seed and each eval of 12 documents 2 to 3 minutes: 52 minutes in
# all. The masks that match inference were run at 8 steps (17k tokens).
#   CONTEXTS=1024 EVAL_DOCS=12 QC=5,10 CPT_STEPS=24 CPT_CKPT=8 launch/realmodel.sh
#   CONTEXTS=1024 EVAL_DOCS=12 QC=5,10 CPT_STEPS=8 CPT_MASKS=evict,restride10 MASK_SEEDS=1,2,3 launch/realmodel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/realmodel}; CORPUS=${CORPUS:-../shared/corpus}; MODEL=${MODEL:-third_party/models/smollm2-135m}
CONTEXTS=${CONTEXTS:-2048,4096,8192}; S=${S:-50}; EVAL_DOCS=${EVAL_DOCS:-8}; QC=${QC:-5,10}
CPT_STEPS=${CPT_STEPS:-0}; CPT_LR=${CPT_LR:-5e-6}; CPT_BATCH=${CPT_BATCH:-2}; SEEDS=${SEEDS:-1,2,3}
CPT_MASKS=${CPT_MASKS:-}; MASK_SEEDS=${MASK_SEEDS:-$SEEDS}; CPT_CKPT=${CPT_CKPT:-4}; ROPE_SCALING=${ROPE_SCALING:-}
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
trained=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("max_position_embeddings", 2048))' \
    "$MODEL/config.json")
rope_for() { # L: sets rope_opts, eval's RoPE options for context L
    rope_opts=()
    [ $(($1 + S)) -gt "$trained" ] && [ -n "$ROPE_SCALING" ] || return 0
    if [ "$ROPE_SCALING" = none ]; then rope_opts=(--allow-beyond-context); else rope_opts=(--rope-scaling "$ROPE_SCALING"); fi
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
    rope_for "$L"
    timed "eval L=$L" ./kvcpt eval --model "$MODEL" --data "$OUT/data" --split test --L "$L" --S "$S" --K L/8 \
        --policies all --refresh-qc "$QC" --max-docs "$EVAL_DOCS" "${rope_opts[@]}" --out "$OUT/eval-$L"
done

stage "the table"
python3 scripts/realmodel_table.py --out "$OUT" --model "$MODEL" --contexts "$CONTEXTS" \
    --command "CONTEXTS=$CONTEXTS S=$S EVAL_DOCS=$EVAL_DOCS QC=$QC${ROPE_SCALING:+ ROPE_SCALING=$ROPE_SCALING} launch/realmodel.sh" >"$OUT/results-smollm2.md"
echo "wrote $OUT/results-smollm2.md" >&2
[[ "$CPT_STEPS" =~ ^[0-9]+$ ]] || { echo "realmodel: CPT_STEPS holds '$CPT_STEPS', not a count" >&2; exit 1; }
[ "$CPT_STEPS" -gt 0 ] || exit 0

CPT_L=${CPT_L:-$largest}
# the paper warms up for about 1% of its steps; at a few steps one step of warm-up
CPT_WARMUP=${CPT_WARMUP:-$(( CPT_STEPS >= 20 ? CPT_STEPS / 10 : 1 ))}
mask_sets() { # the train keys of a mask variant's name
    case "$1" in
        paper) echo "" ;;
        evict) echo "--set mask_evict=1" ;;
        restride[1-9]*) echo "--set mask_restride=${1#restride}" ;;
        evict+restride[1-9]*) echo "--set mask_evict=1 --set mask_restride=${1#evict+restride}" ;;
        *) echo "realmodel: CPT_MASKS holds '$1'; known: evict, restride<r>, evict+restride<r>" >&2; return 1 ;;
    esac
}
runs=()
for seed in ${SEEDS//,/ }; do runs+=("paper:$seed"); done
for m in ${CPT_MASKS//,/ }; do
    mask_sets "$m" >/dev/null
    for seed in ${MASK_SEEDS//,/ }; do runs+=("$m:$seed"); done
done
for r in "${runs[@]}"; do
    m=${r%%:*}; seed=${r#*:}; dir="$OUT/cpt-$m-seed$seed"
    [[ "$seed" =~ ^[0-9]+$ ]] || { echo "realmodel: a seed is '$seed', not a number" >&2; exit 1; }
    stage "CPT $m mask, seed $seed: $CPT_STEPS steps of $CPT_BATCH x $((CPT_L + S)) tokens, L = $CPT_L, K = $((CPT_L / 8))"
    if [ -f "$dir/model/model.kvcpt" ]; then echo "done already: $dir/model" >&2
    else
        # shellcheck disable=SC2046  # mask_sets gives whole --set words
        timed "cpt $m seed $seed" ./kvcpt train --resume --set model="$MODEL" --set init=pretrained --set data="$OUT/data" \
            --set out="$dir" --set mask=1 $(mask_sets "$m") --set L="$CPT_L" --set S="$S" --set K=$((CPT_L / 8)) \
            --set optim=adamw8bit --set lr="$CPT_LR" --set warmup_steps="$CPT_WARMUP" --set schedule=linear \
            --set min_lr_frac=0 --set weight_decay=0 --set grad_clip=1.0 --set global_batch="$CPT_BATCH" \
            --set micro_batch=1 --set steps="$CPT_STEPS" --set seed="$seed" --set eval_batches=0 \
            --set ckpt_interval="$CPT_CKPT" --set keep_last=1
    fi
    # the CPT model as Hugging Face safetensors (transformers loads it: tests/test_realmodel_cpt.sh)
    if [ ! -f "$dir/hf/config.json" ]; then
        timed "export $m seed $seed" ./kvcpt convert --from "$dir/model" --to "$dir/hf" --to-format hf >&2
    fi
    for L in ${CONTEXTS//,/ }; do
        stage "evaluate the CPT model ($m mask, seed $seed) with every policy at L = $L"
        if [ -f "$dir/eval-$L/eval.json" ]; then echo "done already: $dir/eval-$L/eval.json" >&2; continue; fi
        rope_for "$L"
        timed "eval $m seed $seed L=$L" ./kvcpt eval --model "$dir/model" --data "$OUT/data" --split test --L "$L" \
            --S "$S" --K L/8 --policies all --refresh-qc "$QC" --max-docs "$EVAL_DOCS" "${rope_opts[@]}" --out "$dir/eval-$L"
    done
done

stage "the summary across seeds"
python3 scripts/realmodel_cpt_table.py --out "$OUT" --contexts "$CONTEXTS" --seeds "$SEEDS" --masks "${CPT_MASKS}" \
    --mask-seeds "$MASK_SEEDS" --command "CONTEXTS=$CONTEXTS S=$S EVAL_DOCS=$EVAL_DOCS QC=$QC CPT_STEPS=$CPT_STEPS \
CPT_BATCH=$CPT_BATCH CPT_LR=$CPT_LR SEEDS=$SEEDS${CPT_MASKS:+ CPT_MASKS=$CPT_MASKS MASK_SEEDS=$MASK_SEEDS} launch/realmodel.sh" \
    >"$OUT/cpt-summary.md"
echo "wrote $OUT/cpt-summary.md" >&2
