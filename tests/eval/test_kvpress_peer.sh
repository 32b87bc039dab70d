#!/usr/bin/env bash
# kvcpt eval against NVIDIA kvpress (tests/kvpress_peer.py): for every policy
# both implement, the keys kept after the prefill and the next tokens' NLLs
# agree under the flags that reproduce kvpress's choices (docs/eval.md,
# "kvpress as the peer"). Skips without the test venv (make setup).
. "$(dirname "$0")/../lib.sh" || exit 1
# the policy options' enum values are checked before anything is loaded
for o in "--pool median:--pool must be one of max, avg" "--head-sets all:--head-sets must be one of group, shared" \
         "--h2o-score max:--h2o-score must be one of sum, mean" \
         "--snapkv-keep-window yes:--snapkv-keep-window must be one of off, on" \
         "--refresh-query rotated:--refresh-query must be one of post, pre" \
         "--restkv-shift abs:--restkv-shift must be one of printed, signed"; do
    set -- ${o%%:*}
    if e=$($K eval --model "$tmp/none" --data "$tmp/none" "$@" 2>&1); then fail "eval $*" "accepted"
    elif grep -qF -- "${o#*:}" <<<"$e"; then ok "eval $* refused, naming the values"; else fail "eval $*" "$e"; fi
done
py=${KVCPT_PYTHON:-third_party/venv/bin/python}
if ! python_has "$py" kvpress transformers torch; then
    echo "skip - kvpress peer: $py lacks kvpress, transformers or torch (make setup)"
    exit 0
fi
# one thread each: the suite runs beside other jobs on two cores
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" tests/kvpress_peer.py --check --kvcpt "$K" --workdir "$tmp/w" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL - kvpress peer: exit status $rc"; tail -20 "$tmp/err"; }
