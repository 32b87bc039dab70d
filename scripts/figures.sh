#!/usr/bin/env bash
# Prints the fingerprint of a documented result, made now by the code that
# made the figures; docs hold the same text and tests/repo/test_documented_figures.sh
# fails when the two differ (a change of numerics that moved the documented
# figures without the docs being regenerated).
#   scripts/figures.sh demo WORKDIR     launch/demo.sh at a reduced size, seed 1:
#                                      every policy's PPL and answer accuracies before -> after
#   scripts/figures.sh smollm2 WORKDIR  SmolLM2-135M on one book at L = 1024
#                                      (S = 50, K = 128): PPL of five variants
# Both run on OpenBLAS's Haswell kernels, which every x86-64 CPU with AVX2 and
# FMA runs: the BLAS core alone changes the bits (docs/results-demo.md), and
# kvcpt's own loops give the same bits on any x86-64 CPU (kernels/vector_math.h).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}; work=${2:-}
[ -n "$what" ] && [ -n "$work" ] || { echo "usage: scripts/figures.sh demo|smollm2 WORKDIR" >&2; exit 2; }
if ! grep -m1 '^flags' /proc/cpuinfo | grep -qw avx2; then
    echo "figures: this CPU has no AVX2, so OpenBLAS's Haswell kernels cannot run and the figures cannot be remade bit for bit" >&2
    exit 3
fi
export OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=1
mkdir -p "$work"
py=python3

# eval.json's rows as "policy | model | ppl [| first | rest]", %.9g: any change of bits shows
rows() { # eval.json, out dir (stripped from model paths)
    "$py" - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
out = sys.argv[2].rstrip("/") + "/"
for r in j["results"]:
    model = r.get("model", "")
    model = model[len(out):] if model.startswith(out) else model
    cells = [r["policy"], model, "%.9g" % r["ppl"] if r.get("ppl") is not None else "null"]
    a = r.get("answers")
    if a:
        cells += ["first %.9g" % a["first"]["top1_accuracy"], "rest %.9g" % a["rest"]["top1_accuracy"]]
    print(" | ".join(cells))
PY
}

case $what in
demo)
    sizes="L=128 S=16 STEPS_1=30 STEPS_2=20 STEPS_3=20 STEPS_4=20 CPT_STEPS=10 EVAL_DOCS=8 SEED=1"
    rm -rf "$work/demo"
    env $sizes OUT="$work/demo" launch/demo.sh >"$work/demo.log" 2>&1 ||
        { echo "figures: launch/demo.sh failed; its output is in $work/demo.log" >&2; tail -5 "$work/demo.log" >&2; exit 1; }
    echo "demo at a reduced size: $sizes launch/demo.sh, OPENBLAS_CORETYPE=Haswell"
    rows "$work/demo/eval/eval.json" "$work/demo"
    for e in "$work"/demo/eval-*/eval.json; do [ -f "$e" ] && rows "$e" "$work/demo"; done # the control arms
    ;;
smollm2)
    M=${KVCPT_REAL_MODEL:-third_party/models/smollm2-135m}
    [ -f "$M/model.safetensors" ] || { echo "figures: no SmolLM2 at $M (make setup)" >&2; exit 3; }
    rm -rf "$work/sm"
    mkdir -p "$work/sm"
    # the first two books of the corpus (Austen): the first long enough, of the train split
    { zstd -dc ../shared/corpus/books.jsonl.zst || true; } | head -2 >"$work/sm/books.jsonl" # zstd stops on head's exit
    [ "$(wc -l <"$work/sm/books.jsonl")" = 2 ] || { echo "figures: cannot read two books of ../shared/corpus/books.jsonl.zst" >&2; exit 1; }
    ./kvcpt prepare --input "$work/sm/books.jsonl" --tokenizer "$M/tokenizer.json" --min-tokens 1075 \
        --out "$work/sm/data" >"$work/sm/prepare.log" 2>&1 ||
        { echo "figures: prepare failed: $(tail -3 "$work/sm/prepare.log")" >&2; exit 1; }
    ./kvcpt eval --model "$M" --data "$work/sm/data" --split train --max-docs 1 --L 1024 --S 50 --K 128 \
        --policies full,streaming,snapkv,refreshkv --refresh-qc 5 --refresh-fixed 10 --quiet \
        --out "$work/sm/eval" >"$work/sm/eval.log" 2>&1 ||
        { echo "figures: eval failed: $(tail -3 "$work/sm/eval.log")" >&2; exit 1; }
    echo "SmolLM2-135M, the first train-split book of the first two of books.jsonl, L = 1024, S = 50, K = 128, OPENBLAS_CORETYPE=Haswell"
    rows "$work/sm/eval/eval.json" "$work/sm"
    ;;
*) echo "usage: scripts/figures.sh demo|smollm2 WORKDIR" >&2; exit 2 ;;
esac
