#!/usr/bin/env python3
"""The CPU demo (launch/demo.sh) over several seeds, and its table across them.

Each seed is a whole demo run (documents, initial weights and data order all
drawn from it) into OUT/seedN; a finished seed is not run again. Then, from
the seeds' eval.json files, per policy and model (before / after CPT): the
mean and standard deviation of PPL across seeds, and paired comparisons with
95% t-intervals across seeds on ln PPL (a ratio of PPLs, so a policy's
outlier seed does not swamp the mean): after vs before CPT for every policy,
and each RefreshKV variant vs SnapKV on the same model and seed. When the
data marks answers (the mqar task), the PPL of the answers per class (the
first answer after a jump, the later ones) with after / before ratios, and
their top-1 accuracy with differences in percentage points. When the seeds
ran control arms (launch/demo.sh's ARMS: plain causal CPT, evaluated in
eval-causal/), the mask arm over each: per policy the PPL ratio across seeds
and, paired by document within each seed (the documents are drawn from the
seed), a bootstrap interval, the exact sign and Wilcoxon signed-rank tests
with Holm's adjustment over the policies, and the answers' top-1 accuracy
mask minus control.

Writes OUT/summary.md (what docs/results-demo.md quotes) and
OUT/summary.json, and prints the table.

Usage: python3 scripts/demo_seeds.py [--seeds 1,2,3] [--out runs/demo-seeds]
       [--no-run]   (only aggregate seeds already run)
Environment variables of launch/demo.sh (L, S, CPT_LR, ...) pass through.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys

from paired_stats import doc_bootstrap, fmt_p, holm, sign_test, wilcoxon

# two-sided 95% Student t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df):
    if df in T95:
        return T95[df]
    below = [d for d in T95 if d <= df]
    return T95[max(below)] if df <= 30 else 1.96


def interval(xs):
    """mean and 95% t-interval of xs (None for the interval with one value)"""
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, None
    h = t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, (m - h, m + h)


def stage_of(model_path):
    """before, after (the mask arm's CPT, cpt/) or a control arm's name (cpt-ARM/)"""
    parent = os.path.basename(os.path.dirname(model_path.rstrip("/")))
    return "after" if parent == "cpt" else parent[4:] if parent.startswith("cpt-") else "before"


def arm_evals(out, s):
    """the eval.json paths of a seed: eval/ (before and the mask arm's after), then each control arm's eval-ARM/"""
    d = os.path.join(out, f"seed{s}")
    arms = sorted(x for x in os.listdir(d) if x.startswith("eval-") and
                  os.path.exists(os.path.join(d, x, "eval.json"))) if os.path.isdir(d) else []
    return [os.path.join(d, "eval", "eval.json")] + [os.path.join(d, x, "eval.json") for x in arms]


def load(out, seeds, docs=None):
    """{(policy, stage): {seed: ppl}}, {(policy, stage, class): {seed: top-1 accuracy}},
    {(policy, stage, class): {seed: PPL of that answer class}} and each seed's eval.json provenance; docs, when
    given, gets {(policy, stage): {seed: [PPL per document]}}"""
    cells, acc, ans_ppl, meta = {}, {}, {}, {}
    for s in seeds:
        for path in arm_evals(out, s):
            with open(path) as f:
                j = json.load(f)
            meta.setdefault(s, {"commit": j.get("commit"), "blas": j.get("blas"), "device": j.get("device")})
            for r in j["results"]:
                for cls, e in (r.get("answers") or {}).items():
                    if cls != "none" and e.get("top1_accuracy") is not None:
                        acc.setdefault((r["policy"], stage_of(r["model"]), cls), {})[s] = e["top1_accuracy"]
                    if cls != "none" and e.get("ppl") is not None:
                        ans_ppl.setdefault((r["policy"], stage_of(r["model"]), cls), {})[s] = e["ppl"]
                if r["ppl"] is None:
                    continue
                cells.setdefault((r["policy"], stage_of(r["model"])), {})[s] = r["ppl"]
                if docs is not None and r.get("ppl_per_document"):
                    docs.setdefault((r["policy"], stage_of(r["model"])), {})[s] = r["ppl_per_document"]
    return cells, acc, ans_ppl, meta


def seed_seconds(out, s):
    """the demo's own stage times (stage_seconds.txt), so a resumed seed still reports its whole cost"""
    try:
        with open(os.path.join(out, f"seed{s}", "stage_seconds.txt")) as f:
            return sum(int(line.split()[-2]) for line in f if line.strip().endswith(" s"))
    except (OSError, ValueError, IndexError):
        return None


def fmt_pp(m, ci):
    """a difference of accuracies in percentage points with its interval"""
    if ci is None:
        return f"{100 * m:+.1f}"
    return f"{100 * m:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"


def fmt_ppl(x):
    return f"{x:,.3f}" if x < 1000 else f"{x:,.0f}"


def fmt_ratio(m, ci):
    if ci is None:
        return f"{math.exp(m):.3g}x"
    return f"{math.exp(m):.3g}x [{math.exp(ci[0]):.3g}, {math.exp(ci[1]):.3g}]"


def class_rows(data, policies, seeds, fmt_cell, diff, fmt_diff, diff_name):
    """Rows per policy over the answer classes: mean ± sd before and after CPT, then the paired after-vs-before
    difference (diff(after, before) per seed) with its 95% t-interval; and the summary entries."""
    rows, summ = [], {}
    for p in policies:
        row, entry = [p], {}
        for cls in ("first", "rest"):
            for st in ("before", "after"):
                v = [data[(p, st, cls)][s] for s in seeds if s in data.get((p, st, cls), {})]
                if not v:
                    row.append("n/a")
                    continue
                sd = statistics.stdev(v) if len(v) > 1 else 0.0
                row.append(f"{fmt_cell(statistics.fmean(v))} ± {fmt_cell(sd)}")
                entry[f"{cls}_{st}"] = {"per_seed": v, "mean": statistics.fmean(v), "sd": sd}
            b_, a_ = data.get((p, "before", cls), {}), data.get((p, "after", cls), {})
            d = [diff(a_[s], b_[s]) for s in seeds if s in a_ and s in b_]
            if d:
                m, ci = interval(d)
                row.append(fmt_diff(m, ci))
                entry[f"{cls}_{diff_name}"] = {"per_seed": d, "mean": m, "ci95": ci}
            else:
                row.append("n/a")
        summ[p] = entry
        rows.append("| " + " | ".join(row) + " |")
    return rows, summ


def answer_ppl_table(ans_ppl, policies, seeds, summary):
    """PPL of the answers per class (the targets a model can predict), mean ± sd, and after / before CPT as a
    ratio with its 95% t-interval on ln PPL. The overall PPL also holds the targets no model can predict (a
    marker), whose PPL moves with the model's confidence there, not with what the cache kept."""
    lines = ["", "PPL of the answers, mean ± sd across seeds: the first value after a repeated marker and the "
                 "later values; after / before CPT (95% CI across seeds).", "",
             "| policy | first: before | first: after | first: after / before | rest: before | rest: after | "
             "rest: after / before |", "|---|---|---|---|---|---|---|"]
    rows, summary["answer_ppl"] = class_rows(ans_ppl, policies, seeds, fmt_ppl,
                                             lambda a, b: math.log(a) - math.log(b), fmt_ratio,
                                             "ln_after_minus_before")
    return lines + rows


def accuracy_tables(acc, policies, seeds, snap, summary):
    """Top-1 accuracy of the answers per class: mean ± sd in percent, after - before and RefreshKV - SnapKV in
    percentage points with 95% t-intervals across seeds."""
    lines = ["", "Top-1 accuracy of the answers (%, mean ± sd across seeds): the first value after a repeated "
                 "marker (a jump to its record by content) and the later values; after − before CPT in percentage "
                 "points (95% CI across seeds).", "",
             "| policy | first: before | first: after | first: after − before | rest: before | rest: after | "
             "rest: after − before |", "|---|---|---|---|---|---|---|"]
    rows, summary["accuracy"] = class_rows(acc, policies, seeds, lambda x: f"{100 * x:.1f}", lambda a, b: a - b,
                                           fmt_pp, "after_minus_before")
    lines += rows
    refresh = [p for p in policies if p.startswith("refreshkv")]
    if snap and refresh:
        lines += ["", f"RefreshKV minus {snap}, top-1 accuracy in percentage points on the same model and seed "
                      "(95% CI across seeds; above 0: RefreshKV better).", "",
                  "| variant | first: before | first: after | rest: before | rest: after |", "|---|---|---|---|---|"]
        for p in refresh:
            row = [p]
            for cls in ("first", "rest"):
                for st in ("before", "after"):
                    a_, b_ = acc.get((p, st, cls), {}), acc.get((snap, st, cls), {})
                    d = [a_[s] - b_[s] for s in seeds if s in a_ and s in b_]
                    if not d:
                        row.append("n/a")
                        continue
                    m, ci = interval(d)
                    row.append(fmt_pp(m, ci))
                    summary["accuracy"].setdefault(p, {})[f"{cls}_{st}_minus_snapkv"] = {"per_seed": d, "mean": m,
                                                                                         "ci95": ci}
            lines.append("| " + " | ".join(row) + " |")
    return lines


def fmt_ratio4(m, ci):
    """a ratio near 1, to the 4 decimals an arm comparison needs"""
    if ci is None:
        return f"{math.exp(m):.4f}"
    return f"{math.exp(m):.4f} [{math.exp(ci[0]):.4f}, {math.exp(ci[1]):.4f}]"


def arm_tables(cells, docs, acc, policies, seeds, summary):
    """For each control arm the seeds ran (stages other than before and after): the mask arm (after) over it per
    policy, across seeds and paired by document within each seed, and the answers' accuracy mask − arm."""
    arms = sorted({st for (_, st) in cells if st not in ("before", "after")})
    lines = []
    for arm in arms:
        lines += ["", f"The mask arm over the {arm} arm: after CPT with the RefreshKV mask over after CPT with "
                      f"{'plain causal attention (the control: the same steps, batch, data order and schedule)' if arm == 'causal' else 'the ' + arm + ' mask'}"
                      ", the same seed (below 1: the mask's CPT did better). *Seeds*: the PPL ratio with its 95% "
                      "t-interval across seeds. *Documents*: each seed's documents paired (the same document "
                      "through both models), the seeds' documents pooled: the ratio with a 95% bootstrap interval, "
                      "how many lie below 1, the exact sign and Wilcoxon signed-rank tests (two-sided) and Wilcoxon's "
                      "p Holm-adjusted over the policies. Top-1 accuracy of the answers, mask − " + arm +
                      " in percentage points (95% CI across seeds).", "",
                  f"| policy | seeds | documents | below 1 | sign p | Wilcoxon p | Holm p | first: mask − {arm} | "
                  f"rest: mask − {arm} |", "|---|---|---|---|---|---|---|---|---|"]
        rows, pw, entry = [], [], {}
        for p in policies:
            a_, c_ = cells.get((p, "after"), {}), cells.get((p, arm), {})
            both = [s for s in seeds if s in a_ and s in c_]
            if not both:
                continue
            m, ci = interval([math.log(a_[s]) - math.log(c_[s]) for s in both])
            da, dc = docs.get((p, "after"), {}), docs.get((p, arm), {})
            per_doc = [math.log(x) - math.log(y) for s in both if s in da and s in dc for x, y in zip(da[s], dc[s])]
            e = {"ln_mask_minus_arm_per_seed": [math.log(a_[s]) - math.log(c_[s]) for s in both], "mean": m,
                 "ci95": ci}
            row = [p, fmt_ratio4(m, ci)]
            if per_doc:
                sp, below, n = sign_test(per_doc)
                wp = wilcoxon(per_doc)[0]
                pw.append(wp)
                row += [fmt_ratio4(statistics.fmean(per_doc), doc_bootstrap(per_doc)), f"{below} of {n}", fmt_p(sp),
                        fmt_p(wp), None]
                e.update({"documents": len(per_doc), "below_1": below, "sign_p": sp, "wilcoxon_p": wp})
            else:
                row += ["n/a"] * 5
            for cls in ("first", "rest"):
                x, y = acc.get((p, "after", cls), {}), acc.get((p, arm, cls), {})
                d = [x[s] - y[s] for s in both if s in x and s in y]
                row.append(fmt_pp(*interval(d)) if d else "n/a")
            rows.append(row)
            entry[p] = e
        adj = iter(holm(pw))
        for row in rows:
            if row[6] is None:
                row[6] = fmt_p(next(adj))
            lines.append("| " + " | ".join(row) + " |")
        summary.setdefault("arms", {})[arm] = entry
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--out", default="runs/demo-seeds")
    ap.add_argument("--no-run", action="store_true")
    a = ap.parse_args()
    seeds = [int(x) for x in a.seeds.split(",") if x]
    if len(seeds) < 1:
        sys.exit("demo_seeds: need at least one seed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for s in seeds:
        if a.no_run:
            break
        d = os.path.join(a.out, f"seed{s}")
        env = dict(os.environ, OUT=d, SEED=str(s))
        print(f"demo_seeds: seed {s} -> {d}", flush=True)
        subprocess.run([os.path.join(root, "launch", "demo.sh")], env=env, check=True)
    seconds = {s: t for s in seeds if (t := seed_seconds(a.out, s)) is not None}
    docs = {}
    cells, acc, ans_ppl, meta = load(a.out, seeds, docs)
    policies = []
    for (p, _st) in cells:
        if p not in policies:
            policies.append(p)

    lines = [f"Seeds {', '.join(map(str, seeds))}; PPL of the scored tokens, mean ± sd across seeds "
             f"(each seed's own PPL is over its test documents).", "",
             "| policy | before CPT | after CPT | after / before (95% CI across seeds) |", "|---|---|---|---|"]
    summary = {"seeds": seeds, "seconds_per_seed": seconds, "provenance": meta, "policies": {}, "paired": {}}
    for p in policies:
        row, entry = [p], {}
        for st in ("before", "after"):
            v = [cells.get((p, st), {}).get(s) for s in seeds]
            v = [x for x in v if x is not None]
            if not v:
                row.append("n/a")
                continue
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            row.append(f"{fmt_ppl(statistics.fmean(v))} ± {fmt_ppl(sd)}")
            entry[st] = {"ppl": v, "mean": statistics.fmean(v), "sd": sd}
        both = [s for s in seeds if s in cells.get((p, "before"), {}) and s in cells.get((p, "after"), {})]
        d = [math.log(cells[(p, "after")][s]) - math.log(cells[(p, "before")][s]) for s in both]
        if d:
            m, ci = interval(d)
            row.append(fmt_ratio(m, ci))
            entry["ln_after_minus_before"] = {"per_seed": d, "mean": m, "ci95": ci}
        else:
            row.append("n/a")
        summary["policies"][p] = entry
        lines.append("| " + " | ".join(row) + " |")

    snap = next((p for p in policies if p.startswith("snapkv")), None)
    refresh = [p for p in policies if p.startswith("refreshkv")]
    if snap and refresh:
        lines += ["", f"RefreshKV against {snap} on the same model and seed: PPL ratio (95% CI across seeds; "
                      "below 1: RefreshKV better).", "", "| variant | before CPT | after CPT |", "|---|---|---|"]
        for p in refresh:
            row = [p]
            for st in ("before", "after"):
                both = [s for s in seeds if s in cells.get((p, st), {}) and s in cells.get((snap, st), {})]
                d = [math.log(cells[(p, st)][s]) - math.log(cells[(snap, st)][s]) for s in both]
                if not d:
                    row.append("n/a")
                    continue
                m, ci = interval(d)
                row.append(fmt_ratio(m, ci))
                summary["paired"].setdefault(p, {})[st] = {"ln_vs_snapkv_per_seed": d, "mean": m, "ci95": ci}
            lines.append("| " + " | ".join(row) + " |")
    if ans_ppl:
        lines += answer_ppl_table(ans_ppl, policies, seeds, summary)
    if acc:
        lines += accuracy_tables(acc, policies, seeds, snap, summary)
    lines += arm_tables(cells, docs, acc, policies, seeds, summary)
    cores = {json.dumps(m["blas"], sort_keys=True) for m in meta.values()}
    lines += ["", "Provenance (each seed's eval.json): commit " +
              ", ".join(sorted({str(m['commit']) for m in meta.values()})) + "; BLAS " + "; ".join(sorted(cores)) +
              f"; {platform.machine()}, {os.cpu_count()} cores."]
    if seconds:
        lines.append("Wall time per seed (s, the sum of its stage_seconds.txt): " +
                     ", ".join(f"{s}: {t}" for s, t in seconds.items()) + ".")
    text = "\n".join(lines) + "\n"
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(text)


if __name__ == "__main__":
    main()
