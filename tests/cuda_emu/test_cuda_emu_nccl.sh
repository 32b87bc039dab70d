#!/usr/bin/env bash
# The NCCL code path on the CUDA emulator (tests/cuda_emu/emu_nccl.cc, NCCL
# over MPI): parallel/comm_nccl.c's all-gather-v and all-to-all-v and NCCL's
# own collectives under mpirun -np 1, 2, 3, 4, every check of every rank
# passing, all ranks sharing one emulated device and then one emulated
# device per rank (KVCPT_EMU_DEVICES=N; each rank takes the device of its
# node-local rank before NCCL binds to it, as training does); then planted
# bugs, each of which must end in the emulator's message naming the ranks:
# a rank passing a different count, a host buffer, a buffer shorter than the
# count, a buffer of another device than the communicator's, a receive that
# matches no send, another reduction op, another broadcast root, and a rank
# that never enters a collective (bounded by KVCPT_EMU_NCCL_TIMEOUT, and by
# ncclCommAbort from a watchdog thread); and the NCCL watchdog of
# parallel/nccl_watchdog.c ending a job whose rank skips a collective.
set -u
cd "$(dirname "$0")/../.."
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
# KVCPT_EMU_TESTS_DIR: where the two programs are (make sanitize-emu: build/emu-asan/tests)
A=${KVCPT_EMU_TESTS_DIR:-build/tests}/test_cuda_emu_comm_nccl B=${KVCPT_EMU_TESTS_DIR:-build/tests}/test_cuda_emu_nccl_collectives
if ! command -v mpirun >/dev/null 2>&1 || [ ! -x $A ] || [ ! -x $B ]; then
    echo "skip - emulated NCCL under mpirun: mpirun or the emulated NCCL tests are missing (they need MPI: make setup, then make test)"
    exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset KVCPT_TEST_NCCL_PLANT
# ranks, binary, log; a run that hangs is stopped (the emulator's own timeout is far longer)
run() { timeout --kill-after=5 120 mpirun --oversubscribe -np "$1" "$2" >"$3" 2>&1; }

if [ -x build/emu/kvcpt ]; then
    v=$(build/emu/kvcpt --version 2>&1)
    if grep -q "collectives: single, mpi, nccl$" <<<"$v"; then ok "build/emu/kvcpt carries the nccl backend"
    else fail "build/emu/kvcpt --version" "no nccl among the collectives: $(grep collectives <<<"$v")"; fi
fi

# "rank R ...: CUDA device D of ..." lines -> "R:D;" per rank, in rank order
placements() { sed -nE 's/^kvcpt test_[a-z_]+: rank ([0-9]+) \(local rank [0-9]+ of [0-9]+\): CUDA device ([0-9]+) of .*/\1:\2/p' "$1" | sort -n | tr '\n' ';'; }
# checks per rank: comm_nccl 8 (2 collectives x 4 types); collectives 16, 17 from 3 ranks (the rank-order sum).
# devices: 1 = every rank on device 0 (shared), n = one device per rank
for devs in shared own; do
    for n in 1 2 3 4; do
        [ $devs = own ] && [ $n = 1 ] && continue
        ndev=1 want_place=""
        [ $devs = own ] && ndev=$n
        for r in $(seq 0 $((n - 1))); do want_place+="$r:$([ $devs = own ] && echo $r || echo 0);"; done
        for bin in $A $B; do
            name=$(basename $bin) log="$tmp/$(basename $bin)-$n-$devs.log"
            want=$((n * 8)); [ $bin = $B ] && want=$((n * (n >= 3 ? 17 : 16)))
            KVCPT_EMU_DEVICES=$ndev run $n $bin "$log"; rc=$?
            got=$(grep -c '^ok - ' "$log"); bad=$(grep -c '^FAIL - ' "$log"); place=$(placements "$log")
            if [ $rc = 0 ] && [ "$got" = $want ] && [ "$bad" = 0 ] && [ "$place" = "$want_place" ]; then
                ok "$name on $n rank(s), $ndev emulated device(s): all $got checks pass (rank:device $place)"
            else fail "$name on $n rank(s), $ndev device(s)" "exit $rc, $got of $want checks passed, $bad failed, rank:device '$place' (want '$want_place'): $(grep -m3 'FAIL\|emu nccl\|error' "$log" | tr '\n' ' ')"; fi
        done
    done
done

# a planted bug: binary, ranks, name, expected exit (0 or "nonzero"), and the message (grep -E) that must appear
planted() {
    local bin=$1 n=$2 bug=$3 want_rc=$4 msg=$5 log="$tmp/plant-$3.log"
    KVCPT_TEST_NCCL_PLANT=$bug run "$n" "$bin" "$log"; local rc=$?
    local rc_ok=0
    if [ "$want_rc" = 0 ]; then [ $rc = 0 ] && ! grep -q '^FAIL - ' "$log" && rc_ok=1
    else [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && ! grep -q '^FAIL - ' "$log" && rc_ok=1; fi
    if [ $rc_ok = 1 ] && grep -qE -- "$msg" "$log"; then ok "planted $bug on $n ranks: $(grep -m1 -oE -- "$msg" "$log")"
    else fail "planted $bug on $n ranks" "exit $rc; expected /$msg/ in: $(grep -m4 'FAIL\|emu nccl\|error' "$log" | tr '\n' ' ')"; fi
}
planted $A 3 count nonzero "rank 0 calls ncclBroadcast\(count=100, ncclFloat32, root=0\) but rank 2 calls ncclBroadcast\(count=99"
planted $A 2 host nonzero "rank 1: ncclBroadcast\(count=100, ncclFloat32, root=1\)'s sendbuff 0x[0-9a-f]+ is not device memory"
planted $A 4 short nonzero "rank 3: ncclBroadcast\(count=100, ncclFloat32, root=[0-3]\)'s recvbuff 0x[0-9a-f]+ has 396 bytes up to the end of its cudaMalloc allocation, the operation needs 400"
# rank 1 on device 1 sends from a buffer it allocated on device 0
KVCPT_EMU_DEVICES=2 planted $A 2 device nonzero "rank 1: ncclBroadcast\(count=100, ncclFloat32, root=1\)'s sendbuff 0x[0-9a-f]+ was allocated on device 0, but the communicator is on device 1"
planted $A 2 nowait nonzero "cudaMemcpy's source \(0x[0-9a-f]+, on stream \(nil\)\) points into bytes that ncclBroadcast\(count=100, ncclFloat32, root=[01]\) on stream 0x[0-9a-f]+ \(its operation #[0-9]+\) may still be writing"
planted $A 3 sendrecv nonzero "rank 0's send #1 to rank 2 is ncclSend\(count=100, ncclFloat32, peer=2\), but rank 2's receive #1 from rank 0 is ncclRecv\(count=101"
planted $B 3 op 0 "rank 0 calls ncclAllReduce\(count=64, ncclFloat32, ncclSum\) but rank 2 calls ncclAllReduce\(count=64, ncclFloat32, ncclMax\)"
planted $B 2 root 0 "rank 0 calls ncclBroadcast\(count=64, ncclFloat32, root=0\) but rank 1 calls ncclBroadcast\(count=64, ncclFloat32, root=1\)"
# the stalled rank is released once the others have their error; both modes need every rank's ok line
KVCPT_EMU_NCCL_TIMEOUT=2 planted $B 3 stall 0 "rank 0: rank\(s\) 2 did not take part within 2 s while entering operation 1 \(ncclAllReduce\)"
KVCPT_EMU_NCCL_TIMEOUT=0 planted $B 3 abort 0 "rank 0: ncclCommAbort ended the wait while entering operation 1 \(ncclAllReduce\) \(still waiting for rank\(s\) 2\)"
for bug in stall abort; do
    c=$(grep -c '^ok - .*\(never enters the all-reduce\|stalled rank was released\)' "$tmp/plant-$bug.log")
    [ "$c" = 3 ] || fail "planted $bug" "$c of 3 ranks reported their ok line"
done

# The NCCL watchdog (parallel/nccl_watchdog.c): rank 1 of 2 skips the second
# all-gather-v and waits forever; rank 0 waits inside it. With comm_timeout
# 3 s (set before NCCL opens, or on the open communicator) the watchdog ends
# rank 0 (and so the job) naming the operation, long before the emulated
# NCCL's own limit (100 s) could; with comm_timeout 0 it is not running, and
# the emulated NCCL's limit (3 s here) is what ends it.
skipped() { # comm timeout, emulated NCCL timeout, log, KVCPT_TEST_NCCL_TIMEOUT_LATER
    local t0=$SECONDS
    KVCPT_TEST_NCCL_PLANT=skip KVCPT_TEST_NCCL_TIMEOUT=$1 KVCPT_EMU_NCCL_TIMEOUT=$2 KVCPT_TEST_NCCL_TIMEOUT_LATER=${4:-0} \
        run 2 $A "$3"
    local rc=$?
    echo "$rc $((SECONDS - t0))"
}
# comm_timeout set before NCCL opens (as `kvcpt train` does), then on the open communicator
for when in before later; do
    read -r rc took < <(skipped 3 100 "$tmp/watchdog-$when.log" $([ $when = later ] && echo 1))
    said="before NCCL opens"; [ $when = later ] && said="on the open NCCL communicator"
    line=$(grep -m1 -E "^kvcpt: error: rank 0 of 2: NCCL all-gather-v \(grouped ncclBroadcast\) \(operation #2 on this communicator\) has not finished [0-9.]+ s after it was enqueued.*\(comm_timeout = 3 s\)" "$tmp/watchdog-$when.log")
    waited=$(sed -nE 's/.* has not finished ([0-9.]+) s after.*/\1/p' <<<"$line")
    if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] && [ -n "$line" ] && awk -v w="${waited:-0}" 'BEGIN { exit !(w >= 3) }' &&
       [ "$took" -lt 100 ] && ! grep -q "did not take part within" "$tmp/watchdog-$when.log" && ! grep -q '^FAIL - ' "$tmp/watchdog-$when.log"; then
        ok "NCCL watchdog, comm_timeout 3 s set $said: a skipped all-gather-v ends the job in ${took} s (exit $rc): $(cut -c15-200 <<<"$line")..."
    else fail "NCCL watchdog (comm_timeout 3 set $said)" "exit $rc after ${took} s; $(grep -m3 'error\|emu nccl\|FAIL' "$tmp/watchdog-$when.log" | tr '\n' ' ')"; fi
done
read -r rc took < <(skipped 0 3 "$tmp/no-watchdog.log")
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] && ! grep -q "has not finished" "$tmp/no-watchdog.log" &&
   grep -q "emu nccl: rank 0: rank(s) 1 did not take part within 3 s while entering operation 2" "$tmp/no-watchdog.log"; then
    ok "comm_timeout 0 (no NCCL watchdog): the emulated NCCL's own KVCPT_EMU_NCCL_TIMEOUT=3 ends the job instead, in ${took} s (exit $rc)"
else fail "comm_timeout 0" "exit $rc after ${took} s; $(grep -m3 'error\|emu nccl\|FAIL' "$tmp/no-watchdog.log" | tr '\n' ' ')"; fi
