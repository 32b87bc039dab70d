#!/usr/bin/env bash
# Everything a session with a GPU should run first, with every log and
# figure under $OUT (default ./gpu_out). Stages, in order (default: all):
#   machine  what the machine has (GPU, nvcc, MPI, the libraries the CPU side
#            links, torch/transformers);
#   build    make -j kvcpt and the GPU tests (skipped with KVCPT_PREBUILT=1:
#            the binaries came from scripts/gpu_bundle.sh on another machine);
#   tests    the GPU suite once (tests/run.sh gpu), each test's log kept, and
#            the worst tolerance margins: kernel parity (ops, AdamW, attention
#            incl. the 8B layer at T = 16k/32k), the CUDA engine against the
#            CPU reference and against transformers;
#   bench    bench ops, bench adamw, bench model (small, 1B), and the 8B CPT
#            step (bf16 weights, recompute, T = 8242, L = 8192, K = 2048)
#            with its MFU and memory; bench attention (the kernels beside
#            PyTorch SDPA on the same 8B layer shapes);
#   train    a short `kvcpt train --set device=cuda` of the small preset, with
#            the optimizer on the host, on the device, and bf16sr;
#   eval     eval --device cuda against --device cpu on the trained model;
#   decode   bench decode at the 8B shape, 16k (and 128k with the memory);
#   ranks    one GPU per rank, when more than one GPU is visible (else it
#            says it was skipped and why): the NCCL tests (test_comm_nccl,
#            test_nccl_collectives) under `mpirun -np <GPUs>` with real NCCL,
#            and a short tiny-model `kvcpt train --set device=cuda` under
#            `mpirun -np <GPUs>` whose log.jsonl is compared with the
#            one-rank run's (scripts/rank_compare.sh), each rank's device
#            line kept. KVCPT_SESSION_KVCPT and KVCPT_SESSION_NCCL_TESTS
#            point it at other binaries (the emulated ones: build/emu/kvcpt,
#            build/tests/test_cuda_emu_*nccl*, with KVCPT_EMU_DEVICES=N).
# Each step has a time limit and the next one runs when one fails, so one
# device call gives every answer it can.
# Usage: bash scripts/gpu_session.sh [STAGE ...]
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(machine build tests bench train eval decode ranks)
jobs=$(nproc 2>/dev/null || echo 8)
step() { echo; echo "=== $1"; }
# each long command gets a limit so a hang cannot eat the whole device call
limit() { local s=$1; shift; timeout --kill-after=10 "$s" "$@"; local rc=$?; [ $rc -eq 124 ] && echo "TIMED OUT after ${s}s: $*"; return $rc; }

stage_machine() {
    step "machine"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | head -3
    command -v nvcc && nvcc --version | tail -2
    command -v mpicc || echo "no mpicc: building without MPI (and so without NCCL)"
    command -v mpirun || echo "no mpirun: the ranks stage cannot start ranks"
    ldconfig -p 2>/dev/null | grep -m1 'libnccl\.so' || echo "no libnccl in the loader's cache (LD_LIBRARY_PATH may still have it)"
    for h in jansson.h zstd.h pcre2.h cblas.h openssl/sha.h; do
        [ -n "$(find /usr/include /usr/local/include -path "*$h" 2>/dev/null | head -1)" ] && echo "have $h" || echo "MISSING $h"
    done
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -1
    ./kvcpt --version 2>&1
}

stage_build() {
    step "build"
    if [ "${KVCPT_PREBUILT:-0}" = 1 ]; then echo "prebuilt binaries (KVCPT_PREBUILT=1): not building"; return 0; fi
    # MPI and NCCL whenever mpicc and nccl.h are found (the Makefile's own detection)
    limit 900 make -j"$jobs" kvcpt test-gpu-bins >"$OUT/build.log" 2>&1 && echo "build ok" || { echo "BUILD FAILED"; tail -30 "$OUT/build.log"; }
    grep -m1 '^kvcpt build:' "$OUT/build.log"
}

stage_tests() {
    step "GPU test suite"
    KVCPT_TEST_LOGDIR="$OUT/tests" limit 420 bash tests/run.sh gpu >"$OUT/test-gpu.log" 2>&1
    grep -E "passed,|^    FAIL|^failed" "$OUT/test-gpu.log" | tail -25
    # the worst margins first (each test prints "# margin NAME: ... <number> ...")
    grep -h "^# margin\|^FAIL\|^# 8B" "$OUT"/tests/*.log 2>/dev/null | python3 -c '
import re, sys
rows = [(float(m.group(1)) if (m := re.search(r"(?:is|=|difference) ([-+0-9.eE]+)", l)) else float("inf"), l.rstrip()) for l in sys.stdin]
for v, l in sorted(rows, reverse=True)[:30]: print(l)'
}

stage_bench() {
    step "benchmarks"
    limit 120 ./kvcpt bench ops --json >"$OUT/bench-ops.json" 2>&1; tail -c 1500 "$OUT/bench-ops.json"; echo
    limit 120 ./kvcpt bench adamw --device cuda --json >"$OUT/bench-adamw.json" 2>&1; tail -2 "$OUT/bench-adamw.json"
    for seq in 1024 4096; do
        limit 60 ./kvcpt bench model --device cuda --preset small --seq $seq --json 2>&1 | tee -a "$OUT/bench-model.json"
        limit 60 ./kvcpt bench model --device cuda --preset small --seq $seq --L $((seq - 64)) --json 2>&1 | tee -a "$OUT/bench-model.json"
    done
    limit 120 ./kvcpt bench model --device cuda --preset llama3.2-1b --seq 2048 --json 2>&1 | tee -a "$OUT/bench-model.json"
    limit 120 ./kvcpt bench model --device cuda --preset llama3.2-1b --precision bf16 --seq 8192 --json 2>&1 | tee -a "$OUT/bench-model.json"
    # the headline step: 8B, bf16 weights, recompute, the CPT shape
    # (peak device memory: nvidia-smi sampled every 100 ms while it runs)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$OUT/bench-8b-memory.csv" 2>/dev/null &
    local smi=$!
    limit 300 ./kvcpt bench model --device cuda --preset llama3.1-8b --precision bf16 --recompute --seq 8242 --L 8192 \
        --K 2048 --steps 2 --warmup 1 --json 2>&1 | tee -a "$OUT/bench-model.json"
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    echo "8B step: peak device memory in use $(sort -n "$OUT/bench-8b-memory.csv" | tail -1) MiB (nvidia-smi, 100 ms samples)"
    # the attention kernels beside PyTorch SDPA (bf16, causal) on the same
    # shapes, in one run each: plain causal at 8k and 16k, and the CPT mask
    for args in "--seq 8192 --L 0" "--seq 16384 --L 0" "--seq 8242 --L 8192 --K 2048"; do
        # shellcheck disable=SC2086
        limit 240 ./kvcpt bench attention $args --json 2>&1 | tee -a "$OUT/bench-attention.json"
    done
    # the 8B step's model FLOP utilisation against the H100 SXM's dense bf16
    # peak (989 TFLOP/s; an assumption stated here, override with PEAK_TFLOPS)
    python3 - "$OUT/bench-model.json" "${PEAK_TFLOPS:-989}" <<'PY' 2>&1 | tee "$OUT/mfu.txt"
import json, sys
peak = float(sys.argv[2])
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if r.get("preset") != "llama3.1-8b" or "matmul_flops_per_step" not in r:
        continue
    step_s = (r["forward_ms"] + r["backward_ms"]) / 1e3
    flops = r["matmul_flops_per_step"] + r["attention_flops_per_step"]
    print(f"8B step T={r['seq']} ({r['precision']}, recompute {r['recompute']}): {r['tokens_per_s']:.0f} tokens/s, "
          f"{flops / step_s / 1e12:.1f} model TFLOP/s = MFU {100 * flops / step_s / 1e12 / peak:.1f}% of {peak:g}; "
          f"attention {100 * r['attention_flops_per_step'] / flops:.0f}% of the FLOPs; "
          f"engine {r['engine_mb'] / 1024:.1f} GiB, device in use {r['device_used_mb'] / 1024:.1f} GiB")
PY
}

stage_train() {
    step "train on the CUDA engine (small preset, synthetic recall data)"
    ./kvcpt prepare --synthetic recall --vocab 512 --doc-tokens 1100 --query-tail 40 --docs 400 --out "$OUT/data" >/dev/null 2>&1
    # host optimizer, then the optimizer on the device (fp32, then bf16 +
    # stochastic rounding): step times side by side, curves alike
    for mode in "optim_device=0" "optim_device=1" "precision=bf16sr"; do
        local name=train-${mode%%=*}-${mode##*=}
        limit 180 ./kvcpt train --set model=small --set data="$OUT/data" --set out="$OUT/$name" --set device=cuda \
            --set L=1024 --set S=64 --set K=128 --set global_batch=8 --set micro_batch=4 --set steps=30 --set lr=1e-3 \
            --set warmup_steps=5 --set "$mode" >"$OUT/$name.log" 2>&1
        echo "--- $mode"; tail -3 "$OUT/$name.log"
    done
}

stage_eval() {
    step "eval: the GPU decode engine against the CPU one"
    for d in cpu cuda; do
        limit 240 ./kvcpt eval --model "$OUT/train-optim_device-0/model" --data "$OUT/data" --L 1024 --S 32 --max-docs 8 \
            --device $d --refresh-qc 5 --out "$OUT/eval-$d" >"$OUT/eval-$d.log" 2>&1
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
}

stage_decode() {
    step "decode latency, 8B shape (bench decode)"
    limit 240 ./kvcpt bench decode --device cuda --preset llama3.1-8b --L 16384 --json 2>&1 | tee "$OUT/bench-decode.json"
    local mib
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
    if [ "${mib:-0}" -gt 120000 ]; then
        limit 240 ./kvcpt bench decode --device cuda --preset llama3.1-8b --L 131000 --steps 10 --json 2>&1 | tee -a "$OUT/bench-decode.json"
    else
        echo "skipping 128k: fp32 weights + caches + prefill activations need about 105 GB" | tee -a "$OUT/bench-decode.json"
    fi
}

# one NCCL test under mpirun -np N: its checks counted, each rank's device line shown
ranks_nccl_test() {
    local bin=$1 n=$2 name log missing
    name=$(basename "$bin") log="$OUT/ranks-$(basename "$bin")-$n.log"
    if [ ! -x "$bin" ]; then echo "--- $name: skipped, $bin is missing"; return 0; fi
    missing=$(ldd "$bin" 2>/dev/null | awk '/not found/{print $1}' | tr '\n' ' ')
    if [ -n "$missing" ]; then echo "--- $name: skipped, libraries not found: $missing(NCCL: a CUDA install's or pip's nvidia-nccl, on LD_LIBRARY_PATH)"; return 0; fi
    limit 300 mpirun -np "$n" "$bin" >"$log" 2>&1
    local rc=$? ok bad skip
    ok=$(grep -c '^ok - ' "$log"); bad=$(grep -c '^FAIL - ' "$log"); skip=$(grep -c '^skip - ' "$log")
    echo "--- $name on $n ranks: exit $rc, $ok ok, $bad FAIL, $skip skip"
    rank_placements "$log" | sed 's/^/    rank device bus: /'
    grep -m5 '^FAIL - \|^skip - \|emu nccl\|error' "$log" | sed 's/^/    /'
}

stage_ranks() {
    step "ranks: one GPU per rank under mpirun (NCCL), train against the one-rank run"
    local K=${KVCPT_SESSION_KVCPT:-./kvcpt} n
    . scripts/rank_compare.sh
    n=$("$K" --version 2>/dev/null | sed -nE 's/.*visible devices: ([0-9]+).*/\1/p')
    if [ "${n:-0}" -lt 2 ]; then
        echo "ranks stage skipped: $K sees ${n:-no} CUDA device(s); one rank per GPU needs two or more"; return 0
    fi
    if ! command -v mpirun >/dev/null 2>&1; then echo "ranks stage skipped: $n GPUs but no mpirun on this machine"; return 0; fi
    if ! "$K" --version | grep -q "collectives: single, mpi"; then
        echo "ranks stage skipped: $n GPUs but $K was built without MPI ($("$K" --version | grep collectives))"; return 0
    fi
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # the bundle's NCCL builds (build/tests/nccl) when there, else those of the build stage
    local tests=${KVCPT_SESSION_NCCL_TESTS:-} t
    if [ -z "$tests" ]; then
        for t in test_comm_nccl test_nccl_collectives; do
            if [ -x "build/tests/nccl/$t" ]; then tests+=" build/tests/nccl/$t"; else tests+=" build/tests/gpu/$t"; fi
        done
    fi
    for t in $tests; do ranks_nccl_test "$t" "$n"; done

    # tiny model, global batch 2 x GPUs micro-batches of 1: the same batch for 1 and N ranks
    local d="$OUT/ranks-train"
    rm -rf "$d" && mkdir -p "$d"
    "$K" prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 120 --out "$d/data" >"$d/prepare.log" 2>&1 ||
        { echo "prepare failed: $(tail -2 "$d/prepare.log")"; return 0; }
    cat >"$d/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$d/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": $((2 * n)), "micro_batch": 1, "steps": 5, "warmup_steps": 1, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 0, "eval_batches": 2, "ckpt_interval": 0, "keep_last": 1}
JSON
    limit 300 "$K" train --config "$d/cfg.json" --set out="$d/one" --set device=cuda >"$d/one.log" 2>&1
    echo "--- train, 1 rank: exit $?"; rank_placements "$d/one.log" | sed 's/^/    rank device bus: /'
    limit 300 mpirun -np "$n" "$K" train --config "$d/cfg.json" --set out="$d/n$n" --set device=cuda >"$d/n$n.log" 2>&1
    echo "--- train, $n ranks: exit $?"; rank_placements "$d/n$n.log" | sed 's/^/    rank device bus: /'
    grep -h 'CUDA device' "$d/one.log" "$d/n$n.log" >"$d/device-lines.txt"
    local devs
    devs=$(rank_placements "$d/n$n.log" | cut -d' ' -f2 | sort -u | wc -l)
    [ "$devs" = "$n" ] && echo "$n ranks on $n distinct devices" || echo "DEVICES: $n ranks on $devs distinct device(s)"
    if [ ! -s "$d/one/log.jsonl" ] || [ ! -s "$d/n$n/log.jsonl" ]; then
        echo "TRAIN FAILED: no log.jsonl; $(tail -3 "$d/n$n.log")"; return 0
    fi
    # what the sharded step moved (rank 0, last record): the collectives and the bus
    echo "$n ranks, last step: $(tail -1 "$d/n$n/log.jsonl" | grep -oE '"(gathers|gather_bytes|reduces|reduce_bytes|h2d_bytes|d2h_bytes|gpu_engine_mb|gpu_shard_mb|tokens_per_s)":[^,}]*' | tr '\n' ' ')"
    if diff <(rank_log_strip "$d/one") <(rank_log_strip "$d/n$n") >/dev/null; then
        echo "log.jsonl of $n ranks equals the one-rank run's, bit for bit ($(wc -l <"$d/one/log.jsonl") lines)"
    else
        # not bit-equal: how far apart the losses are (real cuBLAS may pick other algorithms per process)
        python3 - "$d/one/log.jsonl" "$d/n$n/log.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
worst = 0.0
for x, y in zip(a, b):
    for k in x:
        if "loss" in k and isinstance(x[k], (int, float)) and isinstance(y.get(k), (int, float)):
            rel = abs(x[k] - y[k]) / max(abs(x[k]), 1e-30)
            worst = max(worst, rel)
            print(f"step {x.get('step')} {k}: 1 rank {x[k]:.7g}, N ranks {y[k]:.7g}, rel {rel:.2e}")
print(("LOSSES DIFFER" if worst > 1e-4 or len(a) != len(b) else "losses close") + f": worst relative difference {worst:.2e}, {len(a)} vs {len(b)} lines")
PY
    fi
}

for s in "${stages[@]}"; do
    case "$s" in
    machine | build | tests | bench | train | eval | decode | ranks) "stage_$s" 2>&1 | tee -a "$OUT/session.log" ;;
    *) echo "gpu_session.sh: unknown stage '$s' (machine build tests bench train eval decode ranks)" >&2; exit 2 ;;
    esac
done
echo; echo "results in $OUT"
