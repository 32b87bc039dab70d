#!/usr/bin/env bash
# kvcpt eval's progress on stderr when stderr is not a terminal (a log):
# lines "eval [...] done/total tok  rate tok/s  elapsed m:ss  ETA m:ss doc
# i/N, what" (the first update at once, then at most one every 10 s, then
# the last), no carriage returns; --quiet prints none of them. Nothing here
# depends on how long the run takes: only the first and the last line are
# certain, so those are what is checked.
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/data" >/dev/null
$K train --set model=tiny --set data="$tmp/data" --set out="$tmp/r" --set L=48 --set S=8 --set K=6 --set steps=2 \
    --set warmup_steps=1 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 || { fail "train" "did not run"; exit 1; }
run() { # extra eval options...; stdout to $tmp/out, stderr to $tmp/err
    $K eval --model "$tmp/r/model" --data "$tmp/data" --L 40 --S 8 --max-docs 2 --batch 1 --policies full,streaming,h2o \
        --bootstrap 10 --out "$tmp/ev" "$@" >"$tmp/out" 2>"$tmp/err"
}
run && ok "eval runs with stderr in a file" || fail "eval" "$(tail -3 "$tmp/err")"
# 2 documents (the test split holds 2) x (40 prefill tokens + 7 steps x 3 variants) = 122 tokens
first=$(grep -m1 '^eval \[' "$tmp/err")
last=$(grep '^eval \[' "$tmp/err" | tail -1)
grep -qE '^eval \[[#.]{30}\] 0/122 tok  [0-9.]+ tok/s  elapsed [0-9]+:[0-9]{2}  ETA [0-9?:]+  doc 1/2, prefill of 40 tokens \(L = 40\)$' \
    <<<"$first" && ok "the first progress line: tokens, rate, elapsed, ETA, document 1 of 2 and its prefill" \
    || fail "first progress line" "'$first'"
grep -qE '^eval \[#{30}\] 122/122 tok  [0-9.]+ tok/s  elapsed [0-9]+:[0-9]{2}  ETA 0:00  2 document\(s\) at L = 40 done$' \
    <<<"$last" && ok "the last progress line: every token, 2 documents done" || fail "last progress line" "'$last'"
n=$(grep -c '^eval \[' "$tmp/err")
[ "$n" -ge 2 ] && ok "progress is whole lines on a log ($n lines)" || fail "progress lines" "$n"
if grep -q $'\r' "$tmp/err"; then fail "progress on a log" "carriage returns in stderr"; else ok "no carriage return on a log"; fi
if grep -q '^eval \[' "$tmp/out"; then fail "progress" "on stdout"; else ok "progress stays off stdout"; fi
cp "$tmp/ev/eval.json" "$tmp/loud.json"
run --quiet && ok "eval --quiet runs" || fail "eval --quiet" "$(tail -3 "$tmp/err")"
[ ! -s "$tmp/err" ] && ok "--quiet: nothing on stderr" || fail "--quiet" "stderr: $(head -3 "$tmp/err")"
# the progress is display only: the results are the same
/usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(p))["results"] for p in sys.argv[1:])
strip = lambda r: [{k: v for k, v in x.items() if k != "decode_ms_per_token"} for x in r]
sys.exit(strip(a) != strip(b))' "$tmp/loud.json" "$tmp/ev/eval.json" \
    && ok "--quiet changes no result" || fail "--quiet" "eval.json differs"
