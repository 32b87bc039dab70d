#!/usr/bin/env bash
# Builds the CUDA binaries and the GPU suite on this machine (no GPU needed)
# and gathers them, with the non-system shared libraries they link, into
# .gpubundle/bundle.tar.gz (git-ignored; debug info stripped, so it carries
# well under 64 MiB), for a GPU machine that has the CUDA runtime and cuBLAS
# but not our Debian build dependencies. There, in the repository root:
#   tar xzf .gpubundle/bundle.tar.gz && export LD_LIBRARY_PATH=$PWD/gpulib
#   KVCPT_PREBUILT=1 bash scripts/gpu_session.sh
# The build is MPI-free (one rank) and runs in a temporary git worktree of
# HEAD plus the working tree's changes, so ./build is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wt=$(mktemp -d /tmp/kvcpt-gpubundle.XXXXXX)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$wt" HEAD
git diff HEAD | (cd "$wt" && git apply --allow-empty)
git ls-files --others --exclude-standard -z | xargs -0 -r -I{} cp --parents {} "$wt"/
make -C "$wt" -j"$(nproc)" NO_MPI=1 test-gpu-bins >/tmp/kvcpt-gpubundle.log 2>&1 || { tail -20 /tmp/kvcpt-gpubundle.log; exit 1; }
stage=$wt/bundle
mkdir -p "$stage/gpulib" "$stage/build/tests"
cp "$wt/kvcpt" "$stage/" && cp -r "$wt/build/tests/gpu" "$wt/build/tests/tools" "$stage/build/tests/"
# every library the binaries load, less glibc, the C++ runtime and CUDA's
# (the GPU machine's driver stack provides those)
for f in "$stage"/kvcpt "$stage"/build/tests/*/*; do ldd "$f"; done | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/gpulib/"; done
strip --strip-debug "$stage"/kvcpt "$stage"/build/tests/*/*
rm -rf .gpubundle && mkdir -p .gpubundle
tar czf .gpubundle/bundle.tar.gz -C "$stage" kvcpt build gpulib
echo "gpu bundle: .gpubundle/bundle.tar.gz, $(du -h .gpubundle/bundle.tar.gz | cut -f1) (libraries: $(ls "$stage/gpulib" | tr '\n' ' '))"
