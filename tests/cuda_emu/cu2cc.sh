#!/usr/bin/env bash
# cu2cc.sh IN.cu OUT.cc: rewrites the two CUDA-only constructs of a .cu file
# into C++ the emulator (include/cuda_runtime.h) can compile:
#   kernel<<<grid, block[, smem[, stream]]>>>(args)  ->  emu::launch(emu::Config(grid, block, ...).named("kernel"), kernel, args)
#   extern __shared__ [__align__(n)] T name[];       ->  T *name = (T *)emu::dynamic_smem();
# and counts static shared memory: after each other "__shared__ T a[n], b;"
# declaration it adds emu::static_smem(&a, sizeof a, "a"); ... for every name, so
# the emulator can hold static plus dynamic shared memory to the limits.
# A static __shared__ declaration must sit on one line.
# A launch's "<<<...>>>(" must sit on one line (the arguments may wrap); it
# may start the line after the kernel's name, as clang-format breaks a long
# launch: that line is joined to the name's, and an empty line put after it
# so that every later line keeps its number.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 IN.cu OUT.cc" >&2; exit 2; }
name='([A-Za-z_][A-Za-z0-9_]*(<[^<>;()]*>)?)'
{
    printf '#line 1 "%s"\n' "$1"
    perl -0pe 's/([A-Za-z0-9_>])[ \t]*\n[ \t]*(<<<[^\n]*)\n/$1$2\n\n/g' "$1" | sed -E \
        -e "s/${name}<<<(.*)>>>\(\)/emu::launch(emu::Config(\3).named(\"\1\"), \1)/g" \
        -e "s/${name}<<<(.*)>>>\(/emu::launch(emu::Config(\3).named(\"\1\"), \1, /g" \
        -e 's/extern __shared__ (__align__\([0-9]+\) )?([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_]) +([A-Za-z_][A-Za-z0-9_]*)\[\];/\2 *\3 = (\2 *)emu::dynamic_smem();/' \
        | awk '
    /^[ \t]*__shared__ / {
        i = index($0, ";")
        decl = substr($0, 1, i - 1)
        sub(/^[ \t]*__shared__ +(__align__\([0-9]+\) +)?/, "", decl)
        n = 0; depth = 0; piece = ""; calls = ""
        for (c = 1; c <= length(decl) + 1; c++) {
            ch = c <= length(decl) ? substr(decl, c, 1) : ","
            if (ch == "[" || ch == "(" || ch == "{") depth++
            if (ch == "]" || ch == ")" || ch == "}") depth--
            if (ch == "," && depth == 0) {
                sub(/[[=].*$/, "", piece)
                if (match(piece, /[A-Za-z_][A-Za-z0-9_]*[ \t]*$/)) {
                    name = substr(piece, RSTART, RLENGTH); sub(/[ \t]+$/, "", name)
                    calls = calls " emu::static_smem(&" name ", sizeof " name ", \"" name "\");"
                }
                piece = ""
            } else piece = piece ch
        }
        print substr($0, 1, i) calls substr($0, i + 1)
        next
    }
    { print }'
} >"$2.tmp"
if grep -n '<<<\|>>>' "$2.tmp" >&2; then
    echo "cu2cc.sh: $1: a launch above was not rewritten (keep 'kernel<<<...>>>(' on one line)" >&2
    rm -f "$2.tmp"
    exit 1
fi
mv "$2.tmp" "$2"
