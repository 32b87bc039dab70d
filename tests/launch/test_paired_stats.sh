#!/usr/bin/env bash
# scripts/paired_stats.py, the paired tests of the results tables, against
# oracles written here independently: the exact sign test and the exact
# Wilcoxon signed-rank test (ties and zeros included) by enumerating every
# one of the 2^n sign patterns of up to 12 differences; known values (10
# differences all above 0: Wilcoxon p = 2/1024, sign test with 1 of 10 below:
# 2 x 11/1024); Holm's adjustment on a hand-computed family.
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${PYTHON:-python3}
out=$("$PY" - <<'PY' 2>&1
import itertools, random, sys
from fractions import Fraction
sys.path.insert(0, "scripts")
import paired_stats as ps

def ranks(a):  # mid-ranks of |a| by counting: rank = (#smaller) + (#equal + 1) / 2
    return [sum(1 for y in a if abs(y) < abs(x)) + Fraction(sum(1 for y in a if abs(y) == abs(x)) + 1, 2) for x in a]

def wilcoxon_enum(d):
    d = [x for x in d if x != 0]
    r = ranks(d)
    w = sum(ri for ri, x in zip(r, d) if x > 0)
    sums = [sum(ri for ri, s in zip(r, signs) if s) for signs in itertools.product([0, 1], repeat=len(d))]
    lo = Fraction(sum(1 for v in sums if v <= w), len(sums))
    hi = Fraction(sum(1 for v in sums if v >= w), len(sums))
    return min(1, 2 * min(lo, hi)), w

def sign_enum(d):
    d = [x for x in d if x != 0]
    below = sum(1 for x in d if x < 0)
    k = min(below, len(d) - below)
    pats = list(itertools.product([0, 1], repeat=len(d)))
    return min(1, Fraction(2 * sum(1 for p in pats if sum(p) <= k), len(pats)))

bad = []
rng = random.Random(5)
cases = 0
for n in range(1, 13):
    for _ in range(6):
        # small integers: ties and zeros are common
        d = [rng.choice([-3, -2, -1, 0, 1, 1, 2, 3, 4]) * 0.5 for _ in range(n)]
        if all(x == 0 for x in d):
            continue
        p, w, m = ps.wilcoxon(d)
        pe, we = wilcoxon_enum(d)
        if abs(p - float(pe)) > 1e-12 or w != float(we):
            bad.append("wilcoxon %r: %r %r, enumerated %r %r" % (d, p, w, float(pe), float(we)))
        q, below, m = ps.sign_test(d)
        if abs(q - float(sign_enum(d))) > 1e-12 or below != sum(1 for x in d if x < 0):
            bad.append("sign test %r: %r, enumerated %r" % (d, q, float(sign_enum(d))))
        cases += 1
known = [(ps.wilcoxon([0.1 * (i + 1) for i in range(10)])[0], 2 / 1024, "wilcoxon 10 of 10 above 0"),
         (ps.sign_test([-1] + [1] * 9)[0], 2 * 11 / 1024, "sign test 1 of 10 below 0"),
         (ps.wilcoxon([0, 0])[0], 1.0, "wilcoxon of zeros only"),
         (ps.sign_test([1, -1])[0], 1.0, "sign test 1 of 2")]
for got, want, what in known:
    if abs(got - want) > 1e-12:
        bad.append("%s: %r, want %r" % (what, got, want))
# Holm: sorted 0.01, 0.02, 0.04, 0.30 (m = 4): 0.04, 0.06, 0.08, 0.30, in the given order
h = ps.holm([0.04, 0.01, 0.30, 0.02])
if any(abs(a - b) > 1e-12 for a, b in zip(h, [0.08, 0.04, 0.30, 0.06])):
    bad.append("holm %r" % h)
# 48 documents (the CPU run's size): exact p in well under a second, below the 2^-47 of all signs agreeing
p48 = ps.wilcoxon([-(i + 1) for i in range(48)])[0]
if abs(p48 - 2.0 ** -47) > 1e-25:
    bad.append("wilcoxon of 48 all below 0: %r" % p48)
print("; ".join(bad[:5]) if bad else "ok %d cases" % cases)
PY
)
case "$out" in
ok*) ok "paired_stats: Wilcoxon signed-rank and sign test p equal every sign pattern enumerated ($out, n 1 to 12, ties and zeros), known values, Holm" ;;
*) fail "paired_stats" "$out" ;;
esac
