#!/usr/bin/env python3
"""The real model's CPT across seeds, from launch/realmodel.sh's output directory.

Reads OUT/eval-L/eval.json (the pretrained model: before CPT) and
OUT/cpt-MASK-seedN/eval-L/eval.json (after CPT with that mask and data-order
seed), each CPT run's config.json and log.jsonl (its size), OUT/times.tsv,
and prints Markdown: per context and variant the PPL before, after (mean ±
sd across seeds) and after / before as a ratio with two 95% intervals:

- across seeds: a Student t-interval over the seeds' ln(after / before) (what
  another data order would give on these documents);
- across documents: a paired bootstrap over the documents of the mean over
  seeds of ln(PPL after / PPL before) per document (what other documents
  would give; every eval scores the same documents, S tokens each, so a
  model's ln PPL is the mean of its documents' ln PPL).

Then the answers the experiment asks for, each from those numbers: does full
attention stay unchanged (its interval holds 1), which policies gain (their
interval lies below 1), does RefreshKV gain the most (the paper's claim: the
best RefreshKV variant's ln ratio minus each other policy's, paired by seed),
and, for the masks that match inference (CPT_MASKS), each mask's after / after
of the paper's mask on the same seed. Standard library only.
"""
import argparse
import json
import math
import os
import platform
import random
import statistics
import sys

# two-sided 95% Student t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
PAPER_TOKENS = 1e9  # the RefreshKV paper's CPT: about 1B tokens of RedPajama-ArXiv at 8K


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


def ratio(m, ci):
    if ci is None:
        return "%.4f" % math.exp(m)
    return "%.4f [%.4f, %.4f]" % (math.exp(m), math.exp(ci[0]), math.exp(ci[1]))


def load_eval(path):
    with open(path) as f:
        return json.load(f)


def cells(ev):
    """{policy: (ppl, [ppl per document])} of one eval.json, finite cells only"""
    return {r["policy"]: (r["ppl"], r["ppl_per_document"]) for r in ev["results"] if r["ppl"] is not None}


def run_size(d):
    """(steps done, sequences per step, tokens per sequence, mask keys) of a CPT run directory"""
    cfg = load_eval(os.path.join(d, "config.json"))
    steps = 0
    with open(os.path.join(d, "log.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "step" in j and "loss" in j:
                steps = max(steps, int(j["step"]))
    mask = "mask_evict=%s mask_restride=%s" % (cfg.get("mask_evict", 0), cfg.get("mask_restride", 0))
    return steps, int(cfg["global_batch"]), int(cfg["L"]) + int(cfg["S"]), mask


def machine():
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%s, %d cores, %s" % (platform.machine(), os.cpu_count() or 0, model)


def paired(before, afters, pol):
    """per-seed ln(after / before) and per-document mean over seeds of ln(after / before) for one policy"""
    b_ppl, b_doc = before[pol]
    per_seed = [math.log(a[pol][0]) - math.log(b_ppl) for a in afters]
    per_doc = [statistics.fmean(math.log(a[pol][1][i]) - math.log(b_doc[i]) for a in afters)
               for i in range(len(b_doc))]
    return per_seed, per_doc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--contexts", required=True)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--masks", default="", help="extra mask variants run (launch/realmodel.sh's CPT_MASKS)")
    ap.add_argument("--mask-seeds", default="")
    ap.add_argument("--command", default="launch/realmodel.sh")
    a = ap.parse_args()
    ctxs = [int(x) for x in a.contexts.split(",") if x]
    seeds = [int(x) for x in a.seeds.split(",") if x]
    masks = [m for m in a.masks.split(",") if m]
    mask_seeds = [int(x) for x in (a.mask_seeds or a.seeds).split(",") if x]
    times = []
    tpath = os.path.join(a.out, "times.tsv")
    if os.path.exists(tpath):
        times = [line.rstrip("\n").split("\t") for line in open(tpath) if line.strip()]

    p = print
    p("# SmolLM2-135M: RefreshKV CPT, before -> after, across seeds")
    p()
    p("Generated by `scripts/realmodel_cpt_table.py` from `%s`." % a.command)
    p()
    sizes = {}
    for m, ss in [("paper", seeds)] + [(m, mask_seeds) for m in masks]:
        for s in ss:
            d = os.path.join(a.out, "cpt-%s-seed%d" % (m, s))
            if os.path.exists(os.path.join(d, "log.jsonl")):
                sizes[(m, s)] = run_size(d)
    if sizes:
        steps, batch, seq, _ = next(iter(sizes.values()))
        tok = steps * batch * seq
        p("- CPT per run: %d steps of %d sequences of %d tokens = %d tokens, %.1e of the paper's ~1B (%.4f%%)" % (
            steps, batch, seq, tok, tok / PAPER_TOKENS, 100.0 * tok / PAPER_TOKENS))
        for (m, s), (st, b, q, keys) in sizes.items():
            if (st, b, q) != (steps, batch, seq):
                p("- note: %s seed %d ran %d steps of %d x %d tokens" % (m, s, st, b, q))
        p("- runs: %s" % ", ".join("%s seed %d (%s)" % (m, s, k[3]) for (m, s), k in sizes.items()))
    p("- machine: %s" % machine())
    if times:
        p("- wall time per stage: %s" % ", ".join("%s %s s" % (n, s) for n, s in times))
    p()
    p("Intervals are 95%: *seeds* a t-interval over the data-order seeds' ln(after / before) (none with one seed); "
      "*documents* a paired bootstrap over the test documents of the mean over seeds of each document's "
      "ln(after / before). Below 1: CPT lowered the PPL. *Beyond full's*: a policy's after / before over full "
      "attention's on the same seed (and document): below 1, the policy gained more than the whole model did.")
    answers = {}
    for L in ctxs:
        bpath = os.path.join(a.out, "eval-%d" % L, "eval.json")
        if not os.path.exists(bpath):
            p()
            p("**L = %d**: no eval before CPT (%s)." % (L, bpath))
            continue
        bev = load_eval(bpath)
        before = cells(bev)
        order = [r["policy"] for r in bev["results"] if r["ppl"] is not None]
        done = [s for s in seeds
                if os.path.exists(os.path.join(a.out, "cpt-paper-seed%d" % s, "eval-%d" % L, "eval.json"))]
        if not done:
            p()
            p("**L = %d**: no CPT model evaluated yet." % L)
            continue
        afters = [cells(load_eval(os.path.join(a.out, "cpt-paper-seed%d" % s, "eval-%d" % L, "eval.json")))
                  for s in done]
        ndoc = len(before[order[0]][1])
        p()
        p("## L = %d, paper's mask, seeds %s (%d test documents, commit %s)" % (
            L, ", ".join(map(str, done)), ndoc, bev.get("commit", "?")))
        p()
        p("| variant | before | after (mean ± sd over seeds) | after / before, seeds | after / before, documents "
          "| beyond full's: seeds; documents |")
        p("|---|---|---|---|---|---|")
        res = {}
        full = paired(before, afters, "full") if "full" in order and all("full" in x for x in afters) else None
        for pol in order:
            if not all(pol in x for x in afters):
                continue
            per_seed, per_doc = paired(before, afters, pol)
            m, ci_s = t_interval(per_seed)
            ci_d = doc_bootstrap(per_doc)
            res[pol] = (per_seed, m, ci_s, ci_d, per_doc)
            av = [x[pol][0] for x in afters]
            sd = statistics.stdev(av) if len(av) > 1 else 0.0
            beyond = "n/a"
            if full and pol != "full":
                # the policy's after / before over full attention's: the gain that is not the whole model's
                mb, cb = t_interval([x - y for x, y in zip(per_seed, full[0])])
                beyond = "%s; %s" % (ratio(mb, cb), ratio(mb, doc_bootstrap([x - y for x, y in zip(per_doc, full[1])])))
            p("| %s | %.4f | %.4f ± %.4f | %s | %s | %s |" % (pol, before[pol][0], statistics.fmean(av), sd,
                                                            ratio(m, ci_s), ratio(m, ci_d), beyond))
        answers[L] = res
        p()
        p("**Answers at L = %d.**" % L)
        p()
        if "full" in res:
            _, m, ci_s, ci_d, _ = res["full"]
            holds = [n for n, ci in (("seeds", ci_s), ("documents", ci_d)) if ci and ci[0] <= 0 <= ci[1]]
            p("- Full attention: after / before %s; %s." % (
                ratio(m, ci_d), "1 lies inside the interval across %s: no change resolved" % " and ".join(holds)
                if holds else "its intervals exclude 1: CPT changed the full-attention PPL"))
        gain = [q for q, (_, m, ci_s, ci_d, _) in res.items() if ci_s and ci_s[1] < 0 and ci_d[1] < 0]
        loss = [q for q, (_, m, ci_s, ci_d, _) in res.items() if ci_s and ci_s[0] > 0 and ci_d[0] > 0]
        ranked = sorted(res, key=lambda q: res[q][1])
        p("- Policies whose PPL fell with both intervals below 1: %s; rose with both above 1: %s." % (
            ", ".join(gain) or "none", ", ".join(loss) or "none"))
        p("- Point estimates, largest gain first: %s." % ", ".join(
            "%s %.4f" % (q, math.exp(res[q][1])) for q in ranked))
        refresh = [q for q in ranked if q.startswith("refreshkv")]
        others = [q for q in ranked if not q.startswith("refreshkv") and q != "full"]
        if refresh and others:
            best = refresh[0]
            lines = []
            resolved = True
            for q in others:
                d = [x - y for x, y in zip(res[best][0], res[q][0])]
                m, ci = t_interval(d)
                ci_d = doc_bootstrap([x - y for x, y in zip(res[best][4], res[q][4])])
                lines.append("%s %s, documents %s" % (q, ratio(m, ci), ratio(m, ci_d)))
                resolved = resolved and ci is not None and ci[1] < 0 and ci_d[1] < 0
            p("- RefreshKV gains the most? The best RefreshKV variant by point estimate is %s (%s the largest gain "
              "of all partial policies; chosen as the best of the RefreshKV variants, which favours it). Its "
              "(after / before) over each other policy's, paired by seed (then paired by document): %s. "
              "%s" % (best, "it has" if ranked.index(best) <= min(ranked.index(q) for q in others) else
                      "it does not have", "; ".join(lines),
                      "Every such ratio's intervals lie below 1." if resolved else
                      "Not every interval lies below 1: the claim is not resolved by these runs."))
        if masks:
            p()
            p("Masks that match inference, L = %d: after CPT with the mask over after CPT with the paper's mask, "
              "the same seed, ratio of PPL (documents: paired bootstrap; below 1: the mask did better)." % L)
            p()
            cols = [(mk, s) for mk in masks for s in mask_seeds
                    if os.path.exists(os.path.join(a.out, "cpt-%s-seed%d" % (mk, s), "eval-%d" % L, "eval.json"))
                    and s in done]
            if not cols:
                p("(no mask variant evaluated at this context yet)")
                continue
            mev = {c: cells(load_eval(os.path.join(a.out, "cpt-%s-seed%d" % c, "eval-%d" % L, "eval.json")))
                   for c in cols}
            p("| variant | " + " | ".join("%s seed %d: after / before | over the paper's mask" % c for c in cols)
              + " |")
            p("|---|" + "---|---|" * len(cols))
            for pol in res:
                row = [pol]
                for c in cols:
                    paper_after = afters[done.index(c[1])]
                    if pol not in mev[c]:
                        row += ["n/a", "n/a"]
                        continue
                    _, per_doc = paired(before, [mev[c]], pol)
                    m_b = math.log(mev[c][pol][0]) - math.log(before[pol][0])
                    row.append(ratio(m_b, doc_bootstrap(per_doc)))
                    per_doc = [math.log(mev[c][pol][1][i]) - math.log(paper_after[pol][1][i])
                               for i in range(len(paper_after[pol][1]))]
                    m_p = math.log(mev[c][pol][0]) - math.log(paper_after[pol][0])
                    row.append(ratio(m_p, doc_bootstrap(per_doc)))
                p("| " + " | ".join(row) + " |")
    if not answers:
        sys.exit("realmodel_cpt_table: no CPT model evaluated under %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
