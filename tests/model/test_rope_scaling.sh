#!/usr/bin/env bash
# RoPE scaling (linear, dynamic, yarn, llama3) against transformers, past the
# context the model was trained to: kvcpt's tables, its CPU model's logits,
# loss and gradients, its config round trip, and `kvcpt eval`'s
# full-attention PPL per document, with the scaling from config.json or from
# --rope-scaling; a context past the trained one without scaling is refused,
# or run labelled BEYOND (tests/rope_oracle.py).
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
if ! python_has "$PY" torch transformers safetensors numpy; then
    echo "skip - rope scaling against transformers: $PY lacks torch, transformers, safetensors or numpy (make setup)"
    exit 0
fi
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
for t in build/tests/tools/dump_model_case build/tests/tools/dump_rope; do
    [ -x "$t" ] || { fail "rope scaling" "$t is not built (make $t)"; exit 1; }
done
$PY tests/rope_oracle.py --kvcpt "$K" --workdir "$tmp/w"
