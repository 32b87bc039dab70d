#!/usr/bin/env bash
# scripts/gpu_bundle.sh --commands: the bundle's build as make would run it
# (nothing is built, so this is cheap and needs no nvcc). Every nvcc line
# asks for sm_90 alone (no other real or virtual architecture, no nvcc
# default, no relocatable device code, device LTO or device debug), each .cu
# file is compiled once (the binaries link the one library), and the
# programs linked are exactly those scripts/gpu_session.sh runs: kvcpt,
# every GPU test (tests/run.sh gpu runs build/tests/gpu/test_*) and the
# tools that the GPU suite's scripts and the session name.
. "$(dirname "$0")/../lib.sh" || exit 1
# nvcc where it is, else its usual path: make -n runs no compiler, and
# without nvcc the Makefile would leave CUDA out
export NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if ! bash scripts/gpu_bundle.sh --commands >"$tmp/cmds" 2>"$tmp/err"; then
    fail "gpu_bundle.sh --commands" "$(tail -5 "$tmp/err")"
    exit 0
fi

# the nvcc lines: the architectures each names, each source it compiles
awk -v nvcc="$NVCC" '$1 == nvcc' "$tmp/cmds" >"$tmp/nvcc"
bad_arch="" no_arch="" bad_flag=""
while IFS= read -r line; do
    src=$(grep -oE '[^ ]+\.cu( |$)' <<<"$line" | xargs)
    archs=$(grep -oE -- '(-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code)[= ][^ ]+' <<<"$line" |
        grep -oE '(compute|sm|lto)_[0-9]+[a-z]?|native|all-major|all' | sort -u | tr '\n' ' ')
    [ -z "$archs" ] && no_arch+=" $src"
    for a in $archs; do
        case $a in compute_90 | sm_90) ;; *) bad_arch+=" $src:$a" ;; esac
    done
    grep -qE -- ' (-rdc|--relocatable-device-code|-dc|--device-c|-dlto|-G|--device-debug)( |=|$)' <<<"$line" && bad_flag+=" $src"
done <"$tmp/nvcc"
n_nvcc=$(wc -l <"$tmp/nvcc")
if [ "$n_nvcc" -gt 0 ] && [ -z "$bad_arch$no_arch$bad_flag" ]; then
    ok "gpu bundle: all $n_nvcc nvcc lines ask for sm_90 alone (compute_90 -> sm_90), no -rdc, device LTO or -G"
else fail "gpu bundle nvcc architectures" "$n_nvcc nvcc lines; other architectures:${bad_arch:- none}; none named:${no_arch:- none}; -rdc/-dlto/-G:${bad_flag:- none}"; fi

twice=$(grep -oE '[^ ]+\.cu( |$)' "$tmp/nvcc" | sort | uniq -d | xargs)
if [ -z "$twice" ]; then
    ok "gpu bundle: each .cu file compiled once, into the objects every program links"
else fail "gpu bundle .cu compiles" "compiled more than once: $twice"; fi

# the programs the build links (an -o that is not an object) against those the plan runs
linked=$(grep -oE -- ' -o [^ ]+' "$tmp/cmds" | cut -d' ' -f3 | grep -v '\.o$' | sort -u)
want=$( (echo kvcpt
    for c in tests/gpu/test_*.c; do c=${c##*/}; echo "build/tests/gpu/${c%.c}"; done
    cat tests/gpu/test_*.sh scripts/gpu_session.sh | grep -oE 'build/tests/tools/[A-Za-z0-9_]+') | sort -u)
if [ "$linked" = "$want" ]; then
    ok "gpu bundle: links exactly the $(wc -l <<<"$want") programs the GPU plan runs (kvcpt, the GPU suite, the tools its scripts run)"
else
    fail "gpu bundle programs" "not run by the plan: $(comm -23 <(echo "$linked") <(echo "$want") | xargs);\
 run but not built: $(comm -13 <(echo "$linked") <(echo "$want") | xargs)"
fi
