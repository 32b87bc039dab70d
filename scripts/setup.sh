#!/usr/bin/env bash
# Installs what kvcpt's build and tests need, idempotently, with pinned
# versions: Debian packages only when missing, a Python virtual environment
# (third_party/venv, git-ignored) only when it is not the locked one, and
# the Llama 3.1 tokenizer.json (third_party/tokenizers/llama3.1/). A second
# run checks and installs nothing, so it needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS

DEB_PKGS=(
  build-essential pkg-config     # compiler, make, library discovery
  libopenblas-dev                # CPU matmuls (cblas_sgemm)
  libjansson-dev                 # JSON: config.json, safetensors headers, manifests
  libzstd-dev zstd               # streamed .zst corpora
  libpcre2-dev                   # tokenizer pre-split regex (UTF + UCP)
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
echo "setup: done in $((SECONDS - t0)) s"
