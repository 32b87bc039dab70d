#!/usr/bin/env bash
# Hugging Face transformers as the oracle, on the CPU, with the locked venv
# of scripts/setup.sh: checkpoint interop both ways (tests/hf_interop.py)
# and the model itself (tests/hf_oracle.py: logits, loss and every gradient
# of the CPU model and of the emulated CUDA engine against LlamaForCausalLM;
# kvcpt-trained exports loaded by from_pretrained).
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
if ! python_has "$PY" torch transformers safetensors numpy; then
    fail "hf transformers" "torch, transformers, safetensors and numpy are not all installed in $PY; run 'make setup'"
    exit 1
fi
# offline, quiet, one thread: nothing is fetched, progress bars stay out of the log
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1
rc=0
$PY tests/hf_interop.py --kvcpt "$K" --workdir "$tmp/interop" || rc=1
$PY tests/hf_oracle.py --kvcpt "$K" --workdir "$tmp/oracle" || rc=1
exit $rc
