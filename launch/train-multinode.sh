#!/usr/bin/env bash
# Several nodes from an OpenMPI hostfile (one line per node: "host slots=8").
# The run directory ('out' in the config) must be on a filesystem every node
# sees: each rank writes its own checkpoint file, rank 0 the manifest.
#   HOSTFILE=hosts NP=16 launch/train-multinode.sh launch/configs/cpt-llama3.1-8b.json [--resume]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: HOSTFILE=hosts NP=16 $0 CONFIG.json [kvcpt train options]" >&2; exit 2; }
: "${HOSTFILE:?set HOSTFILE to an OpenMPI hostfile}"
cfg=$1; shift
exec mpirun --hostfile "$HOSTFILE" -np "${NP:?set NP to the total rank count}" --map-by ppr:"${PER_NODE:-8}":node \
    --bind-to none -x OMP_NUM_THREADS -x PATH -x LD_LIBRARY_PATH "$PWD/kvcpt" train --config "$cfg" "$@"
