#!/usr/bin/env bash
# kvcpt's CPU model against an independent PyTorch autograd reference
# (the locked venv's torch), tiny config with GQA, llama3 RoPE and the
# RefreshKV mask active (K < L). Cases: untied + max aggregation, tied + mean.
# The same cases from the CUDA engine (model/decoder_cuda.h), run by the CPU
# emulator of the CUDA runtime (build/emu/tools/dump_model_case), plus one
# with K = L (every key kept: plain causal attention). Then the mask's evict
# and restride fields on the CPU (K 5 < S 8, so the budget cuts the new keys
# too), against torch_ref.py's own replay of the eval's partial cache.
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}   # the locked venv of scripts/setup.sh
if ! python_has "$PY" torch numpy; then
    echo "FAIL - torch parity: torch or numpy is not installed in $PY; run 'make setup'"
    exit 1
fi
rc=0
for spec in "7 0 max" "8 1 mean" "9 0 first"; do
    set -- $spec
    d="$tmp/case_$1"
    ./build/tests/tools/dump_model_case "$d" "$1" "$2" "$3" || { echo "FAIL - dump case $spec"; rc=1; continue; }
    $PY tests/torch_ref.py "$d" || rc=1
done
for spec in "7 0 max 5" "8 1 mean 5" "9 0 first 24"; do
    set -- $spec
    d="$tmp/cuda_$1"
    ./build/emu/tools/dump_model_case "$d" "$1" "$2" "$3" cuda "$4" || { echo "FAIL - dump cuda case $spec"; rc=1; continue; }
    $PY tests/torch_ref.py "$d" || rc=1
done
for spec in "11 0 max 1 0" "12 1 mean 1 3" "13 0 first 0 3"; do
    set -- $spec
    d="$tmp/evict_$1"
    ./build/tests/tools/dump_model_case "$d" "$1" "$2" "$3" cpu 5 - "$4" "$5" || { echo "FAIL - dump case $spec"; rc=1; continue; }
    $PY tests/torch_ref.py "$d" || rc=1
done
exit $rc
