#!/usr/bin/env bash
# kvcpt train end to end on CPU: a small config from a prepared
# shard directory; SIGTERM mid-run then --resume equals the uninterrupted run
# bit for bit (losses and final parameters/optimizer state); bad configs
# rejected naming the problem; NaN loss stops the run keeping the checkpoint.
. "$(dirname "$0")/lib.sh"

$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 300 --out "$tmp/data" >/dev/null
cat > "$tmp/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 4, "micro_batch": 2, "steps": 150, "warmup_steps": 10, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 50, "ckpt_interval": 1000, "keep_last": 2}
JSON

# 1. uninterrupted
if $K train --config "$tmp/cfg.json" --set out="$tmp/a" >"$tmp/a.log" 2>&1 && [ -f "$tmp/a/loss.png" ] && [ -f "$tmp/a/model/model.safetensors" ]; then
    ok "small config runs end to end (log, loss.png, final model)"
else fail "end to end run" "$(tail -3 "$tmp/a.log")"; fi

# 2. SIGTERM mid-run, then resume
$K train --config "$tmp/cfg.json" --set out="$tmp/b" >"$tmp/b.log" 2>&1 &
pid=$!
for _ in $(seq 1 2000); do
    n=$( (wc -l < "$tmp/b/log.jsonl") 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 20 ] && break
    sleep 0.01
done
kill -TERM $pid; wait $pid; rc=$?
stopped=$(grep -o '"step":[0-9]*' "$tmp/b/log.jsonl" | tail -1 | cut -d: -f2)
if [ $rc -eq 143 ] && grep -q "SIGTERM received: checkpoint written" "$tmp/b.log" && [ "${stopped:-150}" -lt 150 ]; then
    ok "SIGTERM writes a checkpoint and exits 143 (stopped at step $stopped of 150)"
else fail "SIGTERM" "rc $rc, stopped at ${stopped:-?}: $(tail -2 "$tmp/b.log")"; fi
$K train --config "$tmp/cfg.json" --set out="$tmp/b" --resume >"$tmp/b2.log" 2>&1
grep -q "resumed from" "$tmp/b2.log" && ok "--resume picks the latest checkpoint" || fail "--resume" "$(tail -2 "$tmp/b2.log")"
strip() { sed -E 's/,"(tokens_per_s|gflops_per_s|peak_rss_mb|elapsed_s)":[^,}]*//g;s/,"blas":\{[^}]*\}//' "$1"; }
if diff <(strip "$tmp/a/log.jsonl") <(strip "$tmp/b/log.jsonl") >/dev/null; then
    ok "resumed loss curve equals the uninterrupted one bit for bit (150 steps)"
else fail "resumed loss curve" "$(diff <(strip "$tmp/a/log.jsonl") <(strip "$tmp/b/log.jsonl") | head -4)"; fi
if cmp -s "$tmp/a/model/model.safetensors" "$tmp/b/model/model.safetensors" && \
   cmp -s "$tmp/a/ckpt/step_00000150/rank_00000.bin" "$tmp/b/ckpt/step_00000150/rank_00000.bin"; then
    ok "resumed final parameters and optimizer state equal the uninterrupted run"
else fail "resumed final state" "model or checkpoint bytes differ"; fi

# 3. rejected configs name the problem
expect_err() { # name, expected text, args...
    local name=$1 want=$2; shift 2
    if out=$($K train "$@" 2>&1); then fail "$name" "accepted"; elif grep -qF -- "$want" <<<"$out"; then ok "$name"; else fail "$name" "$out"; fi
}
expect_err "unknown config key is rejected" "unknown config key 'learning_rate'" --config "$tmp/cfg.json" --set out="$tmp/c" --set learning_rate=1
echo '{"model":"tiny","data":"'"$tmp"'/data","lr_warmup":3}' > "$tmp/bad.json"
expect_err "unknown key inside the JSON file" "unknown config key 'lr_warmup'" --config "$tmp/bad.json"
expect_err "missing data directory" "$tmp/nodata" --config "$tmp/cfg.json" --set data="$tmp/nodata" --set out="$tmp/c"
expect_err "batch that does not divide" "'global_batch' (5) must be divisible by 'micro_batch' (2)" --config "$tmp/cfg.json" --set global_batch=5 --set out="$tmp/c"
expect_err "K > L" "'K' (60) must be in [1, L=48]" --config "$tmp/cfg.json" --set K=60 --set out="$tmp/c"

expect_err "mask_evict 2 is rejected" "'mask_evict' must be 0 or 1 (got 2)" --config "$tmp/cfg.json" --set mask_evict=2 --set out="$tmp/c"
expect_err "negative mask_restride is rejected" "'mask_restride' must be >= 0" --config "$tmp/cfg.json" --set mask_restride=-1 --set out="$tmp/c"
expect_err "mask_evict without the mask is rejected" "they need mask=1" --config "$tmp/cfg.json" --set mask=0 --set mask_evict=1 --set out="$tmp/c"
# recompute is a name (none | attn | full), 0 and 1 read as none and full
expect_err "recompute=2 is rejected naming the settings" "recompute must be none, attn or full (0 and 1 are none and full; got '2')" --config "$tmp/cfg.json" --set recompute=2 --set out="$tmp/c"
echo '{"model":"tiny","data":"'"$tmp"'/data","recompute":0.5}' > "$tmp/badrc.json"
expect_err "recompute 0.5 in JSON is rejected" "'recompute' must be a name or an integer" --config "$tmp/badrc.json"

# the eval cache's mask (mask_evict, mask_restride): S = 16 > K = 6 and a
# full row at L-1 + 10, so both fields change which keys rows >= L see
losses() { grep -o '"loss":[^,]*' "$1/log.jsonl" | cut -d: -f2; }
for v in "0 0" "1 10"; do
    set -- $v
    $K train --config "$tmp/cfg.json" --set L=40 --set S=16 --set steps=12 --set eval_interval=0 \
        --set mask_evict=$1 --set mask_restride=$2 --set out="$tmp/ev$1" >"$tmp/ev$1.log" 2>&1 || fail "mask_evict=$1 run" "$(tail -2 "$tmp/ev$1.log")"
done
if [ "$(losses "$tmp/ev1" | wc -l)" -eq 12 ] && ! losses "$tmp/ev1" | grep -qiE "nan|inf" &&
   grep -q '"mask_evict": 1' "$tmp/ev1/config.json" && grep -q '"mask_restride": 10' "$tmp/ev1/config.json" &&
   ! diff <(losses "$tmp/ev0") <(losses "$tmp/ev1") >/dev/null; then
    ok "mask_evict=1 mask_restride=10 trains 12 steps, finite losses that differ from mask_evict=0 ($(losses "$tmp/ev1" | tail -1) vs $(losses "$tmp/ev0" | tail -1))"
else fail "mask_evict=1 mask_restride=10 run" "$(losses "$tmp/ev1" | tr '\n' ' ') | $(tail -2 "$tmp/ev1.log")"; fi

# shipped configs parse (every key known); they only fail later, on the data path given here
for f in launch/configs/cpt-*.json launch/configs/cpu-*.json; do
    expect_err "shipped config $(basename "$f") parses" "$tmp/nowhere/manifest.json" --config "$f" --set model=tiny --set init=random --set data="$tmp/nowhere" --set out="$tmp/c"
done

# 3b. the run directory: an earlier run is never silently replaced, pruning never leaves ckpt/
sum_a=$(cat "$tmp/a/log.jsonl" "$tmp/a/model/model.safetensors" | md5sum)
expect_err "a fresh run into a used run directory is refused" "holds an earlier run" --config "$tmp/cfg.json" --set out="$tmp/a" --set steps=2
expect_err "--overwrite with a run that fails set-up leaves the earlier run" "warm-up steps" --config "$tmp/cfg.json" --set out="$tmp/a" --set steps=2 --overwrite
expect_err "--resume with --overwrite is refused" "give one" --config "$tmp/cfg.json" --set out="$tmp/a" --resume --overwrite
expect_err "out equal to the model directory is refused" "is or contains the model directory" --config "$tmp/cfg.json" \
    --set init=pretrained --set model="$tmp/a/model" --set out="$tmp/a/model"
expect_err "out containing the model directory is refused" "is or contains the model directory" --config "$tmp/cfg.json" \
    --set init=pretrained --set model="$tmp/a/model" --set out="$tmp/a" --resume
[ "$(cat "$tmp/a/log.jsonl" "$tmp/a/model/model.safetensors" | md5sum)" = "$sum_a" ] && ok "the refused runs left the earlier run's log and model as they were" \
    || fail "refused runs" "the earlier run's log or model changed"
cp -r "$tmp/a" "$tmp/o"
if $K train --config "$tmp/cfg.json" --set out="$tmp/o" --set steps=3 --set warmup_steps=1 --set eval_interval=0 --set ckpt_interval=1 --overwrite >"$tmp/o.log" 2>&1 &&
   [ "$(wc -l < "$tmp/o/log.jsonl")" -eq 3 ] && [ "$(ls "$tmp/o/ckpt")" = "$(printf 'step_00000002\nstep_00000003')" ]; then
    ok "--overwrite removes the earlier run (150 steps) and keeps only the new one's log and checkpoints"
else fail "--overwrite" "$(ls "$tmp/o/ckpt" | tr '\n' ' ') $(tail -2 "$tmp/o.log")"; fi
mkdir -p "$tmp/victim" "$tmp/p/ckpt" && echo keep > "$tmp/victim/data.txt" && ln -s "$tmp/victim" "$tmp/p/ckpt/step_00000001"
if $K train --config "$tmp/cfg.json" --set out="$tmp/p" --set steps=4 --set warmup_steps=1 --set eval_interval=0 --set ckpt_interval=1 \
        --set keep_last=1 --resume >"$tmp/p.log" 2>&1 && [ -f "$tmp/victim/data.txt" ] && grep -q "not a checkpoint directory" "$tmp/p.log"; then
    ok "pruning skips a link under ckpt/ with a warning and never deletes what it points to"
else fail "pruning and a link under ckpt/" "$(ls "$tmp/victim") $(tail -2 "$tmp/p.log")"; fi

# 4. NaN loss stops the run and keeps the last good checkpoint
if out=$($K train --config "$tmp/cfg.json" --set out="$tmp/n" --set lr=1e30 --set optim=adamw --set grad_clip=0 --set ckpt_interval=1 --set steps=40 2>&1); then
    fail "NaN loss stops the run" "exit status 0"
elif grep -q "loss is.*stopping" <<<"$out" && ls "$tmp/n/ckpt"/step_*/manifest.json >/dev/null 2>&1; then
    ok "NaN loss stops the run with a message, last good checkpoint kept"
else fail "NaN loss stops the run" "$(tail -2 <<<"$out")"; fi
exit 0
