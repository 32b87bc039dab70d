#!/usr/bin/env bash
# `kvcpt train` on the CUDA engine, run by build/emu/kvcpt: the
# whole program built against the CPU stand-in for the CUDA runtime
# (tests/cuda_emu), so the trainer's GPU path is exercised on every CI run.
# The same tiny RefreshKV run on the CPU and on the (emulated) GPU gives the
# same loss curve within fp32 rounding; recompute (full or attn) changes no bit; two ranks
# under mpirun give the one-rank curve bit for bit; precision=bf16 stays
# within bf16 tolerance of the CPU curve; a checkpoint written by
# the GPU run resumes on the CPU and the other way round. The optimizer on
# the device (optim_device=1) gives the CPU's curve; precision=bf16sr (bf16
# matrices only, stochastic rounding) stays within bf16 tolerance of it and
# resumes from its checkpoint bit for bit; impossible settings are refused.
# The eval cache's mask (mask_evict=1, mask_restride) gives the CPU's curve
# for that mask, which differs from the paper mask's. A GPU too small for
# the plan is refused at start; one of the plan's size runs.
set -u
cd "$(dirname "$0")/../.."
K=${KVCPT_BIN:-./kvcpt}
# KVCPT_EMU_KVCPT picks another build of it (build/emu-asan/kvcpt: make sanitize-emu)
E=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
if [ ! -x "$E" ]; then fail "emulated kvcpt" "$E is missing (make test builds it)"; exit 1; fi

$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 120 --out "$tmp/data" >/dev/null
cat > "$tmp/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 4, "micro_batch": 2, "steps": 6, "warmup_steps": 2, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 3, "eval_batches": 2, "ckpt_interval": 3, "keep_last": 3}
JSON
losses() { grep -o '"loss":[^,]*' "$1/log.jsonl" | cut -d: -f2; }
devs() { grep -o '"dev_loss":[^,}]*' "$1/log.jsonl" | cut -d: -f2; }

$K train --config "$tmp/cfg.json" --set out="$tmp/cpu" --set device=cpu >"$tmp/cpu.log" 2>&1 || fail "cpu run" "$(tail -2 "$tmp/cpu.log")"
# the CPU's 3-step curve (the schedule spans the run, so not the 6-step run's
# first half): the reference of the 3-step engine variants below
$K train --config "$tmp/cfg.json" --set out="$tmp/cpu3" --set device=cpu --set steps=3 >"$tmp/cpu3.log" 2>&1 ||
    fail "cpu run, 3 steps" "$(tail -2 "$tmp/cpu3.log")"
if $E train --config "$tmp/cfg.json" --set out="$tmp/gpu" --set device=cuda >"$tmp/gpu.log" 2>&1 &&
   grep -q "device cuda" "$tmp/gpu.log" && grep -q '"gpu_engine_mb"' "$tmp/gpu/log.jsonl" && [ -f "$tmp/gpu/model/model.safetensors" ]; then
    ok "device=cuda runs end to end on the CUDA engine (log, checkpoints, final model)"
else fail "device=cuda run" "$(tail -3 "$tmp/gpu.log")"; fi

# fp32 on both sides: only the order of additions differs
cmp_curves() { # name, a, b, rel[, least values: 8, the 6 losses and 2 dev losses of the 6-step runs]
    if paste <(losses "$2"; devs "$2") <(losses "$3"; devs "$3") | awk -v r="$4" -v least="${5:-8}" '
        { n++; d = $1 - $2; if (d < 0) d = -d; if (d > r * ($2 < 0 ? -$2 : $2) || $1 == "" || $2 == "") bad++;
          if (d > w) w = d } END { printf "# %s: %d values, worst |d| %.3g\n", "'"$1"'", n, w; exit (n >= least && !bad) ? 0 : 1 }'; then
        ok "$1"
    else fail "$1" "curves differ beyond $4 relative"; fi
}
cmp_curves "GPU loss curve (6 steps, dev included) within 1e-5 of the CPU's" "$tmp/gpu" "$tmp/cpu" 1e-5

# device memory: the start-up check weighs the plan (`kvcpt plan --config`,
# the same arithmetic) against the emulated GPU's free bytes
# (KVCPT_EMU_DEVICE_MEM): one byte short is refused before anything is
# allocated, with the figures and the settings that shrink them, exit
# status 1; exactly the plan's bytes run, and rank 0 says the prediction
# and the headroom. That run, 3 steps with the dev loss at step 3, is also
# the one-rank reference of the recompute and two-rank checks below: what
# they compare bit for bit shows in 3 steps (each step's update feeds the
# next step's loss, and the last one the final model)
# the plan of the binary that runs: the sanitizer build's engine carves red
# zones between its buffers, and its plan counts them
need=$($E plan --config "$tmp/cfg.json" --ranks 1 --engine cuda --json | grep -o '"total":[0-9]*' | cut -d: -f2)
if [ -n "$need" ] && [ "$need" -gt 0 ]; then
    KVCPT_EMU_DEVICE_MEM=$((need - 1)) $E train --config "$tmp/cfg.json" --set out="$tmp/oom" --set device=cuda \
        >"$tmp/oom.log" 2>&1 && rc=0 || rc=$?
    if [ "$rc" -eq 1 ] && grep -q "the CUDA engine needs $need bytes" "$tmp/oom.log" &&
       grep -q "but $((need - 1)) bytes" "$tmp/oom.log" && grep -q "recompute=attn or full, precision=bf16, a smaller micro_batch (now 2)" "$tmp/oom.log" &&
       ! grep -qiE "traceback|backtrace|abort|cudaErrorMemoryAllocation|Segmentation" "$tmp/oom.log" && [ ! -f "$tmp/oom/log.jsonl" ]; then
        ok "device=cuda on a GPU one byte smaller than the plan: refused at start, exit 1: $(grep -m1 'needs' "$tmp/oom.log" | cut -c1-160)..."
    else fail "refusal on a small GPU" "exit status $rc: $(tail -3 "$tmp/oom.log")"; fi
    KVCPT_EMU_DEVICE_MEM=$need $E train --config "$tmp/cfg.json" --set out="$tmp/fit" --set device=cuda --set steps=3 \
        >"$tmp/fit.log" 2>&1 && rc=0 || rc=$?
    if [ "$rc" -eq 0 ] && grep -q "the plan predicts .* ($need bytes) per GPU, .* headroom 0.00 GiB" "$tmp/fit.log" &&
       [ -f "$tmp/fit/model/model.safetensors" ]; then
        ok "device=cuda on a GPU of exactly the plan's bytes runs (the check passes, and every allocation of the run fits the emulated device): $(grep -m1 'predicts' "$tmp/fit.log")"
    else fail "run on a GPU of the plan's size" "exit status $rc: $(tail -3 "$tmp/fit.log")"; fi
else fail "plan --config --engine cuda --json" "no total: $need"; fi

# recompute=1 is the older spelling of full; attn reruns only the MLP half
for r in "1 full" "attn attn"; do
    read -r value name <<<"$r"
    $E train --config "$tmp/cfg.json" --set out="$tmp/rec$name" --set device=cuda --set recompute=$value --set steps=3 \
        >"$tmp/rec$name.log" 2>&1
    if grep -q "recompute $name" "$tmp/rec$name.log" && grep -q "\"recompute\": \"$name\"" "$tmp/rec$name/train_config.json" &&
       [ "$(losses "$tmp/fit" | wc -l)" -eq 3 ] && [ "$(devs "$tmp/fit" | wc -l)" -ge 1 ] &&
       diff <(losses "$tmp/fit"; devs "$tmp/fit") <(losses "$tmp/rec$name"; devs "$tmp/rec$name") >/dev/null &&
       cmp -s "$tmp/fit/model/model.safetensors" "$tmp/rec$name/model/model.safetensors"; then
        ok "recompute=$value gives the same losses and final model, bit for bit"
    else fail "recompute=$value" "$(tail -2 "$tmp/rec$name.log")"; fi
done

# bf16 device matrices, fp32 master weights stepped on the host: the CPU's
# curve within 2^-8 relative (twice bf16's largest rounding of any weight)
$E train --config "$tmp/cfg.json" --set out="$tmp/bf" --set device=cuda --set precision=bf16 --set steps=3 >"$tmp/bf.log" 2>&1
if grep -q "(bf16 weights)" "$tmp/bf.log"; then
    cmp_curves "precision=bf16: loss curve (3 steps, dev included) within 3.9e-3 of the CPU's" "$tmp/bf" "$tmp/cpu3" 3.9e-3 4
else fail "precision=bf16" "$(tail -2 "$tmp/bf.log")"; fi

# the optimizer on the device: fp32 parameters and 8-bit states stepped
# there, gradients accumulated there; only the order of additions differs
$E train --config "$tmp/cfg.json" --set out="$tmp/od" --set device=cuda --set optim_device=1 --set steps=3 >"$tmp/od.log" 2>&1
if grep -q "(optimizer on the device)" "$tmp/od.log" && grep -q '"gpu_optim_mb"' "$tmp/od/log.jsonl"; then
    cmp_curves "optim_device=1: loss curve (3 steps, dev included) within 1e-5 of the CPU's" "$tmp/od" "$tmp/cpu3" 1e-5 4
else fail "optim_device=1" "$(tail -2 "$tmp/od.log")"; fi

# bf16sr: no fp32 master anywhere, stochastic rounding keyed by (seed, step,
# element), so a resumed run draws the same bits as an uninterrupted one
$E train --config "$tmp/cfg.json" --set out="$tmp/sr" --set device=cuda --set precision=bf16sr >"$tmp/sr.log" 2>&1
if grep -q "(bf16 weights, stochastic rounding)" "$tmp/sr.log" && grep -q "(optimizer on the device)" "$tmp/sr.log"; then
    cmp_curves "precision=bf16sr: loss curve (6 steps, dev included) within 3.9e-3 of the CPU's" "$tmp/sr" "$tmp/cpu" 3.9e-3
else fail "precision=bf16sr" "$(tail -2 "$tmp/sr.log")"; fi
mkdir -p "$tmp/srr/ckpt" && cp "$tmp/sr/log.jsonl" "$tmp/srr/" && cp -r "$tmp/sr/ckpt/step_00000003" "$tmp/srr/ckpt/"
$E train --config "$tmp/cfg.json" --set out="$tmp/srr" --set device=cuda --set precision=bf16sr --resume >"$tmp/srr2.log" 2>&1
if grep -q "resumed from" "$tmp/srr2.log" && diff <(losses "$tmp/sr"; devs "$tmp/sr") <(losses "$tmp/srr"; devs "$tmp/srr") >/dev/null &&
   cmp -s "$tmp/sr/model/model.safetensors" "$tmp/srr/model/model.safetensors"; then
    ok "precision=bf16sr: resumed from its step-3 checkpoint gives the uninterrupted run's losses and final model, bit for bit"
else fail "bf16sr resume" "$(tail -2 "$tmp/srr2.log")"; fi
if ! $E train --config "$tmp/cfg.json" --set out="$tmp/bad" --set device=cuda --set precision=bf16 --set optim_device=1 \
       >"$tmp/bad.log" 2>&1 && grep -q "use precision=bf16sr" "$tmp/bad.log"; then
    ok "precision=bf16 with optim_device=1 (updates lost to rounding) is refused with the fix named"
else fail "bf16 + optim_device refusal" "$(tail -2 "$tmp/bad.log")"; fi

# the eval cache's mask: with mask_evict the K = 6 budget evicts kept keys
# as rows past L add local ones, and restride 4 makes rows 51 and 55 full
# rows that re-select (a stride of 10 would fall past T = 56); the
# selection holds the per-row records, more than B * T * Hkv entries
ev="--set mask_evict=1 --set mask_restride=4 --set steps=3"
$K train --config "$tmp/cfg.json" --set out="$tmp/evc" --set device=cpu $ev >"$tmp/evc.log" 2>&1 || fail "cpu run, mask_evict=1 mask_restride=4" "$(tail -2 "$tmp/evc.log")"
if $E train --config "$tmp/cfg.json" --set out="$tmp/evg" --set device=cuda $ev >"$tmp/evg.log" 2>&1 &&
   grep -q "device cuda" "$tmp/evg.log" && grep -q '"mask_evict": 1' "$tmp/evg/train_config.json" &&
   grep -q '"mask_restride": 4' "$tmp/evg/train_config.json"; then
    cmp_curves "mask_evict=1 mask_restride=4: GPU loss curve (3 steps, dev included) within 1e-5 of the CPU's" "$tmp/evg" "$tmp/evc" 1e-5 4
else fail "device=cuda mask_evict=1 mask_restride=4" "$(tail -2 "$tmp/evg.log")"; fi
# the mask must change the losses by more than the tolerance above (the
# paper mask's 3-step run: the exact-fit one)
if paste <(losses "$tmp/evg") <(losses "$tmp/fit") | awk '
       { n++; d = $1 - $2; if (d < 0) d = -d; if ($1 != "" && $2 != "" && d > 1e-5 * ($2 < 0 ? -$2 : $2)) far++ }
       END { exit (n >= 3 && far > 0) ? 0 : 1 }'; then
    ok "mask_evict=1 mask_restride=4 on the GPU: losses differ from the paper mask's ($(losses "$tmp/evg" | tail -1) vs $(losses "$tmp/fit" | tail -1))"
else fail "mask_evict=1 mask_restride=4 vs the paper mask" "the same losses: $(losses "$tmp/evg" | tr '\n' ' ')"; fi

# resume across devices: the checkpoint is device-independent (the GPU
# run's step-3 checkpoint, as the bf16sr resume above takes its own)
mkdir -p "$tmp/x/ckpt" && cp "$tmp/gpu/log.jsonl" "$tmp/x/" && cp -r "$tmp/gpu/ckpt/step_00000003" "$tmp/x/ckpt/"
if $K train --config "$tmp/cfg.json" --set out="$tmp/x" --set device=cpu --resume >"$tmp/x2.log" 2>&1 &&
   grep -q "resumed from" "$tmp/x2.log" && [ "$(losses "$tmp/x" | wc -l)" -eq 6 ]; then
    ok "a GPU run's checkpoint resumes on the CPU"
else fail "GPU -> CPU resume" "$(tail -2 "$tmp/x2.log")"; fi

if command -v mpirun >/dev/null 2>&1 && $E --version | grep -q "collectives: single, mpi"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export KVCPT_EMU_DEVICES=2 # one GPU per rank (tests/train/test_train_cuda_emu_ranks.sh checks the placement)
    mpirun --oversubscribe -np 2 "$E" train --config "$tmp/cfg.json" --set out="$tmp/two" --set device=cuda --set steps=3 \
        >"$tmp/two.log" 2>&1
    . scripts/rank_compare.sh
    if [ -s "$tmp/fit/log.jsonl" ] && diff <(rank_log_strip "$tmp/fit") <(rank_log_strip "$tmp/two") >/dev/null &&
       cmp -s "$tmp/fit/model/model.safetensors" "$tmp/two/model/model.safetensors"; then
        ok "two ranks on the CUDA engine equal one rank, bit for bit"
    else fail "two ranks on the CUDA engine" "$(tail -3 "$tmp/two.log")"; fi
    if ! mpirun --oversubscribe -np 2 "$E" train --config "$tmp/cfg.json" --set out="$tmp/two_sr" --set device=cuda \
           --set precision=bf16sr >"$tmp/two_sr.log" 2>&1 && grep -q "for one rank only" "$tmp/two_sr.log"; then
        ok "precision=bf16sr under two ranks is refused (the device optimizer is for one rank)"
    else fail "bf16sr two-rank refusal" "$(tail -3 "$tmp/two_sr.log")"; fi
else
    echo "skip - two ranks on the CUDA engine: mpirun or an MPI-enabled build is missing"
fi

# `kvcpt bench model --device cuda` runs the engine and reports the same loss
# as the CPU bench (the figures themselves mean nothing under the emulator)
jl() { grep -o "\"$1\":[^,}]*" | cut -d: -f2 | tr -d '"'; }
gpu_b=$($E bench model --preset tiny --seq 56 --L 48 --steps 1 --warmup 0 --device cuda --json 2>&1)
cpu_b=$($K bench model --preset tiny --seq 56 --L 48 --steps 1 --warmup 0 --device cpu --no-peers --json 2>&1)
if [ "$(jl device <<<"$gpu_b")" = cuda ] && awk -v a="$(jl loss <<<"$gpu_b")" -v b="$(jl loss <<<"$cpu_b")" \
       'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-4) }'; then
    ok "bench model --device cuda runs the engine (loss $(jl loss <<<"$gpu_b") vs cpu $(jl loss <<<"$cpu_b"))"
else fail "bench model --device cuda" "$gpu_b | $cpu_b"; fi
