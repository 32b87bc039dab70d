#!/usr/bin/env bash
# The paired runs after the attention's products became untiled sgemms
# (blas_sgemm_serial): the same command as ../run.sh, the masked and causal
# 2-thread configurations alternating, then the 1-thread ones while time
# allowed. One JSON line per run in results.jsonl: each run's kvcpt step
# against its own PyTorch peer run right after it, the 1-minute load
# average before and after, and perf stat's task-clock and cycles of the
# whole run (both sides, set-up included) in perf-<n>.csv.
cd "$(dirname "$0")/../../../.."
export OMP_WAIT_POLICY=passive
dir=docs/cpu-runs/2026-11-26-smollm2/after-serial-attention
out=${OUT:-$dir/results.jsonl}
n=0
run() { # label threads args...
    local label=$1 th=$2; shift 2
    n=$((n + 1))
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    local r; r=$(OMP_NUM_THREADS=$th nice -n 10 perf stat -e task-clock,cycles -x, -o "$dir/perf-$n.csv" \
        ./kvcpt bench model --device cpu --json \
        --preset third_party/models/smollm2-135m --seq 2098 --steps 1 --warmup 1 "$@" 2>/dev/null)
    echo "{\"n\":$n,\"label\":\"$label\",\"threads\":$th,\"commit\":\"$(git rev-parse --short HEAD)\",\"load_before\":$load,\"load_after\":$(cut -d' ' -f1 /proc/loadavg),\"r\":$r}" >>"$out"
}
for round in 1 2 3; do
    run mask 2 --L 2048 --K 256
    run causal 2
done
run mask 1 --L 2048 --K 256
run causal 1
