#!/usr/bin/env bash
# Sharded training under mpirun on CPU: the same global batch on
# 1, 2, 3 and 4 ranks gives identical losses and identical final parameters
# (8-bit AdamW with tensors cut across ranks, clipping active, tied and
# untied embeddings); a checkpoint written by 4 ranks resumes on 2 and on 3
# and continues exactly as the uninterrupted 4-rank run.
. "$(dirname "$0")/../lib.sh" || exit 1
K=${KVCPT_BIN:-$PWD/kvcpt}
if ! command -v mpirun >/dev/null 2>&1 || ! $K --version | grep -q "collectives: single, mpi"; then
    echo "skip - sharding under mpirun: mpirun or an MPI-enabled kvcpt is missing (run make setup, then make)"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() { # ranks, out dir, extra args...
    local n=$1 out=$2; shift 2
    mpirun --oversubscribe -np "$n" "$K" train --config "$tmp/cfg.json" --set out="$out" "$@" >"$out.log" 2>&1
}
losses() { grep -o '"step":[0-9]*,"loss":[^,]*\|"dev_loss":[^,}]*' "$1/log.jsonl"; }

$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 300 --out "$tmp/data" >/dev/null
# every matrix >= 4096 elements: 8-bit states, and the cuts fall inside tensors
for tie in false true; do
cat > "$tmp/model-$tie.json" <<JSON
{"vocab_size": 64, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": $tie,
 "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 4096}
JSON
done
cat > "$tmp/cfg.json" <<JSON
{"model": "$tmp/model-false.json", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 12, "micro_batch": 1, "steps": 10, "warmup_steps": 2, "lr": 3e-3, "optim": "adamw8bit",
 "grad_clip": 0.3, "eval_interval": 5, "eval_batches": 5, "ckpt_interval": 5, "keep_last": 3}
JSON

for tie in false true; do
    for n in 1 2 3 4; do run $n "$tmp/$tie-$n" --set model="$tmp/model-$tie.json" || fail "$n ranks ($tie)" "$(tail -3 "$tmp/$tie-$n.log")"; done
    same=1; why=""
    for n in 2 3 4; do
        if ! diff <(losses "$tmp/$tie-1") <(losses "$tmp/$tie-$n") >/dev/null; then same=0; why="$n ranks: losses differ"; fi
        if ! cmp -s "$tmp/$tie-1/model/model.safetensors" "$tmp/$tie-$n/model/model.safetensors"; then same=0; why="$why; $n ranks: parameters differ"; fi
    done
    clipped=$(grep -o '"grad_norm":[0-9.e+-]*' "$tmp/$tie-1/log.jsonl" | awk -F: '$2 > 0.3' | wc -l)
    if [ $same = 1 ] && [ "$(losses "$tmp/$tie-1" | wc -l)" = 12 ] && [ "$clipped" -ge 1 ]; then
        ok "1, 2, 3, 4 ranks: identical losses, dev losses and final parameters (10 steps, tie_word_embeddings=$tie, clipping active on $clipped steps)"
    else fail "rank-count invariance (tie_word_embeddings=$tie)" "${why:-log has $(losses "$tmp/$tie-1" | wc -l) loss lines, $clipped clipped steps}"; fi
done

# without mpirun: the world of one, the same numbers
$K train --config "$tmp/cfg.json" --set out="$tmp/plain" >"$tmp/plain.log" 2>&1
if cmp -s "$tmp/false-1/model/model.safetensors" "$tmp/plain/model/model.safetensors"; then ok "a plain run (no mpirun) equals the 1-rank mpirun run"
else fail "plain vs 1-rank mpirun" "$(tail -2 "$tmp/plain.log")"; fi

NP=3 launch/train-1node.sh "$tmp/cfg.json" --set out="$tmp/script" >"$tmp/script.log" 2>&1
if cmp -s "$tmp/false-1/model/model.safetensors" "$tmp/script/model/model.safetensors" && grep -q "on 3 ranks" "$tmp/script.log"; then
    ok "launch/train-1node.sh (NP=3) runs and equals the 1-rank run"
else fail "launch/train-1node.sh" "$(tail -2 "$tmp/script.log")"; fi
launch/train-single.sh "$tmp/cfg.json" --set out="$tmp/single" >"$tmp/single.log" 2>&1
cmp -s "$tmp/false-1/model/model.safetensors" "$tmp/single/model/model.safetensors" && ok "launch/train-single.sh runs and equals the 1-rank run" ||
    fail "launch/train-single.sh" "$(tail -2 "$tmp/single.log")"

run 2 "$tmp/keep" --set reshard_after_forward=0
if cmp -s "$tmp/false-1/model/model.safetensors" "$tmp/keep/model/model.safetensors"; then ok "reshard_after_forward=0 gives the same parameters"
else fail "reshard_after_forward=0" "parameters differ"; fi

# save with 4 ranks, resume with 2 and with 3 from the step-5 checkpoint
for m in 2 3; do
    d="$tmp/resume-$m"
    mkdir -p "$d/ckpt" && cp -r "$tmp/false-4/ckpt/step_00000005" "$d/ckpt/" && head -5 "$tmp/false-4/log.jsonl" > "$d/log.jsonl"
    run $m "$d" --resume
    if grep -q "written by 4 ranks, now $m" "$d.log" && diff <(losses "$tmp/false-4") <(losses "$d") >/dev/null &&
       cmp -s "$tmp/false-4/model/model.safetensors" "$d/model/model.safetensors"; then
        ok "checkpoint from 4 ranks resumed on $m: losses and final parameters equal the uninterrupted 4-rank run"
    else fail "resume 4 -> $m ranks" "$(tail -3 "$d.log"; diff <(losses "$tmp/false-4") <(losses "$d") | head -3)"; fi
done

# SIGTERM to mpirun: every rank stops at the same step with a checkpoint; the resumed run equals the uninterrupted one
# (1000 steps of about 5 ms: on a quiet machine 200 could all run before mpirun passes the signal on)
long=(--set steps=1000 --set eval_interval=0 --set ckpt_interval=0)
run 2 "$tmp/sig-a" "${long[@]}"
mpirun --oversubscribe -np 2 "$K" train --config "$tmp/cfg.json" --set out="$tmp/sig-b" "${long[@]}" >"$tmp/sig-first.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
    n=$( (wc -l < "$tmp/sig-b/log.jsonl") 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 20 ] && break
    sleep 0.01
done
kill -TERM $pid; wait $pid
run 2 "$tmp/sig-b" "${long[@]}" --resume
if grep -q "SIGTERM received: checkpoint written at step" "$tmp/sig-first.log" && grep -q "resumed from" "$tmp/sig-b.log" &&
   diff <(losses "$tmp/sig-a") <(losses "$tmp/sig-b") >/dev/null && cmp -s "$tmp/sig-a/model/model.safetensors" "$tmp/sig-b/model/model.safetensors"; then
    ok "SIGTERM to mpirun (2 ranks): checkpoint at $(grep -o 'written at step [0-9]*' "$tmp/sig-first.log" | grep -o '[0-9]*$'), resume equals the uninterrupted run"
else fail "SIGTERM under mpirun" "$(tail -2 "$tmp/sig-first.log")"; fi

# a rank that stops (SIGSTOP) in the middle of training ends the job within
# the collective timeout, and the message names it; no rank is left behind
stalled() { # victim rank, ranks
    local victim=$1 n=$2 out=$tmp/stall-$1-$2
    mpirun --oversubscribe -np "$n" "$K" train --config "$tmp/cfg.json" --set out="$out" "${long[@]}" --set steps=100000 \
        --set comm_timeout=3 >"$out.log" 2>&1 &
    local mp=$! pids=() p t0 t1
    for _ in $(seq 1 3000); do
        [ "$( (wc -l < "$out/log.jsonl") 2>/dev/null || echo 0)" -ge 5 ] && break
        sleep 0.01
    done
    for p in $(pgrep -P "$mp"); do pids+=("$p"); done
    for p in "${pids[@]}"; do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim"; then kill -STOP "$p"; break; fi
    done
    t0=$SECONDS
    ( sleep 60; kill -KILL "$mp" "${pids[@]}" 2>/dev/null ) & local guard=$!
    wait "$mp"; local rc=$?
    t1=$SECONDS; kill "$guard" 2>/dev/null; wait "$guard" 2>/dev/null
    # a rank guards its own MPI_Abort with 10 s
    local left waited
    ranks_left 20 "${pids[@]}"
    if [ "$rc" -ne 0 ] && [ $((t1 - t0)) -le 30 ] && [ "$left" = 0 ] &&
        grep -q "silent for over 1.5 s (stopped, hung, or slower than comm_timeout): rank $victim (last heard" "$out.log"; then
        ok "rank $victim of $n stopped (SIGSTOP): the job ended in $((t1 - t0)) s (comm_timeout=3), naming rank $victim; no rank left ${waited} s after mpirun"
    else fail "rank $victim of $n stopped" "exit $rc after $((t1 - t0)) s, $left ranks left 20 s after mpirun; $(grep 'kvcpt: error' "$out.log" | head -3)"
        for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    fi
}
stalled 2 3
stalled 0 2

# a rank count that does not divide the global batch is refused, naming the fields
if out=$(mpirun --oversubscribe -np 5 "$K" train --config "$tmp/cfg.json" --set out="$tmp/five" 2>&1); then fail "5 ranks" "accepted"
elif grep -q "'global_batch' (12) must be divisible by 'micro_batch' (1) x ranks (5)" <<<"$out"; then ok "5 ranks with global_batch 12 is refused, naming the fields"
else fail "5 ranks" "$(head -3 <<<"$out")"; fi
