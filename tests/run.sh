#!/usr/bin/env bash
# Runs every test of a suite and ends with "N passed, N failed".
#   cpu: build/tests/test_* (C) and tests/FOLDER/test_*.sh (scripts)
#   gpu: build/tests/gpu/test_* and tests/gpu/test_*.sh (they skip themselves without a GPU)
#   cli: the tests/FOLDER/test_*.sh that run the program as $K ($KVCPT_BIN, default ./kvcpt)
# KVCPT_TEST_JOBS=N runs up to N tests at once (default: the number of cores
# for cpu and cli, 1 for gpu, whose tests share one device); each test's line
# is printed when it ends, so the order varies from run to run. The tests in
# SERIAL below run afterwards, one at a time, with nothing else of the suite.
# KVCPT_TESTS=REGEX runs only the tests whose name (as printed) matches it;
# KVCPT_TESTS_EXCLUDE=REGEX leaves out those whose name matches it.
# KVCPT_TEST_LOGDIR=DIR keeps each test's whole output as DIR/NAME.log.
# A test prints "ok - name", "FAIL - name: why" or "skip - name: why" lines;
# a binary that dies without printing FAIL is counted as one failure, and so
# is one that reports no check at all, or runs past KVCPT_TEST_TIMEOUT
# seconds (default 900).
set -u
suite=${1:-cpu}
cd "$(dirname "$0")/.."

# Tests that must not share the machine with others: each stops or kills an
# MPI rank and asserts that the job ends within a collective timeout of a few
# seconds, through heartbeats that a loaded machine can delay (test_sharding.sh:
# comm_timeout 3 s, a 1.5 s silence names a rank; test_cuda_emu_nccl.sh: the
# NCCL watchdog at 3 s and the emulated NCCL's own 3 s limit;
# test_train_cuda_emu_faults.sh: comm_timeout 10 s within a 120 s bound).
SERIAL=" test_sharding.sh test_cuda_emu_nccl.sh test_train_cuda_emu_faults.sh "
# Started first, longest first, so that no long test starts late and ends
# the run alone with the other cores idle (seconds measured side by side on
# 2 cores, a fresh clone's run; only the start order, not the results,
# depends on this list). The rest, each under about 40 s, follow in name order.
SLOW_FIRST="test_cuda_emu_orders.sh test_cuda_emu_races.sh test_realmodel_cpt.sh test_train_cuda_emu_ranks.sh
            test_realmodel.sh test_train_cuda_emu.sh test_tokenizer_oracle.sh test_cuda_emu_attention_cuda
            test_cuda_emu_model_cuda test_gguf_oracle.sh test_cuda_emu_asan.sh test_torch_parity.sh
            test_hf_transformers.sh test_train_hf_smollm2.sh test_family_mistral.sh"

# Tests run side by side, each with as many OpenMP threads as cores: a
# thread that spins while it waits for work takes a core another test could
# use, so idle threads sleep (results do not depend on the wait policy).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# The C tests and kvcpt on the same OpenBLAS core: when OpenBLAS picked one
# below what the CPU has, kvcpt runs itself on the matching core
# (kernels/blas_core.h) and a test binary would not, so tests that compare
# the two bit for bit would compare two kernel sets. The suite runs on
# kvcpt's choice; OPENBLAS_CORETYPE set by the user is kept.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -x ./kvcpt ]; then
    chosen=$(./kvcpt --version 2>/dev/null | sed -n 's/^blas: OpenBLAS core \([A-Za-z0-9]*\), chosen by kvcpt: OpenBLAS picked \([A-Za-z0-9]*\) .*/\1 \2/p')
    if [ -n "$chosen" ]; then
        export OPENBLAS_CORETYPE=${chosen% *} KVCPT_OPENBLAS_PICK=${chosen#* }
        echo "run.sh: OpenBLAS picked $KVCPT_OPENBLAS_PICK; the suite runs on kvcpt's choice, $OPENBLAS_CORETYPE"
    fi
fi

if [ "$suite" = gpu ]; then jobs_max=${KVCPT_TEST_JOBS:-1}; else jobs_max=${KVCPT_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}; fi
case $jobs_max in '' | *[!0-9]* | 0) echo "run.sh: KVCPT_TEST_JOBS must be a positive integer, not '$jobs_max'" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

names=(); progs=()
add() { # NAME PROGRAM (a binary, or a script run with bash)
    if [ -n "${KVCPT_TESTS:-}" ] && ! [[ $1 =~ $KVCPT_TESTS ]]; then return; fi
    if [ -n "${KVCPT_TESTS_EXCLUDE:-}" ] && [[ $1 =~ $KVCPT_TESTS_EXCLUDE ]]; then return; fi
    names+=("$1"); progs+=("$2")
}

# runs test I in the background's shell: its output to $work/I.log, and
# "passed failed skipped seconds" to $work/I.result
run_test() {
    local i=$1 prog=${progs[$1]} log=$work/$1.log t0=$SECONDS rc
    local cmd=("$prog"); [[ $prog == *.sh ]] && cmd=(bash "$prog")
    timeout --kill-after=10 "${KVCPT_TEST_TIMEOUT:-900}" "${cmd[@]}" >"$log" 2>&1 </dev/null
    rc=$?
    local p f s
    p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^FAIL - ' "$log"); s=$(grep -c '^skip - ' "$log")
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "FAIL - ${names[$i]}: still running after ${KVCPT_TEST_TIMEOUT:-900} s, stopped" >>"$log"; f=$((f + 1))
    elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL - ${names[$i]}: exited with status $rc without reporting a failed check" >>"$log"; f=1
    elif [ $((p + f + s)) -eq 0 ]; then
        echo "FAIL - ${names[$i]}: reported no check (no ok, FAIL or skip line)" >>"$log"; f=1
    fi
    echo "$p $f $s $((SECONDS - t0))" >"$work/$i.result"
}

pass=0; fail=0; skip=0; failed_names=()
# prints test I's line (and, when it failed, its FAIL lines and last output) and counts it
report() {
    local i=$1 name=${names[$1]} log=$work/$1.log p f s secs
    read -r p f s secs <"$work/$i.result" || { p=0; f=1; s=0; secs=0; echo "FAIL - $name: the runner lost its result" >>"$log"; }
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    printf '%-34s %3d passed, %d failed, %d skipped  (%ds)\n' "$name" "$p" "$f" "$s" "$secs"
    if [ "$f" -gt 0 ]; then
        failed_names+=("$name"); sed -n '/^FAIL - /p' "$log" | head -20 | sed 's/^/    /'
        echo "    --- last lines of output ---"; tail -15 "$log" | sed 's/^/    /'
    fi
    if [ -n "${KVCPT_TEST_LOGDIR:-}" ]; then
        mkdir -p "$KVCPT_TEST_LOGDIR" && cp "$log" "$KVCPT_TEST_LOGDIR/${name//\//_}.log"
    fi
    rm -f "$log" "$work/$i.result"
}

if [ "$suite" = gpu ]; then
    shopt -s nullglob
    bins=(build/tests/gpu/test_*)
    if [ ${#bins[@]} -eq 0 ]; then
        echo "skip - gpu suite: the CUDA backend was not compiled (no nvcc at build time)"; skip=1
    fi
    for b in "${bins[@]}"; do add "gpu/$(basename "$b")" "$b"; done
    for s in tests/gpu/test_*.sh; do add "gpu/$(basename "$s")" "$s"; done
elif [ "$suite" = cli ]; then # the scripts that run the program as $K (make sanitize runs them on another binary)
    for s in tests/*/test_*.sh; do [[ $s == tests/gpu/* ]] && continue; [ -f "$s" ] && grep -q '\$K\b\|\${K}' "$s" && add "$(basename "$s")" "$s"; done
else
    for b in build/tests/test_*; do [ -x "$b" ] && add "$(basename "$b")" "$b"; done
    for s in tests/*/test_*.sh; do [[ $s == tests/gpu/* ]] && continue; [ -f "$s" ] && add "$(basename "$s")" "$s"; done
fi

if [ -n "${KVCPT_TESTS:-}" ] && [ ${#names[@]} -eq 0 ]; then
    echo "FAIL - run.sh: KVCPT_TESTS='$KVCPT_TESTS' matches no test of the $suite suite"; fail=1; failed_names+=(run.sh)
fi

# the order: the slow ones first, then the rest as listed; SERIAL last
together=(); alone=()
for slow in $SLOW_FIRST; do
    for i in "${!names[@]}"; do [ "${names[$i]}" = "$slow" ] && together+=("$i"); done
done
for i in "${!names[@]}"; do
    if [[ $SERIAL == *" ${names[$i]} "* ]]; then alone+=("$i")
    elif [[ " $SLOW_FIRST " != *[[:space:]]"${names[$i]}"[[:space:]]* ]]; then together+=("$i"); fi
done

declare -A index_of=() # background pid -> test index
for i in "${together[@]}"; do
    while [ ${#index_of[@]} -ge "$jobs_max" ]; do
        wait -n -p done_pid
        report "${index_of[$done_pid]}"; unset "index_of[$done_pid]"
    done
    run_test "$i" &
    index_of[$!]=$i
done
while [ ${#index_of[@]} -gt 0 ]; do
    wait -n -p done_pid
    report "${index_of[$done_pid]}"; unset "index_of[$done_pid]"
done
for i in "${alone[@]}"; do run_test "$i"; report "$i"; done

echo
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
