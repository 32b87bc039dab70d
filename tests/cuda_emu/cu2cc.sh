#!/usr/bin/env bash
# cu2cc.sh IN.cu OUT.cc: rewrites the two CUDA-only constructs of a .cu file
# into C++ the emulator (include/cuda_runtime.h) can compile:
#   kernel<<<grid, block[, smem[, stream]]>>>(args)  ->  emu::launch(emu::Config(grid, block, ...), kernel, args)
#   extern __shared__ [__align__(n)] T name[];       ->  T *name = (T *)emu::dynamic_smem();
# A launch must keep "kernel<<<...>>>(" on one line (the arguments may wrap).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 IN.cu OUT.cc" >&2; exit 2; }
name='([A-Za-z_][A-Za-z0-9_]*(<[^<>;()]*>)?)'
{
    printf '#line 1 "%s"\n' "$1"
    sed -E \
        -e "s/${name}<<<(.*)>>>\(\)/emu::launch(emu::Config(\3), \1)/g" \
        -e "s/${name}<<<(.*)>>>\(/emu::launch(emu::Config(\3), \1, /g" \
        -e 's/extern __shared__ (__align__\([0-9]+\) )?([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_]) +([A-Za-z_][A-Za-z0-9_]*)\[\];/\2 *\3 = (\2 *)emu::dynamic_smem();/' \
        "$1"
} >"$2.tmp"
if grep -n '<<<\|>>>' "$2.tmp" >&2; then
    echo "cu2cc.sh: $1: a launch above was not rewritten (keep 'kernel<<<...>>>(' on one line)" >&2
    rm -f "$2.tmp"
    exit 1
fi
mv "$2.tmp" "$2"
