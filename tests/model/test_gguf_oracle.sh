#!/usr/bin/env bash
# kvcpt convert --from FILE.gguf against llama.cpp's gguf package and
# transformers' GGUF loader (tests/gguf_oracle.py): every tensor type
# dequantized bit for bit on tiny files written by gguf.GGUFWriter, the real
# SmolLM2-135M-Instruct (installed by `make setup`) tensor for tensor against
# transformers, its config and tokenizer, and two planted bugs caught. Skips,
# saying so, without the venv or the model.
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}
GGUF=${KVCPT_SMOLLM2_GGUF:-third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf}
if ! python_has "$PY" gguf torch transformers tokenizers safetensors numpy; then
    echo "skip - gguf oracle: gguf, torch, transformers, tokenizers, safetensors or numpy is not installed in $PY; run 'make setup'"
    exit 0
fi
# offline, quiet, one thread: nothing is fetched, progress bars stay out of the log
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error TQDM_DISABLE=1 OMP_NUM_THREADS=1
$PY tests/gguf_oracle.py --kvcpt "$K" --workdir "$tmp" --real "$GGUF"
