#!/usr/bin/env bash
# kvcpt train end to end on CPU: a small config from a prepared
# shard directory; SIGTERM mid-run then --resume equals the uninterrupted run
# bit for bit (losses and final parameters/optimizer state); bad configs
# rejected naming the problem; NaN loss stops the run keeping the checkpoint.
. "$(dirname "$0")/../lib.sh" || exit 1

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
# what the run says on stderr: what it loads and its sizes before step 1,
# tokens/s and an ETA on the step lines, each checkpoint with its path, size
# and time; a clean end leaves no train.lock, and the run's configuration
# is train_config.json (config.json is the model's name)
before=$(sed -n '1,/^step 1\//p' "$tmp/a.log")
if grep -q "^kvcpt train: initialising at random the model tiny (2 layers, hidden 32, vocab 64)" <<<"$before" &&
   grep -q "^kvcpt train: model ready in [0-9.]* s: [0-9]* parameters" <<<"$before" &&
   grep -q "^kvcpt train: data .*: train [0-9]* documents, [0-9]* samples of L + S + 1 = 57 tokens per epoch" <<<"$before" &&
   grep -q "^kvcpt train: set-up done in [0-9.]* s (peak RSS [0-9]* MB); steps 1 to 150 of 4 sequences x 56 tokens" <<<"$before" &&
   grep -q "^step 150/150  loss [0-9.]*  lr .* [0-9]* tok/s .* ETA 0:00" "$tmp/a.log" &&
   grep -q "^kvcpt train: checkpoint step 150 written ($tmp/a/ckpt/step_00000150, [0-9.]* MB, [0-9.]* s)$" "$tmp/a.log"; then
    ok "train says what it loads and its sizes before step 1, tokens/s and ETA per step, each checkpoint written"
else fail "train's output" "$(grep -v '^step' "$tmp/a.log" | head -12)"; fi
[ ! -e "$tmp/a/train.lock" ] && ok "a clean end removes train.lock" || fail "train.lock" "left after a clean exit"
[ -s "$tmp/a/train_config.json" ] && [ ! -e "$tmp/a/config.json" ] &&
    ok "the run's configuration is train_config.json, no config.json beside model/" || fail "train_config.json" "$(ls "$tmp/a")"

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

# TensorBoard: the event file beside log.jsonl, read by the tensorboard
# package itself (CRCs checked), holds log.jsonl's numbers as float32 under
# log.jsonl's names, at the same steps; the interrupted and resumed run's
# once per step, as its log.jsonl
PY=${PYTHON:-third_party/venv/bin/python}
tb_check() { # run directory, what it is
    if ! python_has "$PY" tensorboard; then echo "skip - $2: TensorBoard event file: no tensorboard package in $PY (make setup)"; return; fi
    local res
    res=$("$PY" - "$1" <<'PY' 2>&1
import json, os, struct, sys, warnings
warnings.filterwarnings("ignore")
from tensorboard.backend.event_processing import event_accumulator as ea
run = sys.argv[1]
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
want = {}
for line in open(os.path.join(run, "log.jsonl")):
    j = json.loads(line)
    for k, v in j.items():
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
            want.setdefault(k, []).append((j["step"], f32(v)))
acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0})
acc.Reload()
got = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
files = [f for f in os.listdir(run) if "tfevents" in f]
if got != want:
    bad = sorted(set(got) ^ set(want)) or [t for t in want if got.get(t) != want[t]][:2]
    print("differ at %s: %s vs %s" % (bad, [got.get(t, [])[:3] for t in bad], [want.get(t, [])[:3] for t in bad]))
else:
    print("ok %d tags x %d steps in %s" % (len(got), len(got["loss"]), files))
PY
)
    case "$res" in ok*) ok "$2: TensorBoard reads log.jsonl's scalars from the event file (${res#ok })";;
        *) fail "$2: TensorBoard event file" "$res";; esac
}
tb_check "$tmp/a" "run a"
tb_check "$tmp/b" "run b (stopped by SIGTERM, resumed)"

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
   grep -q '"mask_evict": 1' "$tmp/ev1/train_config.json" && grep -q '"mask_restride": 10' "$tmp/ev1/train_config.json" &&
   ! diff <(losses "$tmp/ev0") <(losses "$tmp/ev1") >/dev/null; then
    ok "mask_evict=1 mask_restride=10 trains 12 steps, finite losses that differ from mask_evict=0 ($(losses "$tmp/ev1" | tail -1) vs $(losses "$tmp/ev0" | tail -1))"
else fail "mask_evict=1 mask_restride=10 run" "$(losses "$tmp/ev1" | tr '\n' ' ') | $(tail -2 "$tmp/ev1.log")"; fi

# shipped configs parse (every key known); they only fail later, on the data path given here
for f in launch/configs/cpt-*.json launch/configs/cpu-*.json; do
    expect_err "shipped config $(basename "$f") parses" "$tmp/nowhere/manifest.json" --config "$f" --set model=tiny --set init=random --set data="$tmp/nowhere" --set out="$tmp/c"
done

# --resume on another schedule (here: more steps) is refused showing both,
# unless asked for; the refused run leaves the run as it was
sc=(--config "$tmp/cfg.json" --set out="$tmp/sc" --set eval_interval=0 --set ckpt_interval=10)
$K train "${sc[@]}" --set steps=20 >/dev/null 2>&1 && rm -r "$tmp/sc/ckpt/step_00000020" || fail "a 20-step run for the schedule cases" "did not run"
sum_sc=$(md5sum < "$tmp/sc/log.jsonl")
if out=$($K train "${sc[@]}" --set steps=40 --resume 2>&1); then
    fail "--resume with more steps refused" "accepted"
elif grep -q "checkpoint: steps=20 lr=0.003 warmup_steps=10 schedule=linear min_lr_frac=0" <<<"$out" &&
     grep -q "this run:   steps=40 lr=0.003 warmup_steps=10 schedule=linear min_lr_frac=0" <<<"$out" &&
     grep -q "(resuming at step 11; step 12 would run at lr 0.0029 instead of 0.0027)" <<<"$out" && grep -q -- "--allow-schedule-change" <<<"$out" &&
     [ "$(md5sum < "$tmp/sc/log.jsonl")" = "$sum_sc" ]; then
    ok "--resume with steps 20 -> 40 refused, printing both schedules and --allow-schedule-change; the run left as it was"
else fail "--resume with more steps refused" "$out"; fi
expect_err "--resume with another lr refused" "this run:   steps=20 lr=0.001 warmup_steps=10" "${sc[@]}" --set steps=20 --set lr=1e-3 --resume
expect_err "--resume with another warm-up refused" "this run:   steps=20 lr=0.003 warmup_steps=5" "${sc[@]}" --set steps=20 --set warmup_steps=5 --resume
expect_err "--allow-schedule-change without --resume refused" "applies to --resume only" "${sc[@]}" --allow-schedule-change
if $K train "${sc[@]}" --set steps=40 --resume --allow-schedule-change >"$tmp/sc.log" 2>&1 &&
   grep -q "allow-schedule-change: from step 11 on the new schedule" "$tmp/sc.log" && [ "$(grep -c . "$tmp/sc/log.jsonl")" = 40 ]; then
    ok "--resume --allow-schedule-change goes on from step 11 to 40 under the new schedule, saying so"
else fail "--allow-schedule-change" "$(grep -v '^step' "$tmp/sc.log" | tail -3)"; fi
# its log.jsonl had steps 11..20 past the checkpoint it resumed from: the
# event file is cut back with it, so every step is there once
tb_check "$tmp/sc" "a run resumed at step 10 of a 20-step log"

# a shipped config's warm-up (20 steps) longer than a short trial: cut to
# the run with a note; the small CPT config (warm-up 2, no dev evaluation on
# data without a dev split) takes --set steps=6 as it is
$K prepare --synthetic recall --vocab 64 --doc-tokens 289 --query-tail 33 --docs 40 --out "$tmp/d289" >/dev/null
$K prepare --synthetic recall --vocab 64 --doc-tokens 289 --query-tail 33 --docs 20 --split none --out "$tmp/d289n" >/dev/null
small=(--set model=tiny --set init=random --set steps=6)
if $K train --config launch/configs/cpu-small-cpt.json "${small[@]}" --set data="$tmp/d289" --set out="$tmp/ws" >"$tmp/ws.log" 2>&1 &&
   grep -q "note: warmup_steps=20 is longer than the run's 6 steps; warming up over all 6" "$tmp/ws.log" &&
   grep -q '"warmup_steps": 6' "$tmp/ws/train_config.json"; then
    ok "cpu-small-cpt.json (warm-up 20) with --set steps=6 trains, the warm-up cut to 6 with a note"
else fail "cpu-small-cpt.json --set steps=6" "$(grep -v '^step' "$tmp/ws.log" | tail -3)"; fi
if $K train --config launch/configs/cpt-tiny.json "${small[@]}" --set data="$tmp/d289n" --set out="$tmp/ct" >"$tmp/ct.log" 2>&1 &&
   ! grep -q "warming up over" "$tmp/ct.log" && grep -q "it has no dev split; no dev evaluation" "$tmp/ct.log" &&
   [ "$(grep -c . "$tmp/ct/log.jsonl")" = 6 ] && ! grep -q dev_loss "$tmp/ct/log.jsonl"; then
    ok "cpt-tiny.json with --set steps=6 on data without a dev split: 6 steps, its own warm-up, no dev evaluation"
else fail "cpt-tiny.json --set steps=6" "$(grep -v '^step' "$tmp/ct.log" | tail -3)"; fi

# 3b. the run directory: an earlier run is never silently replaced, pruning never leaves ckpt/
sum_a=$(cat "$tmp/a/log.jsonl" "$tmp/a/model/model.safetensors" | md5sum)
expect_err "a fresh run into a used run directory is refused" "holds an earlier run" --config "$tmp/cfg.json" --set out="$tmp/a" --set steps=2
expect_err "--overwrite with a run that fails set-up leaves the earlier run" "$tmp/nodata" --config "$tmp/cfg.json" --set out="$tmp/a" --set steps=2 --set data="$tmp/nodata" --overwrite
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
