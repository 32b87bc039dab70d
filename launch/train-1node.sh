#!/usr/bin/env bash
# One node, NP ranks (default 8: one per GPU on an 8-GPU node; on CPU, one
# per socket or NUMA node works well). Each rank owns 1/NP of every layer.
#   NP=4 launch/train-1node.sh launch/configs/cpt-llama3.1-8b.json [--resume]
# global_batch must divide by micro_batch x NP. OpenMP threads per rank
# default to cores / ranks on the node (set OMP_NUM_THREADS to override).
set -euo pipefail
cd "$(dirname "$0")/.."
. launch/lib/env.sh
env_int NP 8 1 65536
[ $# -ge 1 ] || { echo "usage: NP=8 $0 CONFIG.json [kvcpt train options]" >&2; exit 2; }
cfg=$1; shift
[ -x ./kvcpt ] || make -j"$(nproc)"
command -v mpirun >/dev/null || { echo "mpirun not found: make setup installs OpenMPI" >&2; exit 1; }
root=(); [ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
exec mpirun "${root[@]}" -np "$NP" --bind-to none ./kvcpt train --config "$cfg" "$@"
