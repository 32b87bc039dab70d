#!/usr/bin/env bash
# Output paths are data, never code: an `out` directory whose name carries a
# shell quote break-out or a gnuplot one (train's loss.png, eval's eval.png)
# runs no command, and the PNGs are still rendered inside that directory.
set -u
cd "$(dirname "$0")/.."
K=./kvcpt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/data" >/dev/null
have_gnuplot=0; command -v gnuplot >/dev/null && have_gnuplot=1

check() { # name out-dir marker png
    local name=$1 dir=$2 marker=$3 png=$4
    if [ -e "$marker" ]; then fail "$name" "a command in the path ran ($marker exists)"; return; fi
    if [ "$have_gnuplot" = 1 ] && [ ! -s "$dir/$png" ]; then fail "$name" "$dir/$png was not rendered"; return; fi
    ok "$name"
}

for kind in shell gnuplot; do
    if [ $kind = shell ]; then tr="$tmp/t';touch $tmp/PWNED_train;'"; ev="$tmp/e';touch $tmp/PWNED_eval;'x"
    else tr="$tmp/t'; system 'touch $tmp/PWNED_train'; '"; ev="$tmp/e'; system 'touch $tmp/PWNED_eval'; 'x"; fi
    $K train --set model=tiny --set data="$tmp/data" --set out="$tr" --set L=48 --set S=8 --set K=6 --set steps=2 --set warmup_steps=1 \
        --set global_batch=2 --set micro_batch=2 >"$tmp/train.log" 2>&1 || { fail "train, $kind quote in out" "$(tail -3 "$tmp/train.log")"; continue; }
    check "train with a $kind quote break-out in out runs nothing, plots inside it" "$tr" "$tmp/PWNED_train" loss.png
    $K eval --model "$tr/model" --data "$tmp/data" --context 48 --last 8 --max-docs 2 --policies full,streaming \
        --out "$ev" >"$tmp/eval.log" 2>&1 || { fail "eval, $kind quote in out" "$(tail -3 "$tmp/eval.log")"; continue; }
    check "eval with a $kind quote break-out in out runs nothing, plots inside it" "$ev" "$tmp/PWNED_eval" eval.png
    rm -f "$tmp/PWNED_train" "$tmp/PWNED_eval"
done
