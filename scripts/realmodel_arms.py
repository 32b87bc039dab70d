"""The CPT experiment with its control: realmodel_cpt_table.py --arms.

Every arm is a CPT of equal steps, batch, tokens, schedule and data order
(the seed) from the same pretrained model; the arms differ in the attention
the CPT trains under: `mask` the paper's RefreshKV mask, `causal` plain
causal attention (the control), and optionally the masks that match
inference (`evict`, `restride<r>`, `evict+restride<r>`). Read from
OUT/eval-L/eval.json (before CPT) and OUT/cpt-ARM-seedN/eval-L/eval.json,
each run's train_config.json (config.json before) and log.jsonl, OUT/times.tsv.

The headline, per context and variant, is the mask arm over the control:
for each document the mean over seeds of ln(PPL after CPT with the mask /
PPL after CPT without it) (the same seed: the same data order), then
- a 95% paired bootstrap interval over documents of its mean,
- a 95% t-interval over seeds (each seed's ln PPL ratio),
- the exact sign test and the exact Wilcoxon signed-rank test over the
  documents' values (two-sided), and Wilcoxon's p Holm-adjusted over the
  variants of the context;
- the ratio per source (corpus file).
Beside it each variant's compute: KV bytes read and decode ms per generated
token (from the eval before CPT). Then each arm's after / before per
variant, and, when a best RefreshKV variant is named, its comparison with
the other policies with p-values adjusted over the whole family it was
chosen from. Standard library only.
"""
import json
import math
import os
import statistics

import realmodel_docs as rd
from paired_stats import doc_bootstrap, fmt_p, holm, sign_test, t_interval, wilcoxon

# the config keys an arm sets; every other key must be the same in every run of one seed
ARM_KEYS = ("mask", "mask_evict", "mask_restride")
# keys that name where a run is or which run it is, not what it trains
RUN_KEYS = ("out",)


def arm_text(arm):
    """what an arm trains under, in words"""
    if arm == "mask":
        return "the paper's RefreshKV mask (mask=1)"
    if arm == "causal":
        return "plain causal attention (mask=0): the control"
    if arm == "evict":
        return "the RefreshKV mask holding the eval cache's budget (mask=1 mask_evict=1)"
    if arm.startswith("evict+restride"):
        return "the RefreshKV mask holding the budget and re-selecting every %s positions (mask=1 mask_evict=1 " \
               "mask_restride=%s)" % (arm[len("evict+restride"):], arm[len("evict+restride"):])
    if arm.startswith("restride"):
        return "the RefreshKV mask re-selecting every %s positions (mask=1 mask_restride=%s)" % (
            arm[len("restride"):], arm[len("restride"):])
    return "not described"


def load(path):
    with open(path) as f:
        return json.load(f)


def eval_before(out, L):
    """OUT/eval-L/eval.json (the model before CPT), or None after a line saying it is missing"""
    path = os.path.join(out, "eval-%d" % L, "eval.json")
    if not os.path.exists(path):
        print()
        print("**L = %d**: no eval before CPT (%s)." % (L, path))
        return None
    return load(path)


def run_config_path(d):
    """a CPT run's training config: train_config.json, or config.json in runs of earlier commits"""
    name = "train_config.json" if os.path.exists(os.path.join(d, "train_config.json")) else "config.json"
    return os.path.join(d, name)


def run_steps(d):
    """the last step a CPT run's log.jsonl records a loss for"""
    steps = 0
    with open(os.path.join(d, "log.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "step" in j and "loss" in j:
                steps = max(steps, int(j["step"]))
    return steps


def recipe_lines(out, arms, seeds):
    """the CPT size and whether the runs share one recipe, as Markdown bullet lines"""
    cfg, steps = {}, {}
    for arm in arms:
        for s in seeds:
            d = os.path.join(out, "cpt-%s-seed%d" % (arm, s))
            if os.path.exists(run_config_path(d)) and os.path.exists(os.path.join(d, "log.jsonl")):
                cfg[(arm, s)], steps[(arm, s)] = load(run_config_path(d)), run_steps(d)
    if not cfg:
        return ["- no CPT run found"]
    lines = []
    (arm0, s0), c0 = next(iter(cfg.items()))
    n0 = steps[(arm0, s0)]
    seq = int(c0["L"]) + int(c0["S"])
    tok = n0 * int(c0["global_batch"]) * seq
    lines.append("- CPT per run: %d steps of %d sequences of %d tokens = %d tokens, %.1e of the paper's ~1B" % (
        n0, int(c0["global_batch"]), seq, tok, tok / 1e9))
    lines.append("- arms: %s; each for seeds %s" % ("; ".join("`%s` %s" % (a, arm_text(a)) for a in arms),
                                                   ", ".join(map(str, seeds))))
    # every run against the first: only the arm's keys (and, across seeds, the seed) may differ
    differ = []
    for (arm, s), c in cfg.items():
        keys = sorted(k for k in set(c) | set(c0) if c.get(k) != c0.get(k) and k not in ARM_KEYS + RUN_KEYS
                      and not (k == "seed" and s != s0))
        if keys or steps[(arm, s)] != n0:
            differ.append("%s seed %d: %s" % (arm, s, ", ".join(
                ["%s %r (not %r)" % (k, c.get(k), c0.get(k)) for k in keys] +
                (["%d steps done (not %d)" % (steps[(arm, s)], n0)] if steps[(arm, s)] != n0 else []))))
    if differ:
        lines.append("- **the runs do not share one recipe**: %s" % "; ".join(differ))
    else:
        lines.append("- equal recipe: the %d runs' training configs agree on every key but the arm's (%s) and the seed "
                     "(the data order), and each ran %d steps: the same tokens, order, schedule and optimizer" % (
                         len(cfg), ", ".join(ARM_KEYS), n0))
    lines.append("- runs: %s" % ", ".join("%s seed %d (%s)" % (a, s, " ".join("%s=%s" % (k, c.get(k, 0))
                                                                            for k in ARM_KEYS))
                                          for (a, s), c in cfg.items()))
    return lines


def machine_lines(machine, times, runs):
    """the machines the runs recorded and the wall time of each stage (OUT/times.tsv), as Markdown bullet lines"""
    return ["- machine: %s" % machine(runs)] + (
        ["- wall time per stage: %s" % ", ".join("%s %s s" % (n, s) for n, s in times)] if times else [])


def cells(ev):
    """{policy: (ppl, [ppl per document], cell)} of one eval.json, finite cells only"""
    return {r["policy"]: (r["ppl"], r["ppl_per_document"], r) for r in ev["results"] if r["ppl"] is not None}


def ratio(m, ci):
    if ci is None:
        return "%.4f" % math.exp(m)
    return "%.4f [%.4f, %.4f]" % (math.exp(m), math.exp(ci[0]), math.exp(ci[1]))


def ln_pairs(num, den, pol, seeds):
    """per seed ln(PPL num / PPL den) and per document the mean over seeds of the same, for one policy;
    num and den: {seed: cells}, or den a single cells (the eval before CPT, the same for every seed)"""
    d_of = (lambda s: den[s]) if isinstance(den, dict) and seeds[0] in den else (lambda s: den)
    per_seed = [math.log(num[s][pol][0]) - math.log(d_of(s)[pol][0]) for s in seeds]
    nd = len(num[seeds[0]][pol][1])
    per_doc = [statistics.fmean(math.log(num[s][pol][1][i]) - math.log(d_of(s)[pol][1][i]) for s in seeds)
               for i in range(nd)]
    return per_seed, per_doc


def stats(per_seed, per_doc):
    m = statistics.fmean(per_doc)
    return {"m": m, "boot": doc_bootstrap(per_doc), "seeds": t_interval(per_seed)[1] if len(per_seed) > 1 else None,
            "sign": sign_test(per_doc), "wilcoxon": wilcoxon(per_doc), "per_doc": per_doc}


def main(a, ctxs, seeds, arms, times, machine):
    p = print
    p("# RefreshKV CPT against plain causal CPT: the mask over its control, before -> after")
    p()
    p("Generated by `scripts/realmodel_cpt_table.py` from `%s`." % a.command)
    p()
    before = [os.path.join(a.out, "eval-%d" % L, "eval.json") for L in ctxs]
    runs = [load(f) for f in before if os.path.exists(f)]
    for line in recipe_lines(a.out, arms, seeds) + machine_lines(machine, times, runs):
        p(line)
    p()
    p("**How to read it.** Every eval at a context scores the same documents, so every comparison is paired by "
      "document; arms are paired by seed (the same seed is the same data order). *Mask over causal*: per document, "
      "the mean over seeds of ln(PPL after CPT with the mask / PPL after plain causal CPT), shown as a ratio (below 1: "
      "the mask's CPT did better); *documents*: a 95% paired bootstrap interval over documents; *seeds*: a 95% "
      "t-interval over the seeds' ratios of PPL (none with one seed); *sign* and *Wilcoxon*: the exact two-sided sign "
      "test and Wilcoxon signed-rank test over the documents' values (zeros dropped); *Holm*: Wilcoxon's p adjusted "
      "over the variants of the context (the table tests them all at once). *KV MB* and *ms*: KV bytes read and "
      "decode time per generated token, from the eval before CPT: RefreshKV's variants differ in how often they "
      "read the whole cache, so compare them at equal bytes as well as at equal K.")
    found = False
    for L in ctxs:
        bev = eval_before(a.out, L)
        if bev is None:
            continue
        before = cells(bev)
        order = [r["policy"] for r in bev["results"] if r["ppl"] is not None]
        evs, after = [bev], {}
        for arm in arms:
            for s in seeds:
                path = os.path.join(a.out, "cpt-%s-seed%d" % (arm, s), "eval-%d" % L, "eval.json")
                if os.path.exists(path):
                    ev = load(path)
                    evs.append(ev)
                    after.setdefault(arm, {})[s] = cells(ev)
        if not after:
            p()
            p("**L = %d**: no CPT model evaluated yet." % L)
            continue
        found = True
        docs = rd.same_documents(evs, "L = %d" % L)
        p()
        p("## L = %d (%d test documents, commit %s)" % (L, len(before[order[0]][1]), bev.get("commit", "?")))
        p()
        for line in rd.section(L, bev, before["full"][1] if "full" in before else None):
            p(line)
        srcs = list(rd.by_source(docs, docs)) if docs else []
        both = [s for s in seeds if s in after.get("mask", {}) and s in after.get("causal", {})]
        p()
        p("### L = %d: mask over causal, after CPT (the headline)" % L)
        p()
        if not both:
            p("Not available: no seed has both the mask arm and the causal arm evaluated at this context.")
        else:
            head = ["variant", "KV MB (of full)", "ms", "mask over causal, documents", "seeds", "documents below 1",
                    "sign p", "Wilcoxon p", "Holm p"] + ["%s (%d)" % (s_, len(rd.by_source(docs, docs)[s_]))
                                                        for s_ in srcs]
            res = {}
            for pol in order:
                if all(pol in after["mask"][s] and pol in after["causal"][s] for s in both):
                    res[pol] = stats(*ln_pairs(after["mask"], after["causal"], pol, both))
            hp = dict(zip(res, holm([r["wilcoxon"][0] for r in res.values()])))
            p("Seeds %s; per source: the ratio over that source's documents (their count in the header)." %
              ", ".join(map(str, both)))
            p()
            p("| " + " | ".join(head) + " |")
            p("|" + "---|" * len(head))
            full_kb = before["full"][2].get("kv_bytes_per_token") if "full" in before else None
            for pol, r in res.items():
                c = before[pol][2]
                kb = c.get("kv_bytes_per_token")
                sp, below, n = r["sign"]
                row = [pol, "%.4g (%.0f%%)" % (kb / 1e6, 100 * kb / full_kb) if kb is not None and full_kb else "n/a",
                       "%.3g" % c["decode_ms_per_token"], ratio(r["m"], r["boot"]),
                       ratio(statistics.fmean(r["per_doc"]), r["seeds"]) if r["seeds"] else "n/a",
                       "%d of %d" % (below, n), fmt_p(sp), fmt_p(r["wilcoxon"][0]), fmt_p(hp[pol])]
                g = rd.by_source(docs, r["per_doc"]) if docs else {}
                row += ["%.4f" % rd.geo_ratio(g[s_]) for s_ in srcs]
                p("| " + " | ".join(row) + " |")
            answers(L, res, hp)
        p()
        p("### L = %d: each arm, after / before" % L)
        p()
        p("Per variant and arm: after CPT over before, the mean over the arm's seeds per document; 95% paired "
          "bootstrap over documents; Wilcoxon p over documents (below 1: the CPT lowered the PPL).")
        p()
        ran = [arm for arm in arms if arm in after]
        p("| variant | before | " + " | ".join("%s (seeds %s)" % (arm, ", ".join(map(str, sorted(after[arm]))))
                                                for arm in ran) + " |")
        p("|---|---|" + "---|" * len(ran))
        for pol in order:
            row = [pol, "%.4f" % before[pol][0]]
            for arm in ran:
                ss = sorted(after[arm])
                if not all(pol in after[arm][s] for s in ss):
                    row.append("n/a")
                    continue
                r = stats(*ln_pairs(after[arm], before, pol, ss))
                row.append("%s; p %s" % (ratio(r["m"], r["boot"]), fmt_p(r["wilcoxon"][0])))
            p("| " + " | ".join(row) + " |")
    if not found:
        raise SystemExit("realmodel_cpt_table: no CPT model evaluated under %s" % a.out)
    return 0


def answers(L, res, hp):
    """the headline's answers in words, and the best RefreshKV variant with its multiplicity stated"""
    p = print
    lower = [q for q, r in res.items() if r["boot"][1] < 0 and hp[q] < 0.05]
    higher = [q for q, r in res.items() if r["boot"][0] > 0 and hp[q] < 0.05]
    p()
    p("**Answers at L = %d.**" % L)
    p()
    p("- The mask's CPT lowered the PPL more than plain causal CPT (interval below 1 and Holm p < 0.05): %s; raised "
      "it (interval above 1, Holm p < 0.05): %s; the others are not resolved by these documents." % (
          ", ".join(lower) or "none", ", ".join(higher) or "none"))
    refresh = [q for q in res if q.startswith("refreshkv")]
    others = [q for q in res if not q.startswith("refreshkv") and q != "full"]
    if not refresh or not others:
        return
    best = min(refresh, key=lambda q: res[q]["m"])
    # the family the best was picked from: every RefreshKV variant against every other policy
    fam = [(q, o) for q in refresh for o in others]
    praw = [wilcoxon([x - y for x, y in zip(res[q]["per_doc"], res[o]["per_doc"])])[0] for q, o in fam]
    padj = dict(zip(fam, holm(praw)))
    lines = []
    for o in others:
        diff = [x - y for x, y in zip(res[best]["per_doc"], res[o]["per_doc"])]
        lines.append("%s %s, p %s (Holm %s)" % (o, ratio(statistics.fmean(diff), doc_bootstrap(diff)),
                                               fmt_p(praw[fam.index((best, o))]), fmt_p(padj[(best, o)])))
    resolved = all(padj[(best, o)] < 0.05 and
                   doc_bootstrap([x - y for x, y in zip(res[best]["per_doc"], res[o]["per_doc"])])[1] < 0
                   for o in others)
    p("- Does the mask help RefreshKV more than the other policies? %s has the lowest mask over causal of the %d "
      "RefreshKV variants (%.4f). It was chosen after the fact, which favours it: its comparisons below carry "
      "Wilcoxon p-values Holm-adjusted over all %d comparisons of the %d RefreshKV variants with the %d other "
      "policies, the family it was picked from. Its mask over causal over each other policy's, paired by "
      "document: %s. %s" % (
          best, len(refresh), math.exp(res[best]["m"]), len(fam), len(refresh), len(others), "; ".join(lines),
          "Every such interval lies below 1 with an adjusted p < 0.05." if resolved else
          "Not every comparison is resolved (interval below 1 and adjusted p < 0.05): the claim is not shown "
          "by these runs."))
