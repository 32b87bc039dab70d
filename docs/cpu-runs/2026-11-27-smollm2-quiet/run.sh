#!/usr/bin/env bash
# Paired runs on a quiet VM (nothing else running): kvcpt's SmolLM2 step
# against its PyTorch peer in the same `bench model` run, the four
# configurations interleaved round by round (masked and causal, 2 and 1
# threads), at nice 0. One JSON line per run in results.jsonl with the
# 1-minute load average before and after and perf stat's task-clock of the
# whole run in perf-<n>.csv. A new run starts only before $DEADLINE (epoch
# seconds; default: none) and while the file STOP is absent. The "start"
# field is written after the run: it is the time the run ended.
cd "$(dirname "$0")/../../.."
export OMP_WAIT_POLICY=passive
dir=docs/cpu-runs/2026-11-27-smollm2-quiet
out=${OUT:-$dir/results.jsonl}
deadline=${DEADLINE:-0}
n=$(wc -l <"$out" 2>/dev/null || echo 0)
run() { # label threads args...
    if [ -e "$dir/STOP" ] || { [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ]; }; then exit 0; fi
    local label=$1 th=$2; shift 2
    n=$((n + 1))
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    local r; r=$(OMP_NUM_THREADS=$th perf stat -e task-clock -x, -o "$dir/perf-$n.csv" \
        ./kvcpt bench model --device cpu --json \
        --preset third_party/models/smollm2-135m --seq 2098 --steps 1 --warmup 1 "$@" 2>/dev/null)
    echo "{\"n\":$n,\"label\":\"$label\",\"threads\":$th,\"commit\":\"$(git rev-parse --short HEAD)\",\"start\":\"$(date -u +%H:%M:%S)\",\"load_before\":$load,\"load_after\":$(cut -d' ' -f1 /proc/loadavg),\"r\":$r}" >>"$out"
}
for round in 1 2 3 4 5; do
    run mask 2 --L 2048 --K 256
    run causal 2
    run mask 1 --L 2048 --K 256
    run causal 1
done
