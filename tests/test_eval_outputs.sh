#!/usr/bin/env bash
# What kvcpt eval writes, and when: --dump never replaces an input nor an
# earlier dump until its run succeeds; contexts, option values, --out and
# the model paths are checked before any model is loaded; eval.json keeps
# the contexts finished before a failure; a plot that was not drawn is not
# reported as written.
. "$(dirname "$0")/lib.sh"
$K prepare --synthetic recall --vocab 64 --doc-tokens 120 --query-tail 9 --docs 20 --out "$tmp/d" >/dev/null
$K train --set model=tiny --set data="$tmp/d" --set out="$tmp/r" --set steps=2 --set warmup_steps=0 --set L=48 \
    --set S=8 --set K=6 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 \
    || { fail "setup" "kvcpt train failed"; exit 1; }
ev=(eval --data "$tmp/d" --S 8 --K 6 --quiet --max-docs 1)

# a plot that cannot be drawn (eval.png is a directory): a warning, not "wrote", and still eval.json and exit 0
mkdir -p "$tmp/e_plot/eval.png"
if $K "${ev[@]}" --model "$tmp/r/model" --L 48 --out "$tmp/e_plot" >"$tmp/out" 2>"$tmp/err"; then
    if grep -q "wrote.*eval\.png" "$tmp/out"; then
        fail "undrawn plot" "reported as written: $(grep wrote "$tmp/out")"
    elif ! grep -q "eval.png was not drawn" "$tmp/err"; then
        fail "undrawn plot" "no warning: $(tail -2 "$tmp/err")"
    elif [ ! -s "$tmp/e_plot/eval.json" ]; then
        fail "undrawn plot" "no eval.json"
    else
        ok "eval.png not drawn: a warning instead of 'wrote', eval.json written, exit 0"
    fi
else
    fail "undrawn plot" "exited non-zero: $(tail -2 "$tmp/err")"
fi
if command -v gnuplot >/dev/null; then
    grep -q "wrote $tmp/e_plot/eval_steps.png" "$tmp/out" && ok "the per-step plot that was drawn is reported" \
        || fail "drawn plot" "not reported: $(cat "$tmp/out" | tail -3)"
else
    echo "skip - drawn plot reported: gnuplot is not installed"
fi
