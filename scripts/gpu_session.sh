#!/usr/bin/env bash
# Everything a session with a GPU should run first, in one command, with
# every log and figure under $OUT (default ./gpu_out):
#   1. what the machine has (GPU, nvcc, MPI, the Debian libraries the CPU
#      side links, cuDNN/NCCL in the Python environment);
#   2. the build (make -j), then `make test-gpu`: kernel parity (ops, AdamW,
#      attention incl. the 8B layer at T = 16k/32k), the whole CUDA engine
#      against the CPU reference, and against transformers (issue 6);
#   3. figures: bench ops, bench adamw, bench model on the CUDA engine, and
#      a short `kvcpt train --set device=cuda` of the small preset;
#   4. the decode engine (issue 10): eval --device cuda vs --device cpu on the
#      trained model, and the decode-latency table (bench decode, 8B shape at
#      16k, then 128k when the GPU has the memory).
# Each step goes on when an earlier one fails, so one device call gives
# every answer it can. Usage: bash scripts/gpu_session.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
step() { echo; echo "=== $1"; }
{
step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -3
command -v nvcc && nvcc --version | tail -2
command -v mpicc || echo "no mpicc: building without MPI (and so without NCCL)"
for h in jansson.h zstd.h pcre2.h cblas.h openssl/sha.h; do
    [ -n "$(find /usr/include /usr/local/include -name "$(basename $h)" -path "*$h" 2>/dev/null | head -1)" ] && echo "have $h" || echo "MISSING $h"
done
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -1
python3 - <<'PY' 2>/dev/null
import glob, os, site
for d in site.getsitepackages():
    for lib in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib"))):
        print("python nvidia lib:", lib)
PY
} 2>&1 | tee "$OUT/machine.txt"

step "build" | tee "$OUT/build.log"
jobs=$(nproc 2>/dev/null || echo 8)
make -j"$jobs" kvcpt >>"$OUT/build.log" 2>&1 && echo "build ok" | tee -a "$OUT/build.log" || { echo "BUILD FAILED"; tail -30 "$OUT/build.log"; }
./kvcpt --version 2>&1 | tee -a "$OUT/build.log"

step "make test-gpu"
make -j"$jobs" test-gpu >"$OUT/test-gpu.log" 2>&1
grep -E "passed,|^FAIL|^skip" "$OUT/test-gpu.log" | tail -20
for t in build/tests/gpu/test_*; do [ -x "$t" ] && "$t" >"$OUT/$(basename "$t").log" 2>&1; done
# the worst margins first (each test prints "# margin NAME: ... <number> ...")
grep -h "^# margin\|^FAIL" "$OUT"/test_*.log 2>/dev/null | python3 -c '
import re, sys
rows = [(float(m.group(1)) if (m := re.search(r"(?:is|=|difference) ([-+0-9.eE]+)", l)) else float("inf"), l.rstrip()) for l in sys.stdin]
for v, l in sorted(rows, reverse=True)[:25]: print(l)'


step "benchmarks"
./kvcpt bench ops --json >"$OUT/bench-ops.json" 2>&1; tail -3 "$OUT/bench-ops.json"
./kvcpt bench adamw --device cuda --json >"$OUT/bench-adamw.json" 2>&1; tail -2 "$OUT/bench-adamw.json"
for seq in 1024 4096; do
    ./kvcpt bench model --device cuda --preset small --seq $seq --json 2>&1 | tee -a "$OUT/bench-model.json"
    ./kvcpt bench model --device cuda --preset small --seq $seq --L $((seq - 64)) --json 2>&1 | tee -a "$OUT/bench-model.json"
done
./kvcpt bench model --device cuda --preset llama3.2-1b --seq 2048 --json 2>&1 | tee -a "$OUT/bench-model.json"

step "train on the CUDA engine (small preset, synthetic recall data)"
./kvcpt prepare --synthetic recall --vocab 512 --doc-tokens 1100 --query-tail 40 --docs 400 --out "$OUT/data" >/dev/null 2>&1
./kvcpt train --set model=small --set data="$OUT/data" --set out="$OUT/train" --set device=cuda --set L=1024 \
    --set S=64 --set K=128 --set global_batch=8 --set micro_batch=4 --set steps=30 --set lr=1e-3 \
    --set warmup_steps=5 >"$OUT/train.log" 2>&1
tail -4 "$OUT/train.log"
# the same run with the optimizer on the device (fp32, then bf16 + stochastic
# rounding): step times against the host-optimizer run above, curves alike
for mode in "optim_device=1" "precision=bf16sr"; do
    ./kvcpt train --set model=small --set data="$OUT/data" --set out="$OUT/train-${mode%%=*}" --set device=cuda \
        --set L=1024 --set S=64 --set K=128 --set global_batch=8 --set micro_batch=4 --set steps=30 --set lr=1e-3 \
        --set warmup_steps=5 --set "$mode" >"$OUT/train-${mode%%=*}.log" 2>&1
    tail -2 "$OUT/train-${mode%%=*}.log"
done

step "eval: the GPU decode engine against the CPU one (issue 10)"
for d in cpu cuda; do
    ./kvcpt eval --model "$OUT/train/model" --data "$OUT/data" --context 1024 --last 32 --max-docs 8 --device $d \
        --refresh-qc 5 --out "$OUT/eval-$d" >"$OUT/eval-$d.log" 2>&1
    tail -14 "$OUT/eval-$d.log"
done
python3 - "$OUT" <<'PY' 2>&1 | tee "$OUT/eval-compare.txt"
import json, sys
o = sys.argv[1]
c, g = ({(r["policy"], r["context"]): r for r in json.load(open(f"{o}/eval-{d}/eval.json"))["results"]} for d in ("cpu", "cuda"))
for k in c:
    print(f"{k[0]:48s} ppl cpu {c[k]['ppl']:.6f} cuda {g[k]['ppl']:.6f} rel {abs(g[k]['ppl'] - c[k]['ppl']) / c[k]['ppl']:.2e}"
          f"  ms/token cpu {c[k]['decode_ms_per_token']:.2f} cuda {g[k]['decode_ms_per_token']:.2f}")
PY

step "decode latency, 8B shape (bench decode)"
./kvcpt bench decode --device cuda --preset llama3.1-8b --context 16384 --json 2>&1 | tee "$OUT/bench-decode.json"
gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
if [ "${gib:-0}" -gt 120000 ]; then
    ./kvcpt bench decode --device cuda --preset llama3.1-8b --context 131072 --steps 10 --json 2>&1 | tee -a "$OUT/bench-decode.json"
else
    echo "skipping 128k: fp32 weights + caches + prefill activations need about 105 GB" | tee -a "$OUT/bench-decode.json"
fi
echo; echo "results in $OUT"
