#!/usr/bin/env bash
# Bits independent of thread counts and CPU binding: training and eval give
# the same numbers for any OMP_NUM_THREADS and OPENBLAS_NUM_THREADS, under a
# plain run and under mpirun --bind-to none and --bind-to core (one core per
# rank), and a 4-rank checkpoint resumes on 2 bound ranks with other thread
# counts and ends where the reference run ends. OpenBLAS alone changes its
# sgemm bits with its thread count; blas_sgemm pins it to one thread and
# parallelises over a fixed tiling.
set -u
cd "$(dirname "$0")/../.."
K=${KVCPT_BIN:-$PWD/kvcpt}
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
losses() { grep -o '"step":[0-9]*,"loss":[^,]*\|"dev_loss":[^,}]*' "$1/log.jsonl"; }
# same losses and the same final parameters as the reference run
same_as_ref() { diff <(losses "$tmp/ref") <(losses "$1") >/dev/null && cmp -s "$tmp/ref/model/model.safetensors" "$1/model/model.safetensors"; }
train() { # omp threads, blas threads, out dir, launcher and its arguments...
    local omp=$1 blas=$2 out=$3; shift 3
    env OMP_NUM_THREADS="$omp" OPENBLAS_NUM_THREADS="$blas" "$@" "$K" train --config "$tmp/cfg.json" --set out="$out" \
        >"$out.log" 2>&1
}

$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 300 --out "$tmp/data" >/dev/null
# micro_batch 3 x 56 tokens: 168 rows per matmul, more than one tile of rows
cat > "$tmp/model.json" <<JSON
{"vocab_size": 64, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 4096}
JSON
cat > "$tmp/cfg.json" <<JSON
{"model": "$tmp/model.json", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 12, "micro_batch": 3, "steps": 10, "warmup_steps": 2, "lr": 3e-3, "optim": "adamw8bit",
 "grad_clip": 0.3, "eval_interval": 5, "eval_batches": 5, "ckpt_interval": 5, "keep_last": 3}
JSON

train 1 1 "$tmp/ref" || fail "reference run" "$(tail -3 "$tmp/ref.log")"
blas=$(head -1 "$tmp/ref/log.jsonl" | grep -o '"blas":{[^}]*}')
if grep -q '"core":"[^"]' <<<"$blas" && grep -q '"config":"OpenBLAS' <<<"$blas" && grep -q '"blas_threads":1,"omp_threads":1' <<<"$blas"
then ok "log.jsonl's first record names the BLAS: $blas"
else fail "BLAS in log.jsonl" "first record: $(head -1 "$tmp/ref/log.jsonl")"; fi

for threads in "2 2" "1 2" "2 1"; do
    set -- $threads
    train "$1" "$2" "$tmp/plain-$1-$2"
    same_as_ref "$tmp/plain-$1-$2" && ok "plain run, OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$2: the bits of 1 and 1" ||
        fail "plain run with $1 OpenMP and $2 OpenBLAS threads" "$(tail -2 "$tmp/plain-$1-$2.log")"
done

for bind in none core; do
    for np in 1 2; do
        d="$tmp/mpi-$bind-$np"
        train 2 2 "$d" mpirun --oversubscribe --bind-to $bind -np $np
        same_as_ref "$d" && ok "mpirun --bind-to $bind -np $np (2 OpenMP, 2 OpenBLAS threads asked): the reference bits" ||
            fail "mpirun --bind-to $bind -np $np" "$(tail -2 "$d.log")"
    done
done

# 4 ranks unbound, OpenMP threads left to the ranks; resumed on 2 bound ranks with 1 thread
env -u OMP_NUM_THREADS OPENBLAS_NUM_THREADS=2 mpirun --oversubscribe --bind-to none -np 4 "$K" train \
    --config "$tmp/cfg.json" --set out="$tmp/four" >"$tmp/four.log" 2>&1
same_as_ref "$tmp/four" && ok "4 unbound ranks: the reference bits" || fail "4 ranks" "$(tail -2 "$tmp/four.log")"
d="$tmp/resume"
mkdir -p "$d/ckpt" && cp -r "$tmp/four/ckpt/step_00000005" "$d/ckpt/" && head -5 "$tmp/four/log.jsonl" >"$d/log.jsonl"
env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpirun --oversubscribe --bind-to core -np 2 "$K" train \
    --config "$tmp/cfg.json" --set out="$d" --resume >"$d.log" 2>&1
if grep -q "written by 4 ranks, now 2" "$d.log" && same_as_ref "$d"; then
    ok "4 unbound ranks (2 BLAS threads) -> resumed on 2 ranks bound to cores (1 thread): the reference bits"
else fail "resume 4 -> 2 ranks" "$(tail -2 "$d.log")"; fi

# eval (prefill through BLAS, every policy) of the reference model
for threads in "1 1" "2 2"; do
    set -- $threads
    OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$2 $K eval --model "$tmp/ref/model" --data "$tmp/data" --L 40,48 \
        --S 8 --K L/8 --out "$tmp/ev-$1-$2" --max-docs 4 >"$tmp/ev-$1-$2.log" 2>&1 ||
        fail "eval with $1 OpenMP and $2 OpenBLAS threads" "$(tail -2 "$tmp/ev-$1-$2.log")"
done
res=$(/usr/bin/python3 - "$tmp/ev-1-1/eval.json" "$tmp/ev-2-2/eval.json" <<'PY' 2>&1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
strip = lambda r: [{k: v for k, v in c.items() if k != "decode_ms_per_token"} for c in r["results"]]
blas = a["blas"]
print("same" if strip(a) == strip(b) and len(a["results"]) > 0 else "differ",
      "named" if blas["core"] and blas["config"].startswith("OpenBLAS") and blas["blas_threads"] == 1
      and blas["omp_threads"] == 1 and b["blas"]["omp_threads"] == 2 else "unnamed: %r" % blas)
PY
)
[ "$res" = "same named" ] && ok "eval.json: every cell and document PPL equal with 1 and 2 threads; \"blas\" names the core" ||
    fail "eval under 1 and 2 threads" "$res"
