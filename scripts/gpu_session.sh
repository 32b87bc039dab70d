#!/usr/bin/env bash
# The measurements a session with a GPU runs first, as two device commands
# that fit the device budget (docs/benchmarks.md, "how the bundle reaches
# the GPU machine and in what order the 15 minutes are spent"):
#   bash scripts/gpu_session.sh call1    # the GPU suite, attention vs SDPA, the 8B step
#   bash scripts/gpu_session.sh call2    # real model, train/eval/bench/decode smoke, ranks
#   bash scripts/gpu_session.sh STAGE... # chosen stages (names below)
#   bash scripts/gpu_session.sh --dry-run call1 call2
#                                        # the whole plan at tiny sizes on the emulated GPU
#                                        # (build/emu/kvcpt, build/tests/test_cuda_emu_*)
#   bash scripts/gpu_session.sh --plan call1
#                                        # the stages, their limits and the budget; nothing run
# Stages, each with its own time limit (seconds, the second column of
# STAGES below); a stage whose limit does not fit in what is left of the
# command's budget is skipped and says so, so the limits add up to at most
# the budget (KVCPT_SESSION_BUDGET; default 500 s for call1, 260 s for
# call2, 540 s otherwise; the device tool stops a command at 600 s; a dry
# run multiplies limits and budget by KVCPT_SESSION_DRY_SCALE, default 4):
#   setup      what the machine has (GPU, driver, nvcc, MPI, NCCL, python3
#              with torch/transformers, libraries the binaries miss), and
#              the binaries: .gpubundle/bundle.tar.gz unpacked when present
#              (scripts/gpu_bundle.sh builds it before the GPU starts; the
#              device command names it in carry), else ./kvcpt as built;
#   tests      the GPU suite once (tests/run.sh gpu), each test's log kept,
#              the worst tolerance margins;
#   attention  `kvcpt bench attention`: the bf16 engine's tensor-core kernels
#              beside PyTorch SDPA (flash, bf16) at the 8B layer shape, T =
#              8242 with the CPT mask and T = 16384 causal, TFLOP/s and ratio;
#   step8b     the 8B CPT step (T 8242, L 8192, K 2048), bf16 weights, with
#              the least recompute that `kvcpt plan` says fits the card
#              (`kvcpt bench model`: forward + backward, tokens/s, MFU, memory);
#   step8b_sr  the same as training steps (`kvcpt train`, precision bf16sr:
#              the optimizer on the device, no separate master, the one
#              setting that fits an 80 GB card by arithmetic), stopped once
#              its timed steps are logged (the final 32 GB model is not saved);
#   train      a short `kvcpt train --set device=cuda` of the small preset:
#              sharded on one GPU (optim_device=0), optimizer on the device,
#              bf16sr; curves alike, step times side by side;
#   eval       eval --device cuda against --device cpu on that model;
#   bench      bench ops, bench adamw, bench model (1B, bf16, T 8192);
#   decode     bench decode, Llama-3.2-1B at 16k (the 8B's fp32 weights take
#              longer to make and upload than the stage has);
#   realmodel  SmolLM2-135M, launch/realmodel.sh with DEVICE=cuda at the
#              paper's setting (L = 8192, S = 50, K = L/8) on the long test
#              documents: every policy before CPT, CPT of the mask arm and its
#              causal control (one seed, steps sized to the stage's time),
#              every policy after. The model travels as GGUF parts
#              (scripts/gpu_model_parts.sh split; 93 MB is more than one
#              command carries): each command that carries a part
#              (KVCPT_SESSION_PARTS, default .gpumodel) stages it first, and
#              this stage joins the parts, checks them and converts the model
#              once all are staged; KVCPT_REAL_MODEL names a converted model
#              instead. Skipped, saying so, when neither is there;
#   ranks      one GPU per rank under mpirun, when more than one GPU is
#              visible (else it says why it was skipped): the NCCL tests and a
#              tiny-model train compared with the one-rank run
#              (scripts/rank_compare.sh). KVCPT_SESSION_KVCPT and
#              KVCPT_SESSION_NCCL_TESTS point it at other binaries (the
#              emulated ones, with KVCPT_EMU_DEVICES=N).
# What comes back: the device tool returns at most 8 files from $OUT, so a
# command writes two: $OUT/NAME-summary.md (every stage's figures, appended
# as each line lands) and $OUT/NAME-logs.tar.gz (every log and JSON, packed
# again after each stage), NAME being call1, call2 or "stages". Logs are
# written under $KVCPT_SESSION_WORK/NAME (default /tmp/kvcpt-gpu-session).
# A command stopped at its limit still leaves both, up to the last stage.
# KVCPT_PYTHON picks the peers' interpreter; else third_party/venv/bin/python
# or python3, the first that imports torch.
set -u
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0") # each stage runs it again
cd "$(dirname "$0")/.."
root=$PWD
dry=0
if [ "${1:-}" = --dry-run ]; then dry=1; shift; fi
print_plan=0
if [ "${1:-}" = --plan ]; then print_plan=1; shift; fi
[ $# -eq 0 ] && set -- call1

# name, limit in seconds
STAGES="setup 25
tests 190
attention 60
step8b 100
step8b_sr 120
realmodel 150
train 75
eval 60
bench 50
decode 50
ranks 120"
CALL1="setup tests attention step8b step8b_sr"
CALL2="setup realmodel train eval bench decode ranks"
# the emulated GPU of a dry run is far slower than a card, on cores that are
# often shared: its limits (and budget) are these times SCALE
scale=1
[ $dry = 1 ] && scale=${KVCPT_SESSION_DRY_SCALE:-4}
stage_limit() { awk -v s="$1" -v k="$scale" '$1 == s { print $2 * k }' <<<"$STAGES"; }

name=stages stages=()
for a in "$@"; do
    case "$a" in
    call1) name=call1; read -ra s <<<"$CALL1"; stages+=("${s[@]}") ;;
    call2) name=call2; read -ra s <<<"$CALL2"; stages+=("${s[@]}") ;;
    *)
        if [ -z "$(stage_limit "$a")" ]; then
            echo "gpu_session.sh: unknown stage '$a' (call1, call2, $(awk '{ printf "%s ", $1 }' <<<"$STAGES"))" >&2
            exit 2
        fi
        stages+=("$a") ;;
    esac
done
[ $# -gt 1 ] && [ "$name" != stages ] && name=calls
case $name in call1) budget_default=500 ;; call2) budget_default=260 ;; *) budget_default=540 ;; esac
BUDGET=${KVCPT_SESSION_BUDGET:-$((budget_default * scale))}
if [ $print_plan = 1 ]; then # the stages, their limits and their sum, nothing run
    total=0
    for s in "${stages[@]}"; do l=$(stage_limit "$s"); total=$((total + l)); echo "$s $l"; done
    echo "total $total budget $BUDGET"
    exit 0
fi
OUT=${OUT:-$root/gpu_out}
# a stage runs in a process of its own (below), in its parent's directory
one_stage=${KVCPT_SESSION_ONE_STAGE:-}
[ -n "$one_stage" ] && name=$KVCPT_SESSION_NAME
WORK=${KVCPT_SESSION_WORK:-/tmp/kvcpt-gpu-session}/$name
mkdir -p "$OUT" "$WORK"
SUMMARY=$OUT/$name-summary.md
TARBALL=$OUT/$name-logs.tar.gz
[ -z "$one_stage" ] && : >"$SUMMARY"
# seconds kept back at the end for the last packing
RESERVE=10

# the sizes: the real shapes, or tiny ones on the emulated GPU
if [ $dry = 1 ]; then
    K=$root/build/emu/kvcpt
    [ -x "$K" ] || { echo "gpu_session.sh --dry-run: $K is not built (make test-bins)" >&2; exit 1; }
    P8=tiny T8=72 L8=64 K8=8 S8=8 V8=64 STEPS8="--steps 1 --warmup 1" SR_STEPS=2
    ATT_SHAPE="--batch 1 --heads 4 --kv-heads 2 --head-dim 16 --reps 1"
    ATT_RUNS=("--seq 40 --L 32 --K 4" "--seq 48 --L 0")
    SMALL=tiny SMALL_L=48 SMALL_S=8 SMALL_K=6 SMALL_STEPS=1 SMALL_VOCAB=64 SMALL_DOC=57 SMALL_GB=1 SMALL_MB=1 EVAL_DOCS=1
    DECODE="--preset tiny --L 64 --steps 2"
    # the emulated suite: one quick test binary through the same runner,
    # the tensor-core one (the rest of the suite is not run in a dry run)
    MMA_RE='^test_cuda_emu_mma$'
    TESTS_CMD=(bash tests/run.sh cpu)
else
    K=$root/kvcpt
    P8=llama3.1-8b T8=8242 L8=8192 K8=2048 S8=50 V8=512 STEPS8="--steps 2 --warmup 1" SR_STEPS=3
    ATT_SHAPE=""
    ATT_RUNS=("--seq 8242 --L 8192 --K 2048" "--seq 16384 --L 0")
    SMALL=small SMALL_L=1024 SMALL_S=64 SMALL_K=128 SMALL_STEPS=30 SMALL_VOCAB=512 SMALL_DOC=1100 SMALL_GB=8 SMALL_MB=4 EVAL_DOCS=4
    # the 1B: the 8B's fp32 weights take longer to make and upload than the stage has (2026-11-23: 8B figures)
    DECODE="--preset llama3.2-1b --L 16384 --steps 10"
    # the tensor-core tests (the matrix instructions, the attention kernels)
    MMA_RE='^gpu/test_(mma|attention_mma)$'
    TESTS_CMD=(env KVCPT_TEST_TIMEOUT=150 bash tests/run.sh gpu)
fi

# the peers' python: KVCPT_PYTHON, else the first that imports torch
if [ -z "${KVCPT_PYTHON:-}" ]; then
    for p in "$root/third_party/venv/bin/python" python3; do
        if "$p" -c 'import torch' >/dev/null 2>&1; then export KVCPT_PYTHON=$p; break; fi
    done
fi
PY=${KVCPT_PYTHON:-python3}

# CUDA's own libraries (cudart, cuBLAS; NCCL and cuDNN where pip put them):
# a CUDA install's lib64 (/usr/local/cuda*/lib64, KVCPT_SESSION_CUDA_ROOTS
# the glob) first, then the lib directories of the nvidia wheels of the
# python above (site-packages/nvidia/*/lib: torch's cu13 wheels bring
# cuDNN and NCCL there), each once; the choice is said in the summary
cuda_lib_dirs() {
    local d pkg seen=" "
    # prints DIR unless the directory it resolves to was printed already
    # (seen, the caller's local, holds the resolved paths)
    lib_dir_once() {
        local real
        real=$(readlink -f "$1")
        [[ $seen == *" $real "* ]] && return 0
        seen+="$real "
        echo "$1"
    }
    for d in ${KVCPT_SESSION_CUDA_ROOTS:-/usr/local/cuda*}; do
        [ -d "$d/lib64" ] && lib_dir_once "$d/lib64"
    done
    # the nvidia namespace package's directories, as that python resolves them
    for pkg in $("$PY" -c 'import nvidia, os; print(*[os.path.realpath(p) for p in nvidia.__path__])' 2>/dev/null); do
        for d in "$pkg"/*/lib; do
            [ -d "$d" ] && lib_dir_once "$d"
        done
    done
    return 0
}
# "DIR (libA libB ...)" for each directory: the libraries a reader looks for
cuda_lib_note() {
    local d libs
    for d in "$@"; do
        libs=$(ls "$d" 2>/dev/null | sed -nE 's/^(lib(cudart|cublas|cublasLt|nccl|cudnn))\.so.*/\1/p' | sort -u | tr '\n' ' ')
        printf '%s (%s) ' "$d" "${libs% }"
    done
}
if [ -z "$one_stage" ]; then
    mapfile -t libdirs < <(cuda_lib_dirs)
    if [ ${#libdirs[@]} -gt 0 ]; then
        libpath=$(IFS=:; echo "${libdirs[*]}")
        export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        LIB_NOTE="CUDA libraries on LD_LIBRARY_PATH, in this order: $(cuda_lib_note "${libdirs[@]}")"
        case "${libdirs[0]}" in
        */lib64) LIB_NOTE+="(a CUDA install's lib64 first)" ;;
        *) LIB_NOTE+="(no ${KVCPT_SESSION_CUDA_ROOTS:-/usr/local/cuda*}/lib64: the python's nvidia wheels, $PY)" ;;
        esac
    else
        LIB_NOTE="CUDA libraries: no ${KVCPT_SESSION_CUDA_ROOTS:-/usr/local/cuda*}/lib64 and no nvidia/*/lib in $PY's site-packages; the loader's own paths"
    fi
fi

# the binaries from scripts/gpu_bundle.sh, when carried here (each command
# unpacks them again: a fresh machine has only the repository's copy)
bundled=${bundled:-0}
if [ -z "$one_stage" ] && [ $dry = 0 ] && [ -f .gpubundle/bundle.tar.gz ]; then
    tar xzf .gpubundle/bundle.tar.gz && export LD_LIBRARY_PATH=$root/gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    bundled=1
fi

# the tensor-core attention's verdict: when the tests stage sees its tests
# fail it leaves this file, and every later stage (of this command, or of
# the next on the same machine) runs with KVCPT_ATTN=cuda-core
ATTN_FALLBACK=${KVCPT_SESSION_WORK:-/tmp/kvcpt-gpu-session}/attn-fallback
# the real model's parts, as carried (PARTS) and as gathered over the calls
# (MODEL_STAGE, beside the calls' work directories: it outlives each call
# while the machine stays warm), and the model they convert to
PARTS=${KVCPT_SESSION_PARTS:-.gpumodel}
MODEL_STAGE=${KVCPT_SESSION_WORK:-/tmp/kvcpt-gpu-session}/model-parts
REAL_MODEL=${KVCPT_REAL_MODEL:-${KVCPT_SESSION_WORK:-/tmp/kvcpt-gpu-session}/smollm2-135m}

say() { echo "$*" | tee -a "$SUMMARY"; }
# each long command gets a limit inside its stage's (--foreground: in the
# stage's process group, so the stage's own limit reaches it too)
limit() {
    local s=$(($1 * scale))
    shift
    timeout --foreground --kill-after=5 "$s" "$@"
    local rc=$?
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "TIMED OUT after ${s}s: $*"
    return $rc
}
pack() { tar czf "$TARBALL.tmp" -C "$WORK" . 2>/dev/null && mv -f "$TARBALL.tmp" "$TARBALL"; }
# the card's memory in bytes (nvidia-smi), or the emulated device's
device_bytes() {
    local mib
    mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
    if [ -n "$mib" ]; then echo $((mib * 1024 * 1024)); else echo $((80 * 1024 * 1024 * 1024)); fi
}
# peak memory in use while a command runs (nvidia-smi every 100 ms), into FILE
smi_start() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null & smi_pid=$!; }
smi_stop() {
    kill "$smi_pid" 2>/dev/null
    wait "$smi_pid" 2>/dev/null
    [ -s "$1" ] && echo "peak device memory in use $(sort -n "$1" | tail -1) MiB (nvidia-smi, 100 ms samples)"
}

stage_setup() {
    echo "date $(date -u +%FT%TZ), dry run $dry, binaries: $([ $bundled = 1 ] && echo ".gpubundle/bundle.tar.gz" || echo "as built here")"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | head -3 | grep -v 'not found' ||
        echo "no nvidia-smi"
    command -v nvcc >/dev/null && nvcc --version | tail -1
    echo "cores $(nproc), memory $(free -g 2>/dev/null | awk '/^Mem/ { print $2 " GiB" }'), disk free $(df -h . | awk 'NR == 2 { print $4 }')"
    command -v mpirun >/dev/null || echo "no mpirun: the ranks stage cannot start ranks"
    ldconfig -p 2>/dev/null | grep -m1 'libnccl\.so' || echo "no libnccl in the loader's cache"
    limit 15 "$PY" -c "import torch, transformers; print('python', '$PY', 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tail -1
    local f missing
    for f in "$K" build/tests/gpu/test_*; do
        [ -x "$f" ] || continue
        missing=$(ldd "$f" 2>/dev/null | awk '/not found/ { print $1 }' | tr '\n' ' ')
        [ -n "$missing" ] && echo "MISSING LIBRARIES for $f: $missing"
    done
    if [ ! -x "$K" ]; then echo "NO BINARY: $K (run scripts/gpu_bundle.sh before the GPU starts and carry .gpubundle)"; return 1; fi
    "$K" --version 2>&1
}

stage_tests() {
    # the tensor-core tests first: the bf16 engine's attention runs on those
    # kernels, and when they fail the later stages take the CUDA-core ones
    # (KVCPT_SESSION_MMA_TEST: another program in their place, the dry run's stand-in)
    local mma_cmd rc
    if [ -n "${KVCPT_SESSION_MMA_TEST:-}" ]; then mma_cmd=("$KVCPT_SESSION_MMA_TEST")
    else mma_cmd=(env KVCPT_TESTS="$MMA_RE" "${TESTS_CMD[@]}"); fi
    rm -f "$ATTN_FALLBACK"
    KVCPT_TEST_LOGDIR="$WORK/tests" "${mma_cmd[@]}" 2>&1 | tee "$WORK/test-mma.log" |
        grep --line-buffered -E "passed,|^    FAIL|^FAIL|^failed"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -ne 0 ]; then
        echo "the tensor-core tests failed (exit $rc)" >"$ATTN_FALLBACK"
        echo "MMA TESTS FAILED (exit $rc): the later stages run with KVCPT_ATTN=cuda-core (the CUDA-core attention kernels)"
    else
        echo "the tensor-core tests passed: the later stages run the bf16 engine's attention on tensor cores (mma)"
    fi
    if [ $dry = 0 ]; then
        KVCPT_TESTS_EXCLUDE="$MMA_RE" KVCPT_TEST_LOGDIR="$WORK/tests" "${TESTS_CMD[@]}" 2>&1 | tee "$WORK/test-gpu.log" |
            grep --line-buffered -E "passed,|^    FAIL|^failed"
    else echo "the rest of the GPU suite: not run in a dry run"; fi
    # the worst margins first (each test prints "# margin NAME: ... <number> ...")
    grep -h "^# margin\|^# 8B" "$WORK"/tests/*.log 2>/dev/null | python3 -c '
import re, sys
rows = [(float(m.group(1)) if (m := re.search(r"(?:is|=|difference) ([-+0-9.eE]+)", l)) else float("inf"), l.rstrip()) for l in sys.stdin]
for v, l in sorted(rows, reverse=True)[:15]: print(l)'
}

stage_attention() {
    local args
    for args in "${ATT_RUNS[@]}"; do
        # shellcheck disable=SC2086
        limit 28 "$K" bench attention $ATT_SHAPE $args --json >>"$WORK/bench-attention.json" 2>"$WORK/bench-attention.err"
        echo >>"$WORK/bench-attention.json" # a run stopped mid-line leaves the next its own line
        tail -2 "$WORK/bench-attention.err" | grep -v '^bench attention: running'
    done
    python3 - "$WORK/bench-attention.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    try:
        r = json.loads(line)
    except ValueError:
        print(f"a run stopped before its figures were all out: {line.strip()[:400]}")
        continue
    mask = f"mask L {r['mask_L']} K {r['mask_K']}" if r["mask_L"] else "causal"
    s = (f"attention T {r['seq']} {mask}: bf16 attention {r.get('bf16_attn', '?')} fwd {r.get('bf16_forward_ms', 0):.3f} ms "
         f"({r.get('bf16_forward_tflops', 0):.1f} TFLOP/s), bwd {r.get('bf16_backward_ms', 0):.3f} ms "
         f"({r.get('bf16_backward_tflops', 0):.1f}); fp32 fwd {r['fp32_forward_ms']:.1f} ms, bwd {r['fp32_backward_ms']:.1f} ms; "
         f"select {r['select_ms']:.3f} ms")
    if r.get("torch_forward_ms") is not None:
        each = [f"{k} fwd {v['forward_ms']:.3f} ms bwd {v['backward_ms']:.3f} ms" if "error" not in v else f"{k} refused: {v['error'][:120]}"
                for k, v in r.get("torch_sdpa_backends", {}).items()]
        backend = f" (default backend {r['torch_sdpa_backend']}; {', '.join(each)})" if "torch_sdpa_backend" in r else " (backend not reported)"
        s += (f"; SDPA {r['torch_version']}{backend} fwd {r['torch_forward_ms']:.3f} ms ({r['torch_forward_tflops']:.1f}), "
              f"bwd {r['torch_backward_ms']:.3f} ms ({r['torch_backward_tflops']:.1f}); "
              f"bf16/SDPA rate fwd {r.get('bf16_vs_sdpa_forward', 0):.3f}, bwd {r.get('bf16_vs_sdpa_backward', 0):.3f}")
    else:
        s += f"; no SDPA figures: {r.get('torch_why', '?')[:200]}"
    print(s)
PY
}

# the least recompute (none, attn, else full) with which `kvcpt plan` fits PRECISION on
# this card; bench=1 counts only what `bench model` allocates: the whole
# engine (bf16sr's layout) without its optimizer states
fitting_recompute() {
    local precision=$1 bench=$2 mem r
    mem=$(device_bytes)
    [ "$bench" = 1 ] && precision=bf16sr
    for r in none attn full; do
        if "$K" plan --engine cuda --preset "$P8" --precision "$precision" --recompute $r \
            --seq "$T8" --L "$L8" --K "$K8" --ranks 1 --gpu-mem "$mem" --json 2>/dev/null |
            python3 -c '
import json, sys
p = json.load(sys.stdin)[0]
need = p["total"] - (p["optim"] if sys.argv[1] == "1" else 0)
sys.exit(0 if need <= 0.97 * p["gpu_mem"] else 1)' "$bench"; then
            echo "$r"
            return 0
        fi
    done
    echo no
}

stage_step8b() {
    local r
    r=$(fitting_recompute bf16 1)
    echo "8B step, bf16 weights: recompute $r fits $(($(device_bytes) >> 30)) GiB by kvcpt plan (engine only)"
    [ "$r" = no ] && { echo "skipped: no recompute setting fits"; return 0; }
    smi_start "$WORK/step8b-memory.csv"
    limit 90 "$K" bench model --device cuda --preset "$P8" --precision bf16 --recompute "$r" \
        --seq "$T8" --L "$L8" --K "$K8" $STEPS8 --no-peers --json >"$WORK/step8b.json" 2>"$WORK/step8b.err"
    smi_stop "$WORK/step8b-memory.csv"
    tail -2 "$WORK/step8b.err"
    # MFU against the H100 SXM's dense bf16 peak (989 TFLOP/s; PEAK_TFLOPS overrides)
    python3 - "$WORK/step8b.json" "${PEAK_TFLOPS:-989}" <<'PY'
import json, sys
peak = float(sys.argv[2])
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    step_s = (r["forward_ms"] + r["backward_ms"]) / 1e3
    flops = r["matmul_flops_per_step"] + r["attention_flops_per_step"]
    print(f"8B step T={r['seq']} ({r['precision']}, recompute {r['recompute']}): {r['tokens_per_s']:.0f} tokens/s, "
          f"fwd {r['forward_ms']:.0f} ms, bwd {r['backward_ms']:.0f} ms, {flops / step_s / 1e12:.1f} model TFLOP/s = "
          f"MFU {100 * flops / step_s / 1e12 / peak:.1f}% of {peak:g}; engine {r['engine_mb'] / 1024:.1f} GiB, "
          f"device in use {r['device_used_mb'] / 1024:.1f} GiB")
PY
}

stage_step8b_sr() {
    local r d=$WORK/step8b-sr
    r=$(fitting_recompute bf16sr 0)
    echo "8B training steps, bf16sr: recompute $r fits $(($(device_bytes) >> 30)) GiB by kvcpt plan"
    [ "$r" = no ] && { echo "skipped: no recompute setting fits"; return 0; }
    rm -rf "$d" && mkdir -p "$d"
    "$K" prepare --synthetic recall --vocab $V8 --doc-tokens $((T8 + 1)) --query-tail $((T8 / 4 < 40 ? T8 / 4 : 40)) --docs 16 --out "$d/data" \
        >"$d/prepare.log" 2>&1 || { echo "prepare failed: $(tail -2 "$d/prepare.log")"; return 0; }
    smi_start "$WORK/step8b-sr-memory.csv"
    # stopped once SR_STEPS steps are logged: the final model (32 GB of fp32) is not what is measured
    "$K" train --set model="$P8" --set init=random --set data="$d/data" --set out="$d/run" --set device=cuda \
        --set L="$L8" --set S="$S8" --set K="$K8" --set mask=1 --set global_batch=1 --set micro_batch=1 --set steps=100 \
        --set warmup_steps=1 --set lr=1e-5 --set precision=bf16sr --set recompute="$r" --set eval_interval=0 \
        --set ckpt_interval=0 >"$d/train.log" 2>&1 &
    local pid=$! t=0
    while kill -0 $pid 2>/dev/null && [ "$(cat "$d/run/log.jsonl" 2>/dev/null | wc -l)" -lt "$SR_STEPS" ] && [ $t -lt 1100 ]; do
        sleep 0.1
        t=$((t + 1))
    done
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    smi_stop "$WORK/step8b-sr-memory.csv"
    grep -m3 "device memory\|CUDA device\|error\|die" "$d/train.log"
    [ -s "$d/run/log.jsonl" ] && cp "$d/run/log.jsonl" "$WORK/step8b-sr-log.jsonl"
    grep -oE '"(step|loss|tokens_per_s|gpu_engine_mb)":[^,}]*' "$d/run/log.jsonl" 2>/dev/null | paste -sd' ' | sed 's/"step"/\n"step"/g' | sed '/^$/d'
    rm -rf "$d/data" "$d/run/model"
}

stage_train() {
    "$K" prepare --synthetic recall --vocab $SMALL_VOCAB --doc-tokens $SMALL_DOC --query-tail 9 --docs 400 --out "$WORK/data" >/dev/null 2>&1
    # sharded on one GPU (copies on the device, no NCCL), the optimizer on the
    # device (fp32, then bf16 + stochastic rounding): curves alike
    local mode
    for mode in "optim_device=0" "optim_device=1" "precision=bf16sr"; do
        local n=train-${mode%%=*}-${mode##*=}
        limit 24 "$K" train --set model=$SMALL --set data="$WORK/data" --set out="$WORK/$n" --set device=cuda \
            --set L=$SMALL_L --set S=$SMALL_S --set K=$SMALL_K --set global_batch=$SMALL_GB --set micro_batch=$SMALL_MB \
            --set steps=$SMALL_STEPS --set lr=1e-3 --set warmup_steps=1 --set eval_interval=0 --set "$mode" >"$WORK/$n.log" 2>&1
        echo "--- $mode: exit $?"
        tail -2 "$WORK/$n.log"
    done
}

stage_eval() {
    local d
    for d in cpu cuda; do
        limit 28 "$K" eval --model "$WORK/train-optim_device-0/model" --data "$WORK/data" --L $SMALL_L --S 8 --max-docs $EVAL_DOCS \
            --device $d --refresh-qc 5 --out "$WORK/eval-$d" >"$WORK/eval-$d.log" 2>&1
        echo "--- eval --device $d: exit $?"
    done
    python3 - "$WORK" <<'PY'
import json, sys
o = sys.argv[1]
c, g = ({(r["policy"], r["context"]): r for r in json.load(open(f"{o}/eval-{d}/eval.json"))["results"]} for d in ("cpu", "cuda"))
worst = max(abs(g[k]["ppl"] - c[k]["ppl"]) / c[k]["ppl"] for k in c)
for k in c:
    print(f"{k[0]:40s} ppl cpu {c[k]['ppl']:.6f} cuda {g[k]['ppl']:.6f}  ms/token cpu {c[k]['decode_ms_per_token']:.2f} "
          f"cuda {g[k]['decode_ms_per_token']:.2f}")
print(f"worst relative PPL difference cuda vs cpu {worst:.2e} over {len(c)} policies")
PY
}

stage_bench() {
    if [ $dry = 1 ]; then
        limit 40 "$K" bench model --device cuda --preset tiny --seq 48 --steps 1 --warmup 1 --no-peers --json 2>&1 |
            tee "$WORK/bench-model.json" | grep '^{'
        return 0
    fi
    limit 15 "$K" bench ops --json >"$WORK/bench-ops.json" 2>&1; tail -c 600 "$WORK/bench-ops.json"; echo
    limit 10 "$K" bench adamw --device cuda --json >"$WORK/bench-adamw.json" 2>&1; tail -1 "$WORK/bench-adamw.json"
    limit 20 "$K" bench model --device cuda --preset llama3.2-1b --precision bf16 --seq 8192 --no-peers --json 2>&1 |
        tee -a "$WORK/bench-model.json" | grep '^{'
}

stage_decode() {
    # shellcheck disable=SC2086
    limit 45 "$K" bench decode --device cuda $DECODE --json 2>&1 | tee "$WORK/bench-decode.json" | grep '^{' | cut -c1-300
}

stage_realmodel() {
    local m=$REAL_MODEL corpus=../shared/corpus rc
    if [ ! -f "$m/model.safetensors" ] && [ -z "${KVCPT_REAL_MODEL:-}" ] && [ -f "$MODEL_STAGE/manifest.tsv" ]; then
        limit 40 bash scripts/gpu_model_parts.sh join --stage "$MODEL_STAGE" --to "$m" --kvcpt "$K" 2>&1 ||
            { echo "realmodel not run: the model's parts in $MODEL_STAGE are not all there and sound (above)"; return 1; }
    fi
    if [ ! -f "$m/model.safetensors" ]; then
        echo "realmodel skipped: no $m/model.safetensors and no staged parts (carry .gpumodel's calls: docs/benchmarks.md)"
        return 0
    fi
    compgen -G "$MODEL_STAGE/corpus/*.jsonl.zst" >/dev/null && corpus=$MODEL_STAGE/corpus
    # CPT steps from the time the stage leaves them: at the expected rate
    # (docs/benchmarks.md: ~20k tokens/s for SmolLM2 at T = 8242 on an
    # H100-class card, a tenth of the 8B forecast scaled by FLOPs) the 2 x
    # 8242-token steps of each arm take about 1 s; the rest of the stage is
    # the conversion, prepare and three evals. The log's tokens/s replaces
    # the estimate.
    local tps=${KVCPT_REAL_TOKENS_PER_S:-20000} cpt_s=${KVCPT_REAL_CPT_S:-40} sizes steps
    if [ $dry = 1 ]; then
        sizes=(CONTEXTS=32 S=8 EVAL_DOCS=1 QC=5 CPT_BATCH=1 CPT_LR=1e-3 CPT_STEPS=1)
    else
        steps=$((cpt_s / 2 * tps / (2 * (8192 + 50))))
        [ $steps -ge 1 ] || steps=1
        sizes=(CONTEXTS=8192 S=50 EVAL_DOCS=2 QC=5 CPT_BATCH=2 CPT_STEPS=$steps CPT_CKPT=$(((steps + 1) / 2)))
        echo "realmodel: CPT $steps steps per arm of 2 x 8242 tokens ($((steps * 2 * 8242)) tokens), sized for $((cpt_s / 2)) s an arm at $tps tokens/s"
    fi
    # (the stage's own output is $WORK/realmodel.log: the launcher's is beside it)
    limit 105 env "${sizes[@]}" OUT="$WORK/realmodel" MODEL="$m" CORPUS="$corpus" KVCPT="$K" DEVICE=cuda ARMS=mask,causal \
        SEEDS=1 bash launch/realmodel.sh >"$WORK/realmodel-launch.log" 2>&1
    rc=$?
    echo "launch/realmodel.sh ($(echo "${sizes[@]}") DEVICE=cuda ARMS=mask,causal SEEDS=1, model $m, corpus $corpus): exit $rc"
    local a
    for a in mask causal; do
        grep -oE '"(step|loss|tokens_per_s)":[^,}]*' "$WORK/realmodel/cpt-$a-seed1/log.jsonl" 2>/dev/null | paste -sd' ' |
            sed 's/"step"/\n"step"/g' | sed '/^$/d' | tail -1 | sed "s/^/CPT $a, last step: /"
    done
    # each arm's before -> after, and the mask arm over the causal one
    sed -n '/^### L = /,$p' "$WORK/realmodel/cpt-summary.md" 2>/dev/null | head -40
    [ $rc -eq 0 ] || tail -5 "$WORK/realmodel-launch.log"
    return $rc
}

# one NCCL test under mpirun -np N: its checks counted, each rank's device line shown
ranks_nccl_test() {
    local bin=$1 n=$2 tname log missing
    tname=$(basename "$bin") log="$WORK/ranks-$(basename "$bin")-$n.log"
    if [ ! -x "$bin" ]; then echo "--- $tname: skipped, $bin is missing"; return 0; fi
    missing=$(ldd "$bin" 2>/dev/null | awk '/not found/{print $1}' | tr '\n' ' ')
    if [ -n "$missing" ]; then echo "--- $tname: skipped, libraries not found: $missing(NCCL: a CUDA install's or pip's nvidia-nccl, on LD_LIBRARY_PATH)"; return 0; fi
    limit 50 mpirun -np "$n" "$bin" >"$log" 2>&1
    local rc=$? ok bad skip
    ok=$(grep -c '^ok - ' "$log"); bad=$(grep -c '^FAIL - ' "$log"); skip=$(grep -c '^skip - ' "$log")
    echo "--- $tname on $n ranks: exit $rc, $ok ok, $bad FAIL, $skip skip"
    rank_placements "$log" | sed 's/^/    rank device bus: /'
    grep -m5 '^FAIL - \|^skip - \|emu nccl\|error' "$log" | sed 's/^/    /'
}

stage_ranks() {
    local KR=${KVCPT_SESSION_KVCPT:-$K} n
    . scripts/rank_compare.sh
    n=$("$KR" --version 2>/dev/null | sed -nE 's/.*visible devices: ([0-9]+).*/\1/p')
    if [ "${n:-0}" -lt 2 ]; then
        echo "ranks stage skipped: $KR sees ${n:-no} CUDA device(s); one rank per GPU needs two or more"; return 0
    fi
    if ! command -v mpirun >/dev/null 2>&1; then echo "ranks stage skipped: $n GPUs but no mpirun on this machine"; return 0; fi
    if ! "$KR" --version | grep -q "collectives: single, mpi"; then
        echo "ranks stage skipped: $n GPUs but $KR was built without MPI ($("$KR" --version | grep collectives)); KVCPT_BUNDLE_MPI=1 bash scripts/gpu_bundle.sh builds with it"; return 0
    fi
    [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # the bundle's NCCL builds (build/tests/nccl) when there, else those of the build
    local tests=${KVCPT_SESSION_NCCL_TESTS:-} t
    if [ -z "$tests" ]; then
        for t in test_comm_nccl test_nccl_collectives; do
            if [ -x "build/tests/nccl/$t" ]; then tests+=" build/tests/nccl/$t"; else tests+=" build/tests/gpu/$t"; fi
        done
    fi
    for t in $tests; do ranks_nccl_test "$t" "$n"; done

    # tiny model, global batch 2 x GPUs micro-batches of 1: the same batch for 1 and N ranks
    local d="$WORK/ranks-train"
    rm -rf "$d" && mkdir -p "$d"
    "$KR" prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 120 --out "$d/data" >"$d/prepare.log" 2>&1 ||
        { echo "prepare failed: $(tail -2 "$d/prepare.log")"; return 0; }
    cat >"$d/cfg.json" <<JSON
{"model": "tiny", "init": "random", "data": "$d/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": $((2 * n)), "micro_batch": 1, "steps": 5, "warmup_steps": 1, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 0, "eval_batches": 2, "ckpt_interval": 0, "keep_last": 1}
JSON
    limit 30 "$KR" train --config "$d/cfg.json" --set out="$d/one" --set device=cuda >"$d/one.log" 2>&1
    echo "--- train, 1 rank: exit $?"; rank_placements "$d/one.log" | sed 's/^/    rank device bus: /'
    limit 30 mpirun -np "$n" "$KR" train --config "$d/cfg.json" --set out="$d/n$n" --set device=cuda >"$d/n$n.log" 2>&1
    echo "--- train, $n ranks: exit $?"; rank_placements "$d/n$n.log" | sed 's/^/    rank device bus: /'
    local devs
    devs=$(rank_placements "$d/n$n.log" | cut -d' ' -f2 | sort -u | wc -l)
    [ "$devs" = "$n" ] && echo "$n ranks on $n distinct devices" || echo "DEVICES: $n ranks on $devs distinct device(s)"
    if [ ! -s "$d/one/log.jsonl" ] || [ ! -s "$d/n$n/log.jsonl" ]; then
        echo "TRAIN FAILED: no log.jsonl; $(tail -3 "$d/n$n.log")"; return 0
    fi
    if diff <(rank_log_strip "$d/one") <(rank_log_strip "$d/n$n") >/dev/null; then
        echo "log.jsonl of $n ranks equals the one-rank run's, bit for bit ($(wc -l <"$d/one/log.jsonl") lines)"
    else
        echo "LOGS DIFFER: $n ranks against one (real cuBLAS may pick other algorithms per process): $d/one/log.jsonl, $d/n$n/log.jsonl"
    fi
}

if [ -n "$one_stage" ]; then
    if [ -f "$ATTN_FALLBACK" ] && [ "$one_stage" != setup ] && [ "$one_stage" != tests ]; then
        export KVCPT_ATTN=cuda-core
        echo "KVCPT_ATTN=cuda-core: $(cat "$ATTN_FALLBACK") in the tests stage, so this stage's bf16 attention runs on the CUDA-core kernels"
    fi
    "stage_$one_stage"
    exit $?
fi

# the card's clocks, power and throttle reasons (before and after each
# measured stage: a slow figure from a throttled or power-capped card says
# so); newer drivers name the reasons clocks_event_reasons
GPU_STATE_FIELDS=clocks.sm,clocks.mem,power.draw,power.limit,clocks_throttle_reasons.active,temperature.gpu
MEASURED=" attention step8b step8b_sr train bench decode "
gpu_state() {
    local out
    out=$(nvidia-smi --query-gpu=$GPU_STATE_FIELDS --format=csv 2>&1) ||
        out=$(nvidia-smi --query-gpu=${GPU_STATE_FIELDS/clocks_throttle_reasons/clocks_event_reasons} --format=csv 2>&1) ||
        out="no figures: $(head -1 <<<"$out")"
    say "gpu state $1: $(paste -sd';' <<<"$out")"
}

# Runs stage $1 under its limit $2 as a session of its own; when it ends
# (done or stopped), whatever it started and left behind (a test runner's
# own timeouts make process groups of their own) is ended with it.
run_stage() {
    local s=$1 lim=$2 sidfile=$WORK/.sid rc sid
    rm -f "$sidfile"
    KVCPT_SESSION_ONE_STAGE=$s KVCPT_SESSION_NAME=$name bundled=$bundled \
        setsid bash -c 'ps -o sid= -p $$ | tr -d " " >"$1"; shift; exec timeout --kill-after=5 "$@"' _ "$sidfile" \
        "$lim" bash "$self" $([ $dry = 1 ] && echo --dry-run) "$s" </dev/null 2>&1 | tee -a "$WORK/$s.log" "$SUMMARY"
    rc=${PIPESTATUS[0]}
    sid=$(cat "$sidfile" 2>/dev/null)
    if [ -n "$sid" ] && [ "$sid" != "$(ps -o sid= -p $$ | tr -d ' ')" ]; then pkill -KILL -s "$sid" 2>/dev/null; fi
    return "$rc"
}

t_start=0 # the budget counts from the command's start (SECONDS), the python search included
say "# GPU session $name ($(date -u +%FT%TZ)$([ $dry = 1 ] && echo ", dry run on the emulated GPU"))"
say "stages: ${stages[*]}; budget ${BUDGET}s"
say "$LIB_NOTE"
[ -n "${KVCPT_ATTN:-}" ] && say "KVCPT_ATTN=$KVCPT_ATTN (from the environment)"
# the real model's parts this command carries, staged for the realmodel stage
if [ -f "$PARTS/manifest.tsv" ]; then
    say "$(bash scripts/gpu_model_parts.sh add --from "$PARTS" --stage "$MODEL_STAGE" 2>&1)"
fi
for s in "${stages[@]}"; do
    lim=$(stage_limit "$s")
    left=$((BUDGET - (SECONDS - t_start) - RESERVE))
    say ""
    if [ "$lim" -gt "$left" ]; then
        say "## $s: skipped, its limit ${lim}s is more than the ${left}s left of the budget"
        continue
    fi
    say "## $s (limit ${lim}s, $(date -u +%T))"
    t0=$SECONDS
    export OUT
    [[ $MEASURED == *" $s "* ]] && gpu_state "before $s"
    run_stage "$s" "$lim"
    rc=$?
    [[ $MEASURED == *" $s "* ]] && gpu_state "after $s"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then say "STAGE $s TIMED OUT after ${lim}s"; fi
    say "($s: exit $rc, $((SECONDS - t0))s)"
    cp "$SUMMARY" "$WORK/summary.md"
    pack
done
say ""
say "done in $((SECONDS - t_start))s of ${BUDGET}s: $SUMMARY, $TARBALL"
cp "$SUMMARY" "$WORK/summary.md"
pack
