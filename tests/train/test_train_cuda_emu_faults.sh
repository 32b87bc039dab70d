#!/usr/bin/env bash
# Multi-rank training on emulated GPUs (`mpirun -np N build/emu/kvcpt train
# --set device=cuda`, KVCPT_EMU_DEVICES=N: one emulated device per rank)
# when something goes wrong, checked from the command line only:
# - SIGTERM to every rank (as Slurm does: --signal=TERM, scancel, the time
#   limit), 2 and 3 ranks: every rank writes its part of the checkpoint, the
#   manifest lists them all, every rank exits 143 (mpirun passes it on), and
#   --resume ends with the uninterrupted one-rank run's log and final model,
#   bit for bit. Not SIGTERM to mpirun: Open MPI 4.1's mpirun answers it with
#   SIGCONT, odls_base_sigkill_timeout (1 s) later SIGTERM, and as long again
#   later SIGKILL, so the ranks get 1 s for the step and the checkpoint, and
#   an emulated step is longer (docs/sharding.md);
# - re-sharding: a 4-rank checkpoint resumed on 2 ranks/2 devices and on 3
#   ranks/3 devices gives the uninterrupted one-rank run's log and model;
# - a rank stopped (SIGSTOP) or killed (SIGKILL) in the middle of training:
#   the job ends by itself (comm_timeout 10 s; the emulated NCCL's own limit
#   is set far above it), with a message naming the stopped rank or the
#   collective it left waiting, and leaves no rank running; this script's
#   own limit (120 s) expiring is a failure.
# Tiny shapes: global_batch 12 = 12 micro-batches of 1, divisible by 1-4 ranks.
. "$(dirname "$0")/../lib.sh" || exit 1
E=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
if [ ! -x "$E" ]; then echo "skip - training faults on emulated devices: $E is missing (make test builds it)"; exit 0; fi
if ! command -v mpirun >/dev/null 2>&1 || ! $E --version | grep -q "collectives: single, mpi"; then
    echo "skip - training faults on emulated devices: mpirun or an MPI-enabled build is missing"; exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the emulated NCCL's own wait limit, far above comm_timeout: what ends a
# stalled job must be kvcpt's watchdogs, not the emulator
export KVCPT_EMU_NCCL_TIMEOUT=100
. "$(dirname "$0")/../../scripts/rank_compare.sh"

$E prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 120 --out "$tmp/data" >/dev/null
cat > "$tmp/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$tmp/data", "L": 16, "S": 4, "K": 2, "mask": 1,
 "global_batch": 12, "micro_batch": 1, "steps": 4, "warmup_steps": 1, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 0, "eval_batches": 2, "ckpt_interval": 2, "keep_last": 3, "device": "cuda"}
JSON
train() { # ranks, out dir, extra args...: one emulated device per rank
    local n=$1 out=$2; shift 2
    KVCPT_EMU_DEVICES=$n mpirun --oversubscribe -np "$n" "$E" train --config "$tmp/cfg.json" --set out="$out" "$@" >>"$out.log" 2>&1
}
strip() { rank_log_strip "$1"; }
same_as_one() { # dir: its log and final model equal the uninterrupted one-rank run's, bit for bit
    [ -s "$1/log.jsonl" ] && diff <(strip "$tmp/one") <(strip "$1") >/dev/null &&
        cmp -s "$tmp/one/model/model.safetensors" "$1/model/model.safetensors"
}
why_not_one() { echo "$(diff <(strip "$tmp/one") <(strip "$1") 2>&1 | head -3 | cut -c1-200) $(tail -2 "$1.log")"; }
# checkpoint dir, ranks: "ok" when the manifest says that many ranks and
# lists each rank's file once, present with the bytes it says; else why not
manifest_check() {
    python3 - "$1" "$2" <<'PY'
import json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
try:
    m = json.load(open(os.path.join(d, "manifest.json")))
except Exception as e:
    print("no readable manifest: %s" % e); sys.exit()
ranks = sorted(f["rank"] for f in m["files"])
if m["world_size"] != n or ranks != list(range(n)):
    print("manifest world_size %s, ranks %s (want %d ranks)" % (m["world_size"], ranks, n)); sys.exit()
for f in m["files"]:
    p = os.path.join(d, f["name"])
    if not os.path.isfile(p) or os.path.getsize(p) != f["bytes"]:
        print("rank %d's %s is missing or not %d bytes" % (f["rank"], f["name"], f["bytes"])); sys.exit()
print("ok")
PY
}
newest_ckpt() { find "$1/ckpt" -maxdepth 1 -name 'step_*' 2>/dev/null | sort | tail -1; }
lines() { (wc -l <"$1/log.jsonl") 2>/dev/null || echo 0; }
wait_lines() { # dir, n: until its log has n records (at most 120 s)
    for _ in $(seq 1 12000); do [ "$(lines "$1")" -ge "$2" ] && return 0; sleep 0.01; done
    return 1
}
# pid, limit in seconds: waits for the job; sets rc to its exit status, or
# kills it (and the pids that follow) once the limit passes and sets
# over_limit=1. Polls, so no guard process outlives the job.
wait_bounded() {
    local pid=$1 limit=$2; shift 2
    over_limit=0
    for _ in $(seq 1 $((limit * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then over_limit=1; kill -KILL "$pid" "$@" 2>/dev/null; fi
    wait "$pid"; rc=$?
}
# mpirun's pid, rank -> that rank's pid (mpirun starts the ranks as its children)
rank_pid() {
    local p
    for p in $(pgrep -P "$1"); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$p"; return; fi
    done
}

# the reference: one rank, uninterrupted
if KVCPT_EMU_DEVICES=1 "$E" train --config "$tmp/cfg.json" --set out="$tmp/one" >"$tmp/one.log" 2>&1 &&
   [ "$(lines "$tmp/one")" = 4 ] && [ -s "$tmp/one/model/model.safetensors" ]; then
    ok "reference: one rank on one emulated device, 4 steps"
else fail "one-rank reference run" "$(tail -3 "$tmp/one.log")"; fi

# --- SIGTERM to every rank once step 1 is logged
sigterm() { # ranks
    local n=$1 out=$tmp/term-$1 p pids=()
    KVCPT_EMU_DEVICES=$n mpirun --oversubscribe -np "$n" "$E" train --config "$tmp/cfg.json" --set out="$out" \
        --set ckpt_interval=0 >"$out.log" 2>&1 &
    local mp=$!
    wait_lines "$out" 1
    for r in $(seq 0 $((n - 1))); do p=$(rank_pid "$mp" "$r"); [ -n "$p" ] && pids+=("$p"); done
    [ ${#pids[@]} = "$n" ] && kill -TERM "${pids[@]}"
    wait_bounded "$mp" 120 "${pids[@]}"
    local ck at man
    ck=$(newest_ckpt "$out"); at=$(sed -nE 's/.*checkpoint written at step ([0-9]+).*/\1/p' "$out.log")
    man=$(manifest_check "${ck:-$out/none}" "$n")
    if [ ${#pids[@]} = "$n" ] && [ "$rc" = 143 ] && [ "$over_limit" = 0 ] && [ -n "$at" ] && [ "$at" -lt 4 ] &&
       [ "$ck" = "$out/ckpt/$(printf 'step_%08d' "$at")" ] && [ "$man" = ok ]; then
        ok "SIGTERM to each of $n ranks ($n devices): exit $rc, checkpoint at step $at of 4, its manifest listing all $n rank files, each present"
    else fail "SIGTERM to $n ranks" "${#pids[@]} rank pids found, exit $rc$( [ "$over_limit" = 1 ] && echo ", still running after 120 s"), checkpoint '${ck:-none}' at step '${at:-?}': $man; $(grep -m2 'error\|SIGTERM' "$out.log")"; fi
    train "$n" "$out" --resume
    if grep -q "resumed from .*step_0*$at (step $at, written by $n ranks, now $n)" "$out.log" && same_as_one "$out"; then
        ok "SIGTERM to $n ranks: --resume from step $at ends with the one-rank run's log and final model, bit for bit"
    else fail "resume after SIGTERM to $n ranks" "$(why_not_one "$out")"; fi
}
sigterm 2
sigterm 3

# --- re-sharding: 4 ranks checkpoint at step 2 (ckpt_interval), resumed on 2 and 3
train 4 "$tmp/r4"
if same_as_one "$tmp/r4" && [ "$(manifest_check "$tmp/r4/ckpt/step_00000002" 4)" = ok ]; then
    ok "4 ranks on 4 devices: the one-rank run's log and model; step-2 checkpoint with all 4 rank files"
else fail "4 ranks on 4 devices" "$(why_not_one "$tmp/r4"); $(manifest_check "$tmp/r4/ckpt/step_00000002" 4)"; fi
for m in 2 3; do
    d="$tmp/reshard-$m"
    mkdir -p "$d/ckpt" && cp -r "$tmp/r4/ckpt/step_00000002" "$d/ckpt/" && head -2 "$tmp/r4/log.jsonl" >"$d/log.jsonl"
    train $m "$d" --resume
    if grep -q "resumed from .*step_00000002 (step 2, written by 4 ranks, now $m)" "$d.log" && same_as_one "$d"; then
        ok "4-rank checkpoint resumed on $m ranks/$m devices: the one-rank run's log and final model, bit for bit"
    else fail "resume 4 -> $m ranks" "$(why_not_one "$d")"; fi
done

# --- a rank that stops (SIGSTOP) or dies (SIGKILL) mid-run, comm_timeout 10 s
fault() { # signal, victim rank
    local sig=$1 victim=$2 out=$tmp/fault-$1 p
    KVCPT_EMU_DEVICES=2 mpirun --oversubscribe -np 2 "$E" train --config "$tmp/cfg.json" --set out="$out" \
        --set steps=100000 --set ckpt_interval=0 --set comm_timeout=10 >"$out.log" 2>&1 &
    local mp=$! pids=()
    wait_lines "$out" 1
    for p in $(pgrep -P "$mp"); do pids+=("$p"); done
    p=$(rank_pid "$mp" "$victim")
    local t0 t1
    t0=$(date +%s.%N)
    [ -n "$p" ] && kill -"$sig" "$p"
    wait_bounded "$mp" 120 "${pids[@]}"
    t1=$(date +%s.%N)
    local took; took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    # the watchdogs' guards on MPI_Abort and ncclCommAbort are 10 and 30 s
    local left waited
    ranks_left 40 "${pids[@]}"
    # the message: the MPI watchdog names the silent rank; the NCCL watchdog
    # names the operation left waiting; mpirun names a rank that died
    local msg
    msg=$(grep -m1 -E "silent for over [0-9.]+ s \(stopped, hung, or slower than comm_timeout\): rank $victim \(last heard|NCCL .* has not finished [0-9.]+ s after it was enqueued|process rank $victim with PID [0-9]+ on node .* exited on signal 9" "$out.log")
    if [ -n "$p" ] && [ "$over_limit" = 0 ] && [ "$rc" != 0 ] && [ "$left" = 0 ] && [ -n "$msg" ]; then
        ok "rank $victim of 2 $( [ "$sig" = STOP ] && echo "stopped (SIGSTOP)" || echo "killed (SIGKILL)") after step $(lines "$out"): the job ended by itself in $took s (exit $rc, comm_timeout 10 s), no rank left ${waited} s after mpirun: $(cut -c1-220 <<<"$msg")"
    else
        fail "rank $victim of 2 sent SIG$sig" "pid '${p:-not found}', exit $rc after $took s$( [ "$over_limit" = 1 ] && echo ", still running when this test's 120 s limit ended it"), $left ranks left 40 s after mpirun; $(grep -m3 'error\|emu nccl\|exited' "$out.log" | cut -c1-200 | tr '\n' ' ')"
        for q in "${pids[@]}"; do kill -KILL "$q" 2>/dev/null; done
    fi
}
fault STOP 1
fault KILL 1
