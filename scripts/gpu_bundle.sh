#!/usr/bin/env bash
# Builds the CUDA binaries and the GPU suite on this machine (no GPU needed)
# and gathers them, with the non-system shared libraries they link, into
# .gpubundle/bundle.tar.gz (git-ignored; debug info stripped, so it carries
# well under 64 MiB), for a GPU machine that has the CUDA runtime and cuBLAS
# but not our Debian build dependencies. There, in the repository root:
#   tar xzf .gpubundle/bundle.tar.gz && export LD_LIBRARY_PATH=$PWD/gpulib
#   KVCPT_PREBUILT=1 bash scripts/gpu_session.sh
# With mpicc here the build has MPI (its libraries travel in gpulib; ranks
# need the GPU machine's mpirun), without it one rank only; KVCPT_BUNDLE_MPI=0
# forces the MPI-free build. kvcpt and the GPU suite are built without NCCL,
# so nothing in them needs libnccl (hundreds of MB, not carried). Where
# nccl.h is found here too (the Makefile's detection), the two NCCL tests
# are built a second time with NCCL into build/tests/nccl/, for the session's
# ranks stage on a machine with several GPUs and libnccl. The build runs in a
# temporary git worktree of HEAD plus the working tree's changes, so ./build
# is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wt=$(mktemp -d /tmp/kvcpt-gpubundle.XXXXXX)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$wt" HEAD
git diff HEAD | (cd "$wt" && git apply --allow-empty)
git ls-files --others --exclude-standard -z | xargs -0 -r -I{} cp --parents {} "$wt"/
mpi=NO_MPI=1
[ "${KVCPT_BUNDLE_MPI:-1}" != 0 ] && command -v mpicc >/dev/null 2>&1 && mpi=NO_MPI=0
log=/tmp/kvcpt-gpubundle.log
make -C "$wt" -j"$(nproc)" $mpi NO_NCCL=1 test-gpu-bins >$log 2>&1 || { tail -20 $log; exit 1; }
grep -m1 '^kvcpt build:' $log
stage=$wt/bundle
mkdir -p "$stage/gpulib" "$stage/build/tests"
# the programs only (build/tests/gpu also holds the tensor-core test's object file)
mkdir -p "$stage/build/tests/gpu" "$stage/build/tests/tools"
cp "$wt/kvcpt" "$stage/" && cp "$wt"/build/tests/gpu/test_* "$stage/build/tests/gpu/" &&
    cp "$wt"/build/tests/tools/* "$stage/build/tests/tools/"
# what the Makefile finds with NCCL allowed (captured first: grep -q would cut make's pipe under pipefail)
found=$(make -C "$wt" -n $mpi kvcpt 2>/dev/null | grep '^kvcpt build:' || true)
if [ $mpi = NO_MPI=0 ] && grep -q 'NCCL yes' <<<"$found"; then
    # the sources that read KVCPT_NCCL are rebuilt with it (make does not
    # track flags), then only the two NCCL tests are taken from this pass
    (cd "$wt" && git ls-files -z '*.c' '*.h' '*.cu' '*.cuh' | xargs -0 grep -lZ KVCPT_NCCL | xargs -0 touch)
    nccl_tests="build/tests/gpu/test_comm_nccl build/tests/gpu/test_nccl_collectives"
    make -C "$wt" -j"$(nproc)" $mpi $nccl_tests >>$log 2>&1 || { tail -20 $log; exit 1; }
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
echo "gpu bundle: .gpubundle/bundle.tar.gz, $(du -h .gpubundle/bundle.tar.gz | cut -f1) (libraries: $(ls "$stage/gpulib" | tr '\n' ' '))"
