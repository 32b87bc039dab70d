#!/usr/bin/env bash
# Builds the CUDA binaries and the GPU suite on this machine (no GPU needed)
# and gathers them, with the non-system shared libraries they link, into
# .gpubundle/bundle.tar.gz (git-ignored; debug info stripped: 27.5 MB on
# 2026-11-28, of the 64 MiB a device command carries), for a GPU machine that has
# the CUDA runtime and cuBLAS but not our Debian build dependencies. The
# device command names .gpubundle in its carry list, and
# scripts/gpu_session.sh unpacks it there (kvcpt, build/tests/..., gpulib/).
# By default the build has neither MPI nor NCCL: the lent machines have one
# GPU, every single-GPU path runs without them (one rank's device
# collectives are copies on the GPU), and nothing then needs an MPI runtime
# or libnccl (hundreds of MB, not carried) on the GPU machine.
# KVCPT_BUNDLE_MPI=1 builds with MPI where mpicc is found here (its
# libraries travel in gpulib; ranks need the GPU machine's mpirun), and
# where nccl.h is found too (the Makefile's detection) the two NCCL tests
# a second time with NCCL into build/tests/nccl/, for the session's ranks
# stage on a machine with several GPUs and libnccl. The build runs in a
# temporary copy of the working tree (tracked and untracked, not ignored,
# files), so ./build is left alone. It builds for sm_90 alone (the
# Makefile's CUDA_ARCH), each .cu file once into build/libkvcpt.a, which
# every binary links, and only what scripts/gpu_session.sh runs (make
# test-gpu-bins: kvcpt, the GPU suite and the tools its scripts name); it
# prints the build's wall and CPU seconds and the load it ran under.
#   bash scripts/gpu_bundle.sh --commands
# prints the commands the default build would run (make -n -B in this
# tree; nothing is built), for tests/launch/test_gpu_bundle_commands.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
commit=$(git rev-parse --short=12 HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo +changes)
mpi=NO_MPI=1
[ "${KVCPT_BUNDLE_MPI:-0}" = 1 ] && command -v mpicc >/dev/null 2>&1 && mpi=NO_MPI=0
# sm_90 alone, named here so that a CUDA_ARCH in the environment (another
# card's build) does not reach the bundle: the lent cards are H100/H200
build_args=($mpi NO_NCCL=1 "CUDA_ARCH=-gencode arch=compute_90,code=sm_90" GIT_COMMIT="$commit" test-gpu-bins)
if [ "${1:-}" = --commands ]; then
    exec make -n -B "${build_args[@]}"
fi
wt=$(mktemp -d /tmp/kvcpt-gpubundle.XXXXXX)
trap 'rm -rf "$wt"' EXIT
# the files git would commit now (deleted ones left out), as they are on disk
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
    tar -cf - --null -T - | tar -xf - -C "$wt"
log=/tmp/kvcpt-gpubundle.log
# the children's user + sys seconds in a file of bash's times (its second
# line); times runs in this shell, as a subshell would count only its own
cpu_of() { awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.1f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$1"; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg) t0=$SECONDS
times >"$wt/.times0"
make -C "$wt" -j"$(nproc)" "${build_args[@]}" >$log 2>&1 || { tail -20 $log; exit 1; }
times >"$wt/.times1"
grep -m1 '^kvcpt build:' $log
cpu=$(awk -v a="$(cpu_of "$wt/.times0")" -v b="$(cpu_of "$wt/.times1")" 'BEGIN { printf "%.1f", b - a }')
echo "gpu bundle build: $((SECONDS - t0)) s wall, $cpu s CPU (user + sys) on $(nproc) cores; load average $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
stage=$wt/bundle
mkdir -p "$stage/gpulib" "$stage/build/tests"
# the programs only (build/tests/gpu also holds the tensor-core test's object file)
mkdir -p "$stage/build/tests/gpu" "$stage/build/tests/tools"
cp "$wt/kvcpt" "$stage/" && cp "$wt"/build/tests/gpu/test_* "$stage/build/tests/gpu/" &&
    cp "$wt"/build/tests/tools/* "$stage/build/tests/tools/"
# what the Makefile finds with NCCL allowed (captured first: grep -q would cut make's pipe under pipefail)
found=$(make -C "$wt" -n $mpi GIT_COMMIT="$commit" kvcpt 2>/dev/null | grep '^kvcpt build:' || true)
if [ $mpi = NO_MPI=0 ] && grep -q 'NCCL yes' <<<"$found"; then
    # the sources that read KVCPT_NCCL are rebuilt with it (make does not
    # track flags), then only the two NCCL tests are taken from this pass
    (cd "$wt" && git ls-files -z '*.c' '*.h' '*.cu' '*.cuh' | xargs -0 grep -lZ KVCPT_NCCL | xargs -0 touch)
    nccl_tests="build/tests/gpu/test_comm_nccl build/tests/gpu/test_nccl_collectives"
    make -C "$wt" -j"$(nproc)" $mpi GIT_COMMIT="$commit" $nccl_tests >>$log 2>&1 || { tail -20 $log; exit 1; }
    mkdir -p "$stage/build/tests/nccl"
    for t in $nccl_tests; do cp "$wt/$t" "$stage/build/tests/nccl/"; done
    echo "NCCL tests built with NCCL into build/tests/nccl (libnccl is not carried: the GPU machine must have it)"
else
    echo "no NCCL build of the NCCL tests: $([ $mpi = NO_MPI=1 ] && echo "no MPI" || echo "nccl.h not found")"
fi
# every library the binaries load, less glibc, the C++ runtime and CUDA's
# (the GPU machine's driver stack provides those)
for f in "$stage"/kvcpt "$stage"/build/tests/*/*; do ldd "$f"; done | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/gpulib/"; done
strip --strip-debug "$stage"/kvcpt "$stage"/build/tests/*/*
rm -rf .gpubundle && mkdir -p .gpubundle
tar czf .gpubundle/bundle.tar.gz -C "$stage" kvcpt build gpulib
size=$(stat -c %s .gpubundle/bundle.tar.gz)
echo "gpu bundle: .gpubundle/bundle.tar.gz in $SECONDS s, $size bytes ($((size >> 20)) MiB of the 64 MiB a device command carries; libraries: $(ls "$stage/gpulib" | tr '\n' ' '))"
[ "$size" -lt $((48 << 20)) ] || { echo "gpu bundle: $size bytes leaves too little of the 64 MiB for the working tree" >&2; exit 1; }
