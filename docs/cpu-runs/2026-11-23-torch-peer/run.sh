#!/usr/bin/env bash
# The runs behind docs/benchmarks.md's "CPU: kvcpt against PyTorch" (2026-11-23,
# the 2-core development VM, shared with other work). Rounds 1-3 ran as below;
# rounds 4-5 repeated only the three 2-thread rows (no eager row, no 1-thread
# rows). One JSON line per run in results.jsonl, with the 1-minute load average
# before and after it. Needs the demo model with vocab 1024 in /tmp:
#   sed 's/"vocab_size": *[0-9]*/"vocab_size": 1024/' launch/configs/demo-model.json > /tmp/demo-model.json
cd "$(dirname "$0")/../../.."
export OMP_WAIT_POLICY=passive
out=${OUT:-/tmp/results.jsonl}
run() { # label threads args...
    local label=$1 th=$2; shift 2
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    local r; r=$(OMP_NUM_THREADS=$th ./kvcpt bench model --device cpu --json "$@" 2>/dev/null)
    echo "{\"label\":\"$label\",\"load_before\":$load,\"load_after\":$(cut -d' ' -f1 /proc/loadavg),\"r\":$r}" >>"$out"
}
for round in 1 2 3; do
    for th in 2 1; do
        run demo-causal $th --preset /tmp/demo-model.json --batch 8 --seq 1056 --steps 5 --warmup 1
        run demo-mask $th --preset /tmp/demo-model.json --batch 8 --seq 1056 --L 1024 --K 128 --steps 5 --warmup 1
        run 30m-causal $th --preset launch/configs/bench-30m-model.json --batch 1 --seq 1024 --steps 2 --warmup 1
    done
    run demo-causal-eager 2 --preset /tmp/demo-model.json --batch 8 --seq 1056 --steps 5 --warmup 1 --torch-attn eager
done
