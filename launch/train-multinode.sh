#!/usr/bin/env bash
# Several nodes from an OpenMPI hostfile (one line per node: "host slots=8").
# The run directory ('out' in the config) must be on a filesystem every node
# sees: each rank writes its own checkpoint file, rank 0 the manifest.
#   HOSTFILE=hosts NP=16 launch/train-multinode.sh launch/configs/cpt-llama3.1-8b.json [--resume]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: HOSTFILE=hosts NP=16 $0 CONFIG.json [kvcpt train options]" >&2; exit 2; }
. launch/lib/env.sh
env_file HOSTFILE "" # an OpenMPI hostfile
env_int NP "" 1 1048576; env_int PER_NODE 8 1 65536 # all ranks, and the ranks on each node
cfg=$1; shift
exec mpirun --hostfile "$HOSTFILE" -np "$NP" --map-by ppr:"$PER_NODE":node \
    --bind-to none -x OMP_NUM_THREADS -x PATH -x LD_LIBRARY_PATH "$PWD/kvcpt" train --config "$cfg" "$@"
