#!/usr/bin/env bash
# One GPU per rank: `mpirun -np N build/emu/kvcpt train --set device=cuda`
# on the CUDA emulator playing N devices (KVCPT_EMU_DEVICES=N). Every rank
# names its device in one line, and N ranks take N different devices (by
# node-local rank, with distinct PCI bus ids); 2 and 3 ranks give the
# one-rank run's log and final model bit for bit (the sharded step's
# arithmetic does not depend on the rank count), and so do 4; more ranks than devices are
# refused with both numbers in the message, unless share_device=1, which
# puts ranks on devices round-robin and still gives the same numbers.
. "$(dirname "$0")/../lib.sh" || exit 1
E=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
if [ ! -x "$E" ]; then fail "emulated kvcpt" "$E is missing (make test builds it)"; exit 1; fi
if ! command -v mpirun >/dev/null 2>&1 || ! $E --version | grep -q "collectives: single, mpi"; then
    echo "skip - ranks on emulated devices: mpirun or an MPI-enabled build is missing"; exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

$E prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 120 --out "$tmp/data" >/dev/null
# global_batch 12 = 12 micro-batches of 1: divisible by 1, 2, 3 and 4 ranks;
# 2 steps: the first step's sharded update feeds the second step's loss, and
# the second's the final model, so each rank count's step shows in both
cat > "$tmp/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 12, "micro_batch": 1, "steps": 2, "warmup_steps": 1, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 0, "eval_batches": 2, "ckpt_interval": 0, "keep_last": 1}
JSON
. "$(dirname "$0")/../../scripts/rank_compare.sh"
strip() { rank_log_strip "$1"; }
same_run() { # name, dir: equal to the one-rank run, bit for bit
    if [ -s "$2/log.jsonl" ] && diff <(strip "$tmp/one") <(strip "$2") >/dev/null &&
       cmp -s "$tmp/one/model/model.safetensors" "$2/model/model.safetensors"; then
        ok "$1: log.jsonl ($(wc -l <"$2/log.jsonl") steps, dev loss included) and final model equal the one-rank run's, bit for bit"
    else fail "$1" "differs from the one-rank run: $(diff <(strip "$tmp/one") <(strip "$2") | head -4)"; fi
}
# "R D B" (rank, device, PCI bus), one per rank
placements() { rank_placements "$1"; }

if KVCPT_EMU_DEVICES=1 $E train --config "$tmp/cfg.json" --set out="$tmp/one" --set device=cuda >"$tmp/one.log" 2>&1 &&
   [ "$(placements "$tmp/one.log")" = "0 0 0000:18:00.0" ]; then
    ok "one rank: device 0 named with its PCI bus id ($(grep -m1 'CUDA device' "$tmp/one.log" | cut -c1-160))"
else fail "one-rank run" "$(tail -3 "$tmp/one.log")"; fi

for n in 2 3 4; do
    KVCPT_EMU_DEVICES=$n mpirun --oversubscribe -np $n "$E" train --config "$tmp/cfg.json" --set out="$tmp/r$n" \
        --set device=cuda >"$tmp/r$n.log" 2>&1
    p=$(placements "$tmp/r$n.log")
    ranks=$(cut -d' ' -f1 <<<"$p" | tr '\n' ' '); devs=$(cut -d' ' -f2 <<<"$p" | sort -u | wc -l)
    buses=$(cut -d' ' -f3 <<<"$p" | sort -u | wc -l); want=$(seq 0 $((n - 1)) | tr '\n' ' ')
    if [ "$ranks" = "$want" ] && [ "$devs" -eq "$n" ] && [ "$buses" -eq "$n" ]; then
        ok "$n ranks on $n emulated devices: each rank names its own device and PCI bus ($(tr '\n' ';' <<<"$p"))"
    else fail "$n ranks: one device each" "placements '$p'; $(tail -3 "$tmp/r$n.log")"; fi
    same_run "$n ranks on $n devices" "$tmp/r$n"
done

# the streamed engine's layer slots: five layers (so each slot is reused and
# backward gathers layers again), tied embeddings, bf16 weights and
# recompute; three ranks (every shard boundary moves) equal one
mkdir -p "$tmp/m5"
cat > "$tmp/m5/config.json" <<'J'
{"vocab_size":64,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":5,"num_attention_heads":4,
 "num_key_value_heads":2,"head_dim":8,"rms_norm_eps":1e-5,"rope_theta":10000.0,"max_position_embeddings":4096,
 "tie_word_embeddings":true,"bos_token_id":1,"eos_token_id":2}
J
# 6 micro-batches of 1 over 2 steps: divisible by 1, 2 and 3 ranks, and
# enough steps to reuse layer slots and re-gather in the backward
m5=(--set model="$tmp/m5/config.json" --set device=cuda --set precision=bf16 --set recompute=1 --set eval_batches=5
    --set global_batch=6 --set steps=2)
KVCPT_EMU_DEVICES=1 $E train --config "$tmp/cfg.json" --set out="$tmp/m5one" "${m5[@]}" >"$tmp/m5one.log" 2>&1
KVCPT_EMU_DEVICES=3 mpirun --oversubscribe -np 3 "$E" train --config "$tmp/cfg.json" --set out="$tmp/m5three" "${m5[@]}" \
    >"$tmp/m5three.log" 2>&1
if [ -s "$tmp/m5one/log.jsonl" ] && diff <(strip "$tmp/m5one") <(strip "$tmp/m5three") >/dev/null &&
   cmp -s "$tmp/m5one/model/model.safetensors" "$tmp/m5three/model/model.safetensors"; then
    ok "5 layers, tied, bf16, recompute, 5 dev samples: 3 ranks equal 1 rank bit for bit (layer slots reused, backward re-gathers)"
else fail "5-layer model on 3 ranks" "$(diff <(strip "$tmp/m5one") <(strip "$tmp/m5three") | head -3; tail -2 "$tmp/m5three.log")"; fi
# reshard_after_forward=0: a whole engine keeps every gathered unit for the
# step (no slots, each unit gathered once a step): the same bits
KVCPT_EMU_DEVICES=3 mpirun --oversubscribe -np 3 "$E" train --config "$tmp/cfg.json" --set out="$tmp/m5keep" "${m5[@]}" \
    --set reshard_after_forward=0 >"$tmp/m5keep.log" 2>&1
g() { grep -o '"gathers":[0-9]*' "$1/log.jsonl" | cut -d: -f2 | awk '{ n += $1 } END { print n + 0 }'; }
if [ -s "$tmp/m5keep/log.jsonl" ] && diff <(strip "$tmp/m5one") <(strip "$tmp/m5keep") >/dev/null &&
   cmp -s "$tmp/m5one/model/model.safetensors" "$tmp/m5keep/model/model.safetensors" && [ "$(g "$tmp/m5keep")" -lt "$(g "$tmp/m5three")" ]; then
    ok "reshard_after_forward=0 on 3 GPUs (whole engine, units kept for the step): the same bits, $(g "$tmp/m5keep") gathers instead of $(g "$tmp/m5three")"
else fail "reshard_after_forward=0" "$(diff <(strip "$tmp/m5one") <(strip "$tmp/m5keep") | head -3; tail -2 "$tmp/m5keep.log")"; fi

# and the streamed engine computes the CPU model's step: fp32, the same five
# layers, within fp32 rounding of the CPU run (a slot read while a
# prefetch fills it, or a gradient slot not zeroed, is far outside)
m5f=(--set model="$tmp/m5/config.json" --set eval_batches=5 --set global_batch=6 --set steps=2)
$E train --config "$tmp/cfg.json" --set out="$tmp/m5cpu" "${m5f[@]}" --set device=cpu >"$tmp/m5cpu.log" 2>&1
KVCPT_EMU_DEVICES=2 mpirun --oversubscribe -np 2 "$E" train --config "$tmp/cfg.json" --set out="$tmp/m5gpu" "${m5f[@]}" \
    --set device=cuda >"$tmp/m5gpu.log" 2>&1
vals() { grep -oE '"(loss|dev_loss)":[^,}]*' "$1/log.jsonl" | cut -d: -f2; }
if [ "$(vals "$tmp/m5cpu" | wc -l)" -eq 3 ] && paste <(vals "$tmp/m5cpu") <(vals "$tmp/m5gpu") |
       awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad++ } END { exit bad ? 1 : 0 }'; then
    ok "5 layers, fp32, 2 GPUs: losses and dev loss within 1e-5 of the CPU run's ($(vals "$tmp/m5gpu" | tr '\n' ' '))"
else fail "5 layers vs the CPU" "$(paste <(vals "$tmp/m5cpu") <(vals "$tmp/m5gpu") | tr '\n' ';'); $(tail -2 "$tmp/m5gpu.log")"; fi

# more ranks on the node than devices: refused, with the numbers
if ! KVCPT_EMU_DEVICES=1 mpirun --oversubscribe -np 2 "$E" train --config "$tmp/cfg.json" --set out="$tmp/over" \
       --set device=cuda >"$tmp/over.log" 2>&1 &&
   grep -q "2 ranks on this node but 1 visible CUDA device: one GPU per rank" "$tmp/over.log" && [ ! -s "$tmp/over/log.jsonl" ]; then
    ok "2 ranks on 1 device are refused: $(grep -m1 -o 'train: 2 ranks on this node[^(]*' "$tmp/over.log")"
else fail "2 ranks on 1 device" "not refused: $(tail -3 "$tmp/over.log")"; fi

# share_device=1: both ranks on device 0, the same numbers
KVCPT_EMU_DEVICES=1 mpirun --oversubscribe -np 2 "$E" train --config "$tmp/cfg.json" --set out="$tmp/shared" \
    --set device=cuda --set share_device=1 >"$tmp/shared.log" 2>&1
p=$(placements "$tmp/shared.log")
if [ "$(cut -d' ' -f1,2 <<<"$p" | tr '\n' ';')" = "0 0;1 0;" ] && grep -q "(shared: share_device=1)" "$tmp/shared.log"; then
    ok "share_device=1: 2 ranks share device 0, said in each rank's line"
else fail "share_device=1" "placements '$p'; $(tail -3 "$tmp/shared.log")"; fi
same_run "2 ranks sharing 1 device" "$tmp/shared"

# What crosses the bus: log.jsonl's h2d_bytes and d2h_bytes (rank 0, per
# record) against the emulator's own count of every cudaMemcpy
# (KVCPT_EMU_TRANSFERS), and nothing but the batch and a few scalars: up,
# the tokens and targets of this rank's micro-batches (8 bytes a token);
# down, their per-token losses (4 bytes); 256 bytes more each way at most
# (the norm's and the optimizer check's scalars). A 1-step and a 3-step
# run share start-up, the first step and shut-down, so the difference of
# the emulator's totals is exactly what steps 2 and 3 moved (no dev
# evaluation: eval_batches 0).
transfers() { # out dir, steps, ranks; one rank: the emulator's totals in DIR.tx
    local count=()
    [ "$3" -eq 1 ] && count=(env KVCPT_EMU_TRANSFERS="$tmp/$1.tx")
    KVCPT_EMU_DEVICES=$3 mpirun --oversubscribe -np "$3" "${count[@]}" "$E" train --config "$tmp/cfg.json" \
        --set out="$tmp/$1" --set device=cuda --set steps="$2" --set eval_batches=0 >"$tmp/$1.log" 2>&1
}
transfers tx1 1 1; transfers tx3 3 1; transfers tx3r2 3 2
model_bytes=$($E plan --config "$tmp/cfg.json" --ranks 1 --engine cuda --json | grep -o '"params":[0-9]*' | cut -d: -f2)
check=$(python3 - "$tmp" "$model_bytes" <<'PY'
import json, sys
tmp, model = sys.argv[1], int(sys.argv[2])
def totals(name):
    w = open("%s/%s.tx" % (tmp, name)).read().split()
    return int(w[1]), int(w[3])
def records(name):
    return [json.loads(l) for l in open("%s/%s/log.jsonl" % (tmp, name))]
e = []
(h1, d1), (h3, d3) = totals("tx1"), totals("tx3")
r3 = records("tx3")
logged = (sum(r["h2d_bytes"] for r in r3[1:]), sum(r["d2h_bytes"] for r in r3[1:]))
if logged != (h3 - h1, d3 - d1):
    e.append("steps 2-3 logged h2d %d d2h %d, the emulator counted %d, %d" % (logged + (h3 - h1, d3 - d1)))
for name, ranks in (("tx3", 1), ("tx3r2", 2)):
    tokens = 12 // ranks * 56
    for r in records(name)[1:]:
        if not (8 * tokens <= r["h2d_bytes"] <= 8 * tokens + 256 and 4 * tokens <= r["d2h_bytes"] <= 4 * tokens + 256):
            e.append("%s step %d moved %d + %d bytes for %d tokens" % (name, r["step"], r["h2d_bytes"], r["d2h_bytes"], tokens))
r = records("tx3r2")[1]
print("; ".join(e) if e else "OK steps 2-3 moved %d + %d bytes (emulator: the same); per step on 2 ranks %d + %d; the fp32 model is %d bytes" % (logged + (r["h2d_bytes"], r["d2h_bytes"], model)))
PY
)
case "$check" in OK*) ok "host<->device bytes: ${check#OK }";; *) fail "host<->device bytes" "$check";; esac
