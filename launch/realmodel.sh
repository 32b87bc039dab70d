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
# They are drawn from every
# corpus file in turn (PICK=interleave; PICK=first takes the test split's
# order, where the first file fills the pick), and for each the share of
# scored tokens that copy an earlier 8-token sequence of the window is
# recorded; MAX_COPY_SHARE=F (default 1: none) scores only windows whose
# share is at most F, so the documents may then differ between contexts
# (docs/eval.md, "Which documents").
#
# Each context is a stage of its own, skipped when its eval.json exists, so a
# cut-off run continues where it stopped: just run it again. At the end
# scripts/realmodel_table.py writes $OUT/results-smollm2.md.
#   launch/realmodel.sh                                       # 2048, 4096, 8192
#   CONTEXTS=2048,4096,8192,16334 ROPE_SCALING=yarn:2 EVAL_DOCS=8 launch/realmodel.sh
#   CONTEXTS=256 S=8 EVAL_DOCS=2 QC=5 OUT=/tmp/rm launch/realmodel.sh     # a smoke run
# DEVICE=cuda runs every eval and CPT on the GPU (`--device cuda`, train's
# device=cuda; default cpu); KVCPT names the binary (default ./kvcpt, e.g. the
# GPU bundle's, or build/emu/kvcpt for the emulated GPU).
#
# CPT_STEPS=N > 0 adds the paper's experiment after that eval, with its
# control: continued pretraining from the pretrained checkpoint (L = CPT_L,
# default the largest context; S; K = L/8) with the paper's recipe scaled
# down: lr 5e-6 (CPT_LR), CPT_WARMUP warm-up steps then linear decay to 0,
# 8-bit AdamW, gradient clip 1.0, CPT_BATCH sequences per step; once per arm
# of ARMS and seed of SEEDS (the data order; default 1,2,3). The arms
# (default mask,causal) differ only in the attention they train under:
# mask the paper's RefreshKV mask, causal plain causal attention (the
# control: same tokens, data order and schedule), and the masks that match
# inference, evict, restride<r> and evict+restride<r> (train keys
# mask_evict=1, mask_restride=r). Each CPT model is then evaluated with every
# policy at every context; scripts/realmodel_cpt_table.py writes
# $OUT/cpt-summary.md: per policy the mask arm over the causal arm with
# paired intervals and tests over documents, each arm's before -> after,
# the documents' sources and copy shares.
# Each CPT model (DIR/model) is a Hugging Face directory with the model's
# tokenizer, which transformers opens as it is.
# Every CPT and eval is a stage of its own with the same skip rule; a
# CPT cut off resumes from its last checkpoint (every CPT_CKPT steps).
# The documented CPU size (2 cores; docs/results-smollm2.md): one CPT step of
# 2 sequences at L = 1024 takes about 27 s on the quiet VM (50 s beside a
# test suite) and 4.5 GB peak RSS, so 24 steps (52k tokens) took 11 to 20
# minutes a seed and each eval of 12 documents 2 to 3 minutes: 52 minutes in
# all. The masks that match inference were run at 8 steps (17k tokens). Those
# runs had neither the control arm nor documents from every source (they
# took the first 12 of the test split, all TeX manuals); with the control
# each seed costs two CPTs:
#   CONTEXTS=1024 EVAL_DOCS=48 QC=5,10 CPT_STEPS=24 CPT_CKPT=8 launch/realmodel.sh
#   CONTEXTS=1024 EVAL_DOCS=48 QC=5,10 CPT_STEPS=8 ARMS=mask,causal,evict,restride10 launch/realmodel.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# every variable, its default and its range, checked before any work (launch/lib/env.sh)
. launch/lib/env.sh
env_text OUT runs/realmodel; env_text CORPUS ../shared/corpus; env_text MODEL third_party/models/smollm2-135m
env_ints CONTEXTS 2048,4096,8192 8 1048576; env_int S 50 1 65536; env_int EVAL_DOCS 8 0 1000000000
env_ints QC 5,10 1 1000000; env_int CPT_STEPS 0 0 1000000000; env_number CPT_LR 5e-6 0 1
env_int CPT_BATCH 2 1 1000000; env_ints SEEDS 1,2,3 0 2147483647
env_int CPT_L "$(env_max "$CONTEXTS")" 8 "$(env_max "$CONTEXTS")"
env_int CPT_WARMUP $((CPT_STEPS >= 20 ? CPT_STEPS / 10 : 1)) 0 1000000000
env_int CPT_CKPT 4 0 1000000000
env_names ARMS mask,causal "mask, causal, evict, restride<r>, evict+restride<r> (r >= 1)" mask causal evict \
    'restride[1-9][0-9]*' 'evict\+restride[1-9][0-9]*'
[ -n "$ARMS" ] || env_fail "ARMS is empty; e.g. ARMS=mask,causal"
env_names PICK interleave "first or interleave" first interleave
[[ "$PICK" =~ ^(first|interleave)$ ]] || env_fail "PICK is '$PICK'; one of first, interleave"
env_text MAX_COPY_SHARE 1
# where kvcpt train and eval run: cpu, or cuda (a GPU, or the emulated one of
# build/emu/kvcpt); KVCPT is the binary (default ./kvcpt, built when absent)
env_names DEVICE cpu "cpu or cuda" cpu cuda
[ -n "$DEVICE" ] || env_fail "DEVICE is empty; one of cpu, cuda (unset it for the default, cpu)"
[[ $DEVICE != *,* ]] || env_fail "DEVICE is '$DEVICE'; one of cpu, cuda"
env_text KVCPT ./kvcpt
[[ "$MAX_COPY_SHARE" =~ ^(0(\.[0-9]+)?|1(\.0*)?|\.[0-9]+)$ ]] || env_fail "MAX_COPY_SHARE holds '$MAX_COPY_SHARE', not a share in [0, 1]"
for v in CPT_MASKS MASK_SEEDS; do # replaced by ARMS, which runs every arm for every seed of SEEDS
    [ -z "${!v:-}" ] || env_fail "$v is replaced by ARMS (e.g. ARMS=mask,causal,evict,restride10, every arm for every seed of SEEDS)"
done
. launch/arms.sh
env_names ROPE_SCALING "" "none, or TYPE:FACTOR with TYPE linear, dynamic or yarn" none '(linear|dynamic|yarn):[0-9]+(\.[0-9]+)?'
[[ $ROPE_SCALING != *,* ]] || env_fail "ROPE_SCALING holds '$ROPE_SCALING'; one extension (e.g. yarn:2) or none"
if [ "$KVCPT" = ./kvcpt ]; then [ -x ./kvcpt ] || make -j"$(nproc)" kvcpt
elif [ ! -x "$KVCPT" ]; then env_fail "KVCPT is '$KVCPT', which is not an executable"; fi
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
trained=$(python3 -c 'import json, sys
try:
    print(int(json.load(open(sys.argv[1])).get("max_position_embeddings", 2048)))
except (OSError, ValueError, AttributeError, TypeError) as e:
    sys.exit("realmodel: MODEL is %s, whose config.json gives no max_position_embeddings (%s)" % (sys.argv[2], e))' \
    "$MODEL/config.json" "$MODEL") || exit 1
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
[ -f "$OUT/data/manifest.json" ] || timed prepare "$KVCPT" prepare --input "$CORPUS" --tokenizer "$MODEL/tokenizer.json" \
    --min-tokens $((largest + S + 1)) --out "$OUT/data"

for L in ${CONTEXTS//,/ }; do
    stage "evaluate every policy at L = $L (S = $S, K = L/8, $EVAL_DOCS documents)"
    if [ -f "$OUT/eval-$L/eval.json" ]; then echo "done already: $OUT/eval-$L/eval.json" >&2; continue; fi
    rope_for "$L"
    timed "eval L=$L" "$KVCPT" eval --device "$DEVICE" --model "$MODEL" --data "$OUT/data" --split test --L "$L" --S "$S" \
        --K L/8 --policies all --refresh-qc "$QC" --max-docs "$EVAL_DOCS" --pick "$PICK" --max-copy-share "$MAX_COPY_SHARE" \
        "${rope_opts[@]}" --out "$OUT/eval-$L"
done

stage "the table"
dev_note=""; [ "$DEVICE" = cpu ] || dev_note=" DEVICE=$DEVICE" # the tables' command line names a GPU run
python3 scripts/realmodel_table.py --out "$OUT" --model "$MODEL" --contexts "$CONTEXTS" \
    --command "CONTEXTS=$CONTEXTS S=$S EVAL_DOCS=$EVAL_DOCS QC=$QC PICK=$PICK MAX_COPY_SHARE=$MAX_COPY_SHARE${ROPE_SCALING:+ ROPE_SCALING=$ROPE_SCALING}$dev_note \
launch/realmodel.sh" >"$OUT/results-smollm2.md"
echo "wrote $OUT/results-smollm2.md" >&2
[[ "$CPT_STEPS" =~ ^[0-9]+$ ]] || { echo "realmodel: CPT_STEPS holds '$CPT_STEPS', not a count" >&2; exit 1; }
[ "$CPT_STEPS" -gt 0 ] || exit 0

CPT_L=${CPT_L:-$largest}
# the paper warms up for about 1% of its steps; at a few steps one step of warm-up
CPT_WARMUP=${CPT_WARMUP:-$(( CPT_STEPS >= 20 ? CPT_STEPS / 10 : 1 ))}
# seed by seed, every arm: a cut-off run has the arms of its first seeds whole
runs=()
for seed in ${SEEDS//,/ }; do
    [[ "$seed" =~ ^[0-9]+$ ]] || env_fail "SEEDS holds '$seed', not a number"
    for arm in ${ARMS//,/ }; do runs+=("$arm:$seed"); done
done
for r in "${runs[@]}"; do
    m=${r%%:*}; seed=${r#*:}; dir="$OUT/cpt-$m-seed$seed"
    stage "CPT arm $m, seed $seed: $CPT_STEPS steps of $CPT_BATCH x $((CPT_L + S)) tokens, L = $CPT_L, K = $((CPT_L / 8))"
    if [ -f "$dir/model/config.json" ]; then echo "done already: $dir/model" >&2
    else
        # shellcheck disable=SC2046  # arm_sets gives whole --set words
        timed "cpt $m seed $seed" "$KVCPT" train --resume --set model="$MODEL" --set init=pretrained --set data="$OUT/data" \
            --set device="$DEVICE" --set out="$dir" $(arm_sets "$m") --set L="$CPT_L" --set S="$S" --set K=$((CPT_L / 8)) \
            --set optim=adamw8bit --set lr="$CPT_LR" --set warmup_steps="$CPT_WARMUP" --set schedule=linear \
            --set min_lr_frac=0 --set weight_decay=0 --set grad_clip=1.0 --set global_batch="$CPT_BATCH" \
            --set micro_batch=1 --set steps="$CPT_STEPS" --set seed="$seed" --set eval_batches=0 \
            --set ckpt_interval="$CPT_CKPT" --set keep_last=1
    fi
    for L in ${CONTEXTS//,/ }; do
        stage "evaluate the CPT model (arm $m, seed $seed) with every policy at L = $L"
        if [ -f "$dir/eval-$L/eval.json" ]; then echo "done already: $dir/eval-$L/eval.json" >&2; continue; fi
        rope_for "$L"
        timed "eval $m seed $seed L=$L" "$KVCPT" eval --device "$DEVICE" --model "$dir/model" --data "$OUT/data" --split test --L "$L" \
            --S "$S" --K L/8 --policies all --refresh-qc "$QC" --max-docs "$EVAL_DOCS" --pick "$PICK" \
            --max-copy-share "$MAX_COPY_SHARE" "${rope_opts[@]}" --out "$dir/eval-$L"
    done
done

stage "the summary across arms and seeds"
python3 scripts/realmodel_cpt_table.py --out "$OUT" --contexts "$CONTEXTS" --seeds "$SEEDS" --arms "$ARMS" \
    --command "CONTEXTS=$CONTEXTS S=$S EVAL_DOCS=$EVAL_DOCS QC=$QC PICK=$PICK MAX_COPY_SHARE=$MAX_COPY_SHARE \
CPT_STEPS=$CPT_STEPS CPT_BATCH=$CPT_BATCH CPT_LR=$CPT_LR SEEDS=$SEEDS ARMS=$ARMS$dev_note launch/realmodel.sh" >"$OUT/cpt-summary.md"
echo "wrote $OUT/cpt-summary.md" >&2
# the headline on the terminal: per context, each policy's mask arm over the causal arm, and the answers
sed -n '/^### L = .*: mask over causal/,/^### L = .*: each arm/{/^### L = .*: each arm/!p}' "$OUT/cpt-summary.md"
