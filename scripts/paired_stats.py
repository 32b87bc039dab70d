"""Paired statistics over documents (and seeds) for the results tables.

Standard library only (scipy is not in the venv): a paired bootstrap
interval of a mean, a Student t-interval, the exact two-sided sign test,
the exact two-sided Wilcoxon signed-rank test and Holm's step-down
adjustment of a family of p-values. Each takes the paired differences
(e.g. per document ln(PPL a) - ln(PPL b)); a difference of exactly 0 is no
evidence either way and is dropped by both tests (Wilcoxon's own
convention), so n below is the count of nonzero differences.
"""
import math
import random
import statistics

# two-sided 95% Student t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t_interval(xs):
    """mean and 95% t-interval of xs (None with fewer than two values)"""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, None
    h = T95.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, (m - h, m + h)


def doc_bootstrap(per_doc, n=2000, seed=0):
    """95% percentile interval of the mean of per_doc, documents resampled with replacement"""
    rng = random.Random(seed)
    k = len(per_doc)
    means = sorted(statistics.fmean(rng.choice(per_doc) for _ in range(k)) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def sign_test(diffs):
    """(two-sided exact p, count below 0, count of nonzero differences): under the null each nonzero
    difference is below 0 with probability 1/2; p = min(1, 2 P(Binomial(n, 1/2) <= min(below, above)))"""
    below = sum(1 for d in diffs if d < 0)
    n = below + sum(1 for d in diffs if d > 0)
    if n == 0:
        return 1.0, 0, 0
    k = min(below, n - below)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2 ** n), below, n


def wilcoxon(diffs):
    """(two-sided exact p, W+, n) of the Wilcoxon signed-rank test: the nonzero differences ranked by
    |d| (ties get their mean rank), W+ the sum of the positive ones' ranks; under the null every sign
    pattern of those ranks is equally likely, and its exact distribution (ties included: the ranks
    are doubled to integers) gives p = min(1, 2 min(P(W+ <= w), P(W+ >= w)))"""
    d = [x for x in diffs if x != 0]
    n = len(d)
    if n == 0:
        return 1.0, 0.0, 0
    order = sorted(range(n), key=lambda i: abs(d[i]))
    rank2 = [0] * n  # twice the mid-rank: an integer
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(d[order[j + 1]]) == abs(d[order[i]]):
            j += 1
        for k in range(i, j + 1):
            rank2[order[k]] = i + j + 2  # (i+1 + j+1) / 2 doubled
        i = j + 1
    w2 = sum(r for r, x in zip(rank2, d) if x > 0)
    # counts[s]: sign patterns whose doubled positive-rank sum is s
    counts = [1] + [0] * sum(rank2)
    for r in rank2:
        for s in range(len(counts) - 1, r - 1, -1):
            counts[s] += counts[s - r]
    total = 2 ** n
    lower = sum(counts[:w2 + 1]) / total
    upper = sum(counts[w2:]) / total
    return min(1.0, 2 * min(lower, upper)), w2 / 2, n


def holm(ps):
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest p times (m - i),
    made non-decreasing, capped at 1"""
    m = len(ps)
    out = [1.0] * m
    running = 0.0
    for i, k in enumerate(sorted(range(m), key=lambda k: ps[k])):
        running = max(running, min(1.0, (m - i) * ps[k]))
        out[k] = running
    return out


def fmt_p(p):
    """a p-value as the tables print it"""
    return "%.2g" % p if p >= 0.001 else "%.1e" % p
