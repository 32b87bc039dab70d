#!/usr/bin/env bash
# Only `kvcpt train` splits its work across the ranks of an MPI launch. Any
# other command under `mpirun -np 2` (eval, bench, prepare, ...) would run
# whole on every rank, on device 0, writing the same files: refused before
# it starts, with a message printed once (by rank 0), and nothing written.
# Under `mpirun -np 1` (and without a launcher) the same eval runs and
# writes its results; a PMIx-only launch that names a rank above 0 is
# refused too (the world is known to be larger than one even when the
# launcher does not say its size), leaving the message to rank 0.
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 60 --out "$tmp/data" >/dev/null
echo '{"model":"tiny","data":"'$tmp'/data","L":48,"S":8,"K":6,"global_batch":2,"micro_batch":1,"steps":2,"warmup_steps":1,"out":"'$tmp'/tr"}' >"$tmp/cfg.json"
$K train --config "$tmp/cfg.json" >"$tmp/train.log" 2>&1 || fail "tiny model" "train failed: $(tail -2 "$tmp/train.log")"
eval_args=(eval --model "$tmp/tr/model" --data "$tmp/data" --L 48 --S 8 --K 6 --max-docs 2)
refused='started by an MPI launcher with 2 ranks, but only `kvcpt train` splits its work across ranks'

if ! command -v mpirun >/dev/null 2>&1; then
    echo "skip - eval under mpirun: no mpirun (make setup)"
else
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    for cmd in "eval" "bench decode"; do
        out=$tmp/np2-${cmd// /-}
        if [ "$cmd" = eval ]; then args=("${eval_args[@]}" --out "$out"); else args=(bench decode --preset tiny --L 64 --json); fi
        if timeout 120 mpirun --oversubscribe -np 2 "$K" "${args[@]}" >"$out.log" 2>&1; then
            fail "mpirun -np 2 kvcpt $cmd" "accepted: $(tail -2 "$out.log")"
        elif [ "$(grep -c "kvcpt ${cmd%% *}: error: $refused" "$out.log")" = 1 ] && [ ! -e "$out" ]; then
            ok "mpirun -np 2 kvcpt $cmd is refused before anything is written, said once (by rank 0)"
        else fail "mpirun -np 2 kvcpt $cmd" "not the refusal: $(grep -m2 'error' "$out.log")"; fi
    done
    if timeout 300 mpirun -np 1 "$K" "${eval_args[@]}" --out "$tmp/np1" >"$tmp/np1.log" 2>&1 && [ -s "$tmp/np1/eval.json" ]; then
        ok "mpirun -np 1 kvcpt eval runs and writes eval.json"
    else fail "mpirun -np 1 kvcpt eval" "$(tail -3 "$tmp/np1.log")"; fi
fi
env PMIX_RANK=1 "$K" "${eval_args[@]}" --out "$tmp/pmix" >"$tmp/pmix.log" 2>&1
rc=$?
if [ $rc = 2 ] && [ ! -s "$tmp/pmix.log" ] && [ ! -e "$tmp/pmix" ]; then
    ok "a PMIx launch naming rank 1 (no size given) is refused as at least 2 ranks (exit 2; rank 0 says why)"
else fail "PMIX_RANK=1 eval" "exit $rc: $(tail -2 "$tmp/pmix.log")"; fi
if env PMIX_RANK=0 PMI_SIZE=2 "$K" "${eval_args[@]}" --out "$tmp/pmix0" >"$tmp/pmix0.log" 2>&1; then fail "PMIX_RANK=0 PMI_SIZE=2 eval" "accepted"
elif grep -q "kvcpt eval: error: started by an MPI launcher with 2 ranks" "$tmp/pmix0.log" && [ ! -e "$tmp/pmix0" ]; then
    ok "its rank 0 is refused with the message"
else fail "PMIX_RANK=0 PMI_SIZE=2 eval" "$(tail -2 "$tmp/pmix0.log")"; fi
if "$K" "${eval_args[@]}" --out "$tmp/plain" >"$tmp/plain.log" 2>&1 && [ -s "$tmp/plain/eval.json" ] &&
   cmp -s <(python3 -c "import json,sys;print([r['ppl'] for r in json.load(open(sys.argv[1]))['results']])" "$tmp/plain/eval.json") \
          <(python3 -c "import json,sys;print([r['ppl'] for r in json.load(open(sys.argv[1]))['results']])" "$tmp/np1/eval.json" 2>/dev/null); then
    ok "eval without a launcher gives the mpirun -np 1 perplexities"
else fail "plain eval" "$(tail -2 "$tmp/plain.log")"; fi
