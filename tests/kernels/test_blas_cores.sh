#!/usr/bin/env bash
# The bit-identity claims that rest on BLAS hold on every OpenBLAS core this
# CPU can run, not only the one the suite runs on: the C tests that compare
# bits across masks, batch sizes, thread counts and paths run again under
# Prescott (SSE3: what OpenBLAS falls back to on a CPU model it does not
# know), Haswell and Zen (AVX2) and SkylakeX (AVX-512), each where the CPU
# has the instructions. Then kvcpt's own choice of core end to end: an
# OpenBLAS that picked Prescott on this CPU (a preloaded stand-in for
# openblas_get_corename) makes kvcpt run itself again on the matching core
# and say so; a core the user set is kept.
. "$(dirname "$0")/../lib.sh" || exit 1

flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
cores=(Prescott)
has avx2 fma && cores+=(Haswell Zen)
has avx512f avx512bw avx512vl avx512dq && cores+=(SkylakeX)

bins=(test_model test_attention_mask test_attention_blocks test_eval_batch test_eval_invariants test_policies
      test_matmul_threads)
for b in "${bins[@]}"; do
    [ -x "build/tests/$b" ] || { fail "$b under other BLAS cores" "build/tests/$b is not built (make test-bins)"; continue; }
    for core in "${cores[@]}"; do
        cases=; [ "$b" = test_model ] && cases="bits: " # its finite-difference checks have tolerances
        out=$(KVCPT_TEST_CASES=$cases OPENBLAS_CORETYPE=$core OPENBLAS_VERBOSE=2 "build/tests/$b" 2>&1) && rc=0 || rc=$?
        ran=$(grep -m1 '^Core: ' <<<"$out" | cut -d' ' -f2)
        nfail=$(grep -c '^FAIL - ' <<<"$out")
        if [ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ] && [ "${ran,,}" = "${core,,}" ]; then
            ok "$b on OpenBLAS core $core: $(grep -c '^ok - ' <<<"$out") checks pass"
        else
            fail "$b on OpenBLAS core $core" "exit $rc, ran on core '${ran:-?}', failed: $(grep '^FAIL - ' <<<"$out" | head -3)"
        fi
    done
done

# kvcpt's choice end to end, where the CPU has more than SSE3
if ! has avx; then
    echo "skip - kvcpt's own choice of core: this CPU has no AVX, so Prescott is the right core"
    exit 0
fi
if has avx512f avx512bw avx512vl avx512dq; then want=SkylakeX; isa=avx512
elif has avx2 fma; then want=Haswell; isa=avx2
else want=Sandybridge; isa=avx; fi
cat >"$tmp/pick.c" <<'C'
/* OpenBLAS as it is on a CPU model it does not know: it picked Prescott,
 * unless OPENBLAS_CORETYPE named a core */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
char *openblas_get_corename(void) {
    if (!getenv("OPENBLAS_CORETYPE")) return "Prescott";
    char *(*real)(void) = (char *(*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
    return real ? real() : "?";
}
C
if ! cc -shared -fPIC -o "$tmp/pick.so" "$tmp/pick.c" -ldl 2>"$tmp/cc.err"; then
    fail "the stand-in OpenBLAS pick builds" "$(head -5 "$tmp/cc.err")"
    exit 0
fi
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/data" >/dev/null 2>&1 ||
    fail "a tiny data set for the choice's check" "prepare failed"
cat >"$tmp/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$tmp/data", "out": "$tmp/run", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 2, "micro_batch": 2, "steps": 1, "warmup_steps": 0, "eval_interval": 0, "ckpt_interval": 0}
JSON
# A sanitized kvcpt (make sanitize) would need its ASan runtime first in the
# preload list, and every program it starts (gnuplot for loss.png) would then
# run under ASan and report its own libraries' leaks: the choice is checked
# on the plain binary only.
if ldd "$(command -v "$K")" 2>/dev/null | grep -q libasan; then
    echo "skip - kvcpt's own choice of core: $K is built with AddressSanitizer, whose runtime the preloaded stand-in would have to follow into gnuplot (the plain binary runs this check in make test)"
    exit 0
fi
run_train() { # extra env...
    rm -rf "$tmp/run"
    env -u OPENBLAS_CORETYPE -u KVCPT_OPENBLAS_PICK LD_PRELOAD="$tmp/pick.so" "$@" \
        $K train --config "$tmp/cfg.json" >"$tmp/out" 2>&1
}
if run_train && grep -q "OpenBLAS core $want, chosen by kvcpt: OpenBLAS picked Prescott on a CPU with $isa" "$tmp/out"; then
    ok "OpenBLAS picked Prescott on a CPU with $isa: kvcpt runs on $want and says so at start"
else
    fail "kvcpt's choice of core" "wanted $want; output: $(head -c 600 "$tmp/out")"
fi
if blas=$(grep -ho '"blas": *{[^}]*}' "$tmp/run/log.jsonl" 2>/dev/null | head -1) &&
    grep -q "\"core\": *\"$want\"" <<<"$blas" && grep -q '"chosen_by": *"kvcpt"' <<<"$blas" &&
    grep -q '"library_pick": *"Prescott"' <<<"$blas"; then
    ok "the training log records the core, who chose it and OpenBLAS's own pick: $blas"
else
    fail "the training log's blas record" "got '${blas:-nothing}' from $(head -c 400 "$tmp/run/log.jsonl" 2>/dev/null)"
fi
if run_train OPENBLAS_CORETYPE=Prescott && grep -q "OpenBLAS core Prescott, set by OPENBLAS_CORETYPE=Prescott" "$tmp/out"; then
    ok "a core the user set (OPENBLAS_CORETYPE=Prescott) is kept and named as the user's"
else
    fail "the user's OPENBLAS_CORETYPE" "output: $(head -c 600 "$tmp/out")"
fi
