#!/usr/bin/env bash
# One process (no MPI): the world of one. Same numbers as any rank count.
#   launch/train-single.sh launch/configs/cpu-small-cpt.json [--set key=value ...] [--resume]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 CONFIG.json [kvcpt train options]" >&2; exit 2; }
cfg=$1; shift
[ -x ./kvcpt ] || make -j"$(nproc)"
exec ./kvcpt train --config "$cfg" "$@"
