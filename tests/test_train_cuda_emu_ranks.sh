#!/usr/bin/env bash
# One GPU per rank: `mpirun -np N build/emu/kvcpt train --set device=cuda`
# on the CUDA emulator playing N devices (KVCPT_EMU_DEVICES=N). Every rank
# names its device in one line, and N ranks take N different devices (by
# node-local rank, with distinct PCI bus ids); 2 and 3 ranks give the
# one-rank run's log and final model bit for bit (the sharded step's
# arithmetic does not depend on the rank count); more ranks than devices are
# refused with both numbers in the message, unless share_device=1, which
# puts ranks on devices round-robin and still gives the same numbers.
. "$(dirname "$0")/lib.sh"
E=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
if [ ! -x "$E" ]; then fail "emulated kvcpt" "$E is missing (make test builds it)"; exit 1; fi
if ! command -v mpirun >/dev/null 2>&1 || ! $E --version | grep -q "collectives: single, mpi"; then
    echo "skip - ranks on emulated devices: mpirun or an MPI-enabled build is missing"; exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

$E prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 120 --out "$tmp/data" >/dev/null
# global_batch 6 = 6 micro-batches of 1: divisible by 1, 2 and 3 ranks
cat > "$tmp/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 6, "micro_batch": 1, "steps": 3, "warmup_steps": 1, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 0, "eval_batches": 2, "ckpt_interval": 0, "keep_last": 1}
JSON
. "$(dirname "$0")/../scripts/rank_compare.sh"
strip() { rank_log_strip "$1"; }
same_run() { # name, dir: equal to the one-rank run, bit for bit
    if [ -s "$2/log.jsonl" ] && diff <(strip "$tmp/one") <(strip "$2") >/dev/null &&
       cmp -s "$tmp/one/model/model.kvcpt" "$2/model/model.kvcpt"; then
        ok "$1: log.jsonl ($(wc -l <"$2/log.jsonl") steps, dev loss included) and final model equal the one-rank run's, bit for bit"
    else fail "$1" "differs from the one-rank run: $(diff <(strip "$tmp/one") <(strip "$2") | head -4)"; fi
}
# "R D B" (rank, device, PCI bus), one per rank
placements() { rank_placements "$1"; }

if KVCPT_EMU_DEVICES=1 $E train --config "$tmp/cfg.json" --set out="$tmp/one" --set device=cuda >"$tmp/one.log" 2>&1 &&
   [ "$(placements "$tmp/one.log")" = "0 0 0000:18:00.0" ]; then
    ok "one rank: device 0 named with its PCI bus id ($(grep -m1 'CUDA device' "$tmp/one.log" | cut -c1-160))"
else fail "one-rank run" "$(tail -3 "$tmp/one.log")"; fi

for n in 2 3; do
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
