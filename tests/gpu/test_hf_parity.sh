#!/usr/bin/env bash
# The CUDA engine against Hugging Face transformers: tiny random
# models, tied and untied, mask inactive (K = L); see tests/gpu/hf_parity.py.
# Skips (saying so) without a GPU, without the CUDA build or without
# transformers in the Python environment.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
tool=build/tests/tools/dump_model_case
if ! ./kvcpt --version | grep -q "visible devices: [1-9]"; then echo "skip - hf parity: no CUDA device visible"; exit 0; fi
if ! $PY -c "import torch, transformers, numpy" 2>/dev/null; then
    echo "skip - hf parity: torch, transformers and numpy are not importable by $PY"; exit 0
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rc=0
for spec in "11 0 max" "12 1 max"; do
    set -- $spec
    $tool "$tmp/c$1" "$1" "$2" "$3" cuda 24 || { echo "FAIL - hf parity: dump case $spec"; rc=1; continue; }
    $PY tests/gpu/hf_parity.py "$tmp/c$1" || rc=1
done
exit $rc
