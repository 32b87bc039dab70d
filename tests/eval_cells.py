#!/usr/bin/env python3
"""Compares `kvcpt eval` results cell by cell (standard library only).

    eval_cells.py [--rel 1e-4] [--devices cpu,cuda] [--distinct N] REF/eval.json OTHER/eval.json...

A cell is a (policy, context, model) row of eval.json's results. Every cell
of REF must be in each OTHER with its PPL within --rel relative, the same
kv_bytes_per_token and the same effective_stride_per_layer (the same policy
decisions); --devices lists each file's device field in order; --distinct N
requires at least N different PPLs among REF's cells (policies that differ,
so that agreeing shows something). Prints "CELLS WORST PROBLEMS": REF's cell
count, the worst relative PPL difference, and "none" or the first problems.
"""
import argparse
import json
import os


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rel", type=float, default=1e-4)
    ap.add_argument("--devices", default="")
    ap.add_argument("--distinct", type=int, default=0)
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    js = [json.load(open(p)) for p in a.files]
    bad = []
    if a.devices and [j.get("device") for j in js] != a.devices.split(","):
        bad.append("eval.json device fields %s" % [j.get("device") for j in js])
    key = lambda r: (r["policy"], r["context"], r["model"])
    ref = {key(r): r for r in js[0]["results"]}
    worst = 0.0
    for path, j in zip(a.files[1:], js[1:]):
        name = os.path.basename(os.path.dirname(os.path.abspath(path)))
        cells = {key(r): r for r in j["results"]}
        for k, rc in ref.items():
            rg = cells.get(k)
            if rg is None:
                bad.append(f"{k} missing ({name})")
                continue
            rel = abs(rg["ppl"] - rc["ppl"]) / rc["ppl"]
            worst = max(worst, rel)
            if rel > a.rel:
                bad.append(f"{k} {name}: ppl {rg['ppl']} vs {rc['ppl']}")
            if rg["kv_bytes_per_token"] != rc["kv_bytes_per_token"]:
                bad.append(f"{k} {name}: kv bytes differ")
            if rg.get("effective_stride_per_layer") != rc.get("effective_stride_per_layer"):
                bad.append(f"{k} {name}: strides")
    if len({round(r["ppl"], 6) for r in ref.values()}) < a.distinct:
        bad.append(f"fewer than {a.distinct} distinct PPLs among the cells")
    print(len(ref), "%.2e" % worst, "; ".join(bad[:4]) or "none")


if __name__ == "__main__":
    main()
