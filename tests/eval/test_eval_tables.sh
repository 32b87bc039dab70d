#!/usr/bin/env bash
# eval's printed table says what its numbers are over (S in the title; L, K
# and the documents in each column's header), and a before -> after run
# shows the paired ratio after/before, the geometric mean over documents of
# each document's PPL ratio, with its 95% paired bootstrap interval, in the
# table and in eval.json (checked against the per-document PPLs eval.json
# holds); eval.png and eval_steps.png are drawn with intervals and a log
# axis (their scripts' details are tests/common/test_plot.c's).
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 120 --query-tail 9 --docs 20 --out "$tmp/d" >/dev/null
tr=(train --set model=tiny --set data="$tmp/d" --set warmup_steps=0 --set L=48 --set S=8 --set K=6
    --set global_batch=2 --set micro_batch=2)
# "after" trained harder, so that its documents' ratios differ from 1 and from each other
$K "${tr[@]}" --set out="$tmp/a" --set steps=1 >/dev/null 2>&1 && \
    $K "${tr[@]}" --set out="$tmp/b" --set steps=4 --set lr=0.05 >/dev/null 2>&1 \
    || { fail "setup" "kvcpt train failed"; exit 1; }
KVCPT_PLOT_SOURCES=1 $K eval --model "$tmp/a/model" --model "$tmp/b/model" --data "$tmp/d" --split dev --L 40,48 --S 8 --K 5 --quiet \
    --max-docs 4 --policies full,snapkv --out "$tmp/e" >"$tmp/out" 2>"$tmp/err" \
    || { fail "eval" "$(tail -2 "$tmp/err")"; exit 1; }
grep -q "PPL of the last S = 8 tokens" "$tmp/out" && grep -q "| L 40, K 5, 4 docs" "$tmp/out" \
    && grep -q "| L 48, K 5, 4 docs" "$tmp/out" \
    && ok "the table's title gives S, each column's header L, K and the documents" \
    || fail "table headers" "$(head -4 "$tmp/out")"
msg=$(/usr/bin/python3 - "$tmp/e/eval.json" "$tmp/out" <<'PY' 2>&1
import json, math, re, sys
res = json.load(open(sys.argv[1]))["results"]
table = open(sys.argv[2]).read()
before = {(r["policy"], r["context"]): r for r in res if r["model"].endswith("/a/model")}
n = 0
for r in res:
    if not r["model"].endswith("/b/model"):
        assert "ppl_ratio_to_before" not in r, "a before cell has a ratio"
        continue
    b = before[(r["policy"], r["context"])]
    logs = [math.log(x / y) for x, y in zip(r["ppl_per_document"], b["ppl_per_document"])]
    want = math.exp(sum(logs) / len(logs))
    got, (lo, hi) = r["ppl_ratio_to_before"], r["ppl_ratio_ci95"]
    assert abs(got - want) < 1e-9 * want, f"{r['policy']} L {r['context']}: ratio {got}, per documents {want}"
    assert abs(got - r["ppl"] / b["ppl"]) < 1e-9 * want, "ratio is not PPL after / PPL before"
    assert lo < got < hi and max(logs) - min(logs) > 1e-3, f"interval [{lo}, {hi}] around {got}, logs {logs}"
    # paired: no wider than the per-document ratios' range (an unpaired one
    # would carry the documents' spread of PPL)
    assert math.exp(min(logs)) <= lo and hi <= math.exp(max(logs)), f"[{lo}, {hi}] outside the ratios {logs}"
    cell = "%.3f -> %.3f x%.4f [%.4f, %.4f]" % (b["ppl"], r["ppl"], got, lo, hi)
    assert cell in table, f"table lacks '{cell}'"
    n += 1
assert n == 4, f"{n} after cells"
print("fine")
PY
)
[ "$msg" = fine ] && ok "before -> after: the paired ratio and its interval, in the table and eval.json, from the per-document PPLs" \
    || fail "paired ratio" "$msg"
if ! command -v gnuplot >/dev/null; then echo "skip - eval plots: gnuplot is not installed"; exit 0; fi
grep -q "wrote $tmp/e/eval.png" "$tmp/out" && grep -q "xerrorbars" "$tmp/e/eval.gp" \
    && ok "eval.png is drawn with the intervals as error bars" || fail "eval.png intervals" "$(grep eval.png "$tmp/out" "$tmp/err")"
grep -q "set logscale y" "$tmp/e/eval_steps.gp" && ok "eval_steps.png draws PPL on a log axis" \
    || fail "eval_steps.png axis" "no log scale in $tmp/e/eval_steps.gp"
