#!/usr/bin/env bash
# The runs behind docs/benchmarks.md's "SmolLM2-135M at T = 2098" table of
# 2026-11-26 (after the head's gradient moved into the forward and the
# vectorised exp): the 2-core development VM, shared with other work. Round 1
# runs the four configurations; rounds 2 and 3 only the two 2-thread ones
# (the issue's targets), to fit the session. One JSON line per run in
# results.jsonl, each run's kvcpt step against its own PyTorch peer run
# right after it, with the 1-minute load average before and after.
cd "$(dirname "$0")/../../.."
export OMP_WAIT_POLICY=passive
out=${OUT:-/tmp/results.jsonl}
run() { # label threads args...
    local label=$1 th=$2; shift 2
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    local r; r=$(OMP_NUM_THREADS=$th nice -n 10 ./kvcpt bench model --device cpu --json \
        --preset third_party/models/smollm2-135m --seq 2098 --steps 1 --warmup 1 "$@" 2>/dev/null)
    echo "{\"label\":\"$label\",\"commit\":\"$(git rev-parse --short HEAD)\",\"load_before\":$load,\"load_after\":$(cut -d' ' -f1 /proc/loadavg),\"r\":$r}" >>"$out"
}
for round in 1 2 3; do
    run causal 2
    run mask 2 --L 2048 --K 256
    if [ "$round" = 1 ]; then
        run causal 1
        run mask 1 --L 2048 --K 256
    fi
done
