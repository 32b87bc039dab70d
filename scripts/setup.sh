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
  python3-torch python3-numpy    # independent autograd oracle for the CPU model
  gnuplot-nox                    # PNG plots (loss curves, PPL per policy)
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
