#!/usr/bin/env bash
# scripts/demo_seeds.py's table across seeds, on eval.json files written
# here with known PPLs (no demo is run): mean and sd per policy and model,
# the after/before ratio with its 95% t-interval, RefreshKV against SnapKV,
# the provenance line, a cell missing from one seed, and the top-1 accuracy
# tables of answer-marking data (first / rest, after − before, RefreshKV −
# SnapKV in percentage points).
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${PYTHON:-python3}
mk() { # seed, then "policy|stage|ppl[|first|rest]" lines on stdin (top-1 accuracies of the answers)
    mkdir -p "$tmp/s/seed$1/eval"
    "$PY" -c "
import json, sys
res = []
for line in sys.stdin.read().split():
    p, st, v, *a = line.split('|')
    r = {'policy': p.replace('_', ' '), 'model': 'runs/x/' + ('cpt' if st == 'after' else 'pretrain') + '/model',
         'ppl': float(v)}
    if a:
        # the answers' PPL: 1 / accuracy, so the expected means and ratios follow by hand
        r['answers'] = {'first': {'top1_accuracy': float(a[0]), 'ppl': 1 / float(a[0])},
                        'rest': {'top1_accuracy': float(a[1]), 'ppl': 1 / float(a[1])},
                        'none': {'top1_accuracy': 0.0}}
    res.append(r)
json.dump({'device': 'cpu', 'commit': 'abc123', 'blas': {'core': 'Haswell', 'blas_threads': 1, 'omp_threads': 2},
           'results': res}, open('$tmp/s/seed$1/eval/eval.json', 'w'))"
}
printf '%s\n' 'full|before|1.0' 'full|after|1.0' 'snapkv_(window_1)|before|100|0.1|0.2' 'snapkv_(window_1)|after|10|0.2|0.3' \
    'refreshkv_(fixed_stride_10)|before|2|0.5|0.6' 'refreshkv_(fixed_stride_10)|after|1|0.6|0.6' | mk 1
printf '%s\n' 'full|before|1.2' 'full|after|1.2' 'snapkv_(window_1)|before|400|0.2|0.2' 'snapkv_(window_1)|after|40|0.3|0.2' \
    'refreshkv_(fixed_stride_10)|before|4|0.4|0.6' 'refreshkv_(fixed_stride_10)|after|2|0.5|0.7' | mk 2
printf '%s\n' 'full|before|1.1' 'snapkv_(window_1)|before|200|0.3|0.2' 'snapkv_(window_1)|after|20|0.4|0.1' \
    'refreshkv_(fixed_stride_10)|before|2|0.6|0.6' 'refreshkv_(fixed_stride_10)|after|1|0.7|0.5' | mk 3

out=$("$PY" scripts/demo_seeds.py --seeds 1,2,3 --out "$tmp/s" --no-run 2>&1) && rc=0 || rc=$?
[ "$rc" = 0 ] && [ -f "$tmp/s/summary.md" ] && [ -f "$tmp/s/summary.json" ] && ok "demo_seeds --no-run writes summary.md and summary.json" ||
    fail "demo_seeds run" "exit $rc: $out"
check=$("$PY" - "$tmp/s/summary.json" <<'PY'
import json, math, statistics, sys
j = json.load(open(sys.argv[1]))
e = []
snap = j["policies"]["snapkv (window 1)"]
if abs(snap["before"]["mean"] - 700 / 3) > 1e-9 or abs(snap["before"]["sd"] - statistics.stdev([100, 400, 200])) > 1e-9:
    e.append("snapkv before mean/sd %r" % snap["before"])
d = snap["ln_after_minus_before"]  # every seed exactly a tenth: no spread
if abs(d["mean"] - math.log(0.1)) > 1e-12 or abs(d["ci95"][0] - d["ci95"][1]) > 1e-9:
    e.append("snapkv after/before %r" % d)
full = j["policies"]["full"]
if full["after"]["ppl"] != [1.0, 1.2] or len(full["ln_after_minus_before"]["per_seed"]) != 2:
    e.append("full: the seed without an after cell should drop out of the pairs %r" % full)
r = j["paired"]["refreshkv (fixed stride 10)"]["before"]  # ln(2/100), ln(4/400), ln(2/200)
want = [math.log(0.02), math.log(0.01), math.log(0.01)]
m = sum(want) / 3
h = 4.303 * statistics.stdev(want) / math.sqrt(3)
if abs(r["mean"] - m) > 1e-12 or abs(r["ci95"][0] - (m - h)) > 1e-9 or abs(r["ci95"][1] - (m + h)) > 1e-9:
    e.append("refreshkv vs snapkv %r, want mean %g +- %g" % (r, m, h))
print("; ".join(e) if e else "OK")
PY
)
[ "$check" = OK ] && ok "mean, sd, paired ratios and their 95% t-intervals are the hand-computed ones" ||
    fail "demo_seeds numbers" "$check"
grep -q "^| snapkv (window 1) | 233.333 ± 152.753 | 23.333 ± 15.275 | 0.1x \[0.1, 0.1\] |$" "$tmp/s/summary.md" &&
    ok "summary.md row: mean ± sd before and after, the ratio with its interval" ||
    fail "summary.md row" "$(grep snapkv "$tmp/s/summary.md" | head -2)"
grep -q "commit abc123; BLAS .*Haswell" "$tmp/s/summary.md" && ok "summary.md names the commit and the BLAS core" ||
    fail "provenance" "$(tail -2 "$tmp/s/summary.md")"
# accuracy: snapkv first before 10/20/30 % -> mean 20.0, sd 10.0; after - before +10 in every seed
grep -q "^| snapkv (window 1) | 20.0 ± 10.0 | 30.0 ± 10.0 | +10.0 \[+10.0, +10.0\] | 20.0 ± 0.0 | 20.0 ± 10.0 | " "$tmp/s/summary.md" &&
    ok "summary.md accuracy row: first and rest, before, after and the paired difference" ||
    fail "accuracy row" "$(grep -A14 'Top-1 accuracy' "$tmp/s/summary.md" | grep snapkv)"
acc=$("$PY" - "$tmp/s/summary.json" <<'PY'
import json, math, statistics, sys
r = json.load(open(sys.argv[1]))["accuracy"]["refreshkv (fixed stride 10)"]["first_before_minus_snapkv"]
want = [0.4, 0.2, 0.3]  # 0.5-0.1, 0.4-0.2, 0.6-0.3
m, h = sum(want) / 3, 4.303 * statistics.stdev(want) / math.sqrt(3)
ok = all(abs(a - b) < 1e-12 for a, b in zip(r["per_seed"], want)) and abs(r["mean"] - m) < 1e-12 and \
    abs(r["ci95"][0] - (m - h)) < 1e-9 and abs(r["ci95"][1] - (m + h)) < 1e-9
print("OK" if ok else "got %r, want mean %g +- %g" % (r, m, h))
PY
)
[ "$acc" = OK ] && ok "RefreshKV − SnapKV accuracy difference per seed, mean and t-interval are the hand-computed ones" ||
    fail "accuracy vs snapkv" "$acc"
# the answers' PPL (1 / accuracy in the fixtures): snapkv first before 10, 5, 3.333; after 5, 3.333, 2.5
grep -q "^| snapkv (window 1) | 6.111 ± 3.469 | 3.611 ± 1.273 | " "$tmp/s/summary.md" &&
    ok "summary.md answers-PPL row: first before and after, mean ± sd" ||
    fail "answers PPL row" "$(grep -A14 'PPL of the answers' "$tmp/s/summary.md" | grep snapkv)"
ap=$("$PY" - "$tmp/s/summary.json" <<'PY'
import json, math, statistics, sys
r = json.load(open(sys.argv[1]))["answer_ppl"]["snapkv (window 1)"]["first_ln_after_minus_before"]
want = [math.log(0.1 / 0.2), math.log(0.2 / 0.3), math.log(0.3 / 0.4)]  # PPL 1/acc: ln(after/before) = ln(b/a)
m, h = sum(want) / 3, 4.303 * statistics.stdev(want) / math.sqrt(3)
ok = all(abs(a - b) < 1e-12 for a, b in zip(r["per_seed"], want)) and abs(r["ci95"][0] - (m - h)) < 1e-9
print("OK" if ok else "got %r, want mean %g +- %g" % (r, m, h))
PY
)
[ "$ap" = OK ] && ok "answers' PPL after / before per seed and its t-interval are the hand-computed ones" ||
    fail "answers PPL ratio" "$ap"

# a control arm (launch/demo.sh's ARMS=mask,causal): seeds 1 and 2, 4
# documents each, every PPL of the causal CPT (whole and per document) 1.25x
# the mask CPT's, the first answers' accuracy 0.4 against 0.5. Every policy
# reads 0.8000 [0.8000, 0.8000] across seeds and over the 8 documents, 8 of 8
# below 1, sign and Wilcoxon p 2/2^8 = 0.0078, Holm over the 2 policies 0.016,
# mask - causal +10.0 points on the first answers.
for s in 1 2; do
    mkdir -p "$tmp/arm/seed$s/eval" "$tmp/arm/seed$s/eval-causal"
    "$PY" - "$tmp/arm/seed$s" "$s" <<'PY'
import json, sys
d, s = sys.argv[1], int(sys.argv[2])
def cell(pol, model, scale, first):
    per_doc = [scale * (2 + s + k) for k in range(4)]
    return {"policy": pol, "model": "runs/x/%s/model" % model, "ppl": scale * (3 + s), "ppl_per_document": per_doc,
            "answers": {"first": {"top1_accuracy": first, "ppl": 2.0}, "rest": {"top1_accuracy": 0.6, "ppl": 1.5},
                        "none": {"top1_accuracy": 0.0}}}
meta = {"device": "cpu", "commit": "abc123", "blas": {"core": "Haswell"}}
res = [cell(p, m, 1.0, 0.5) for p in ("full", "snapkv (window 1)") for m in ("pretrain", "cpt")]
json.dump(dict(meta, results=res), open(d + "/eval/eval.json", "w"))
json.dump(dict(meta, results=[cell(p, "cpt-causal", 1.25, 0.4) for p in ("full", "snapkv (window 1)")]),
          open(d + "/eval-causal/eval.json", "w"))
PY
done
out=$("$PY" scripts/demo_seeds.py --seeds 1,2 --out "$tmp/arm" --no-run 2>&1) && rc=0 || rc=$?
n=$(grep -cE '^\| (full|snapkv \(window 1\)) \| 0\.8000 \[0\.8000, 0\.8000\] \| 0\.8000 \[0\.8000, 0\.8000\] \| 8 of 8 \| 0\.0078 \| 0\.0078 \| 0\.016 \| \+10\.0 \[\+10\.0, \+10\.0\] \| \+0\.0 \[\+0\.0, \+0\.0\] \|$' <<<"$out")
if [ "$rc" = 0 ] && [ "$n" = 2 ] && grep -q "The mask arm over the causal arm" <<<"$out"; then
    ok "demo_seeds: a causal arm 1.25x the mask arm's reads 0.8000 across seeds and 8 documents, sign and Wilcoxon p 0.0078, Holm 0.016, +10.0 points"
else
    fail "demo_seeds causal arm" "exit $rc, $n rows as expected: $(grep -A4 'mask − causal |' <<<"$out" | tail -3)"
fi
# launch/demo.sh refuses an unknown arm, and arms without the mask's CPT, before any work, naming ARMS
for v in "mask,bogus|ARMS holds 'bogus'" "causal|ARMS holds no mask arm"; do
    if o=$(ARMS="${v%%|*}" OUT="$tmp/never" launch/demo.sh 2>&1); then fail "demo.sh ARMS=${v%%|*}" "accepted"
    elif grep -qF "${v#*|}" <<<"$o" && [ ! -e "$tmp/never" ]; then ok "demo.sh refuses ARMS=${v%%|*} before any work, naming it"
    else fail "demo.sh ARMS=${v%%|*}" "$o"; fi
done
