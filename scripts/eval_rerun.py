#!/usr/bin/env python3
"""Re-runs a `kvcpt eval` from its eval.json alone and compares the numbers.

    scripts/eval_rerun.py RUN/eval.json --out DIR [--kvcpt PATH]

eval.json's "run" field records the command line, the working directory it
ran in, and the SHA-256 of the data manifest and of every model file read.
The inputs are checked against those hashes first (a changed model or data
directory is named, and nothing runs), then the same command runs from the
same directory with --out replaced by DIR, and every result's perplexity,
interval and per-document perplexities must equal the recorded ones.
Exit 0 when they do, 1 when they differ, 2 when the inputs changed.
Standard library only.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def changed_inputs(run):
    """The recorded inputs whose bytes differ now, as messages."""
    bad = []
    cwd = run["cwd"]
    manifest = os.path.join(cwd, run["data"], "manifest.json")
    if sha256(manifest) != run["manifest_sha256"]:
        bad.append(f"{manifest}: SHA-256 differs from eval.json's run.manifest_sha256")
    for m in run["models"]:
        for f in m["files"]:
            path = f["file"] if f["file"] == m["path"] else os.path.join(m["path"], f["file"])
            path = os.path.join(cwd, path)
            if not os.path.exists(path) or sha256(path) != f["sha256"]:
                bad.append(f"{path}: missing or SHA-256 differs from eval.json's")
    return bad


def with_out(argv, out):
    """argv with every --out (and --out=) replaced by one --out OUT."""
    rest, i = [], 0
    while i < len(argv):
        if argv[i] == "--out":
            i += 2
            continue
        if argv[i].startswith("--out="):
            i += 1
            continue
        rest.append(argv[i])
        i += 1
    return rest + ["--out", out]


def numbers(results):
    return [(r["policy"], r["model"], r["context"], r["ppl"], r["ppl_ci95"], r["ppl_per_document"]) for r in results]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("eval_json")
    ap.add_argument("--out", required=True, help="directory for the re-run's eval.json")
    ap.add_argument("--kvcpt", default=None, help="the kvcpt binary (default: run.executable as recorded)")
    a = ap.parse_args()
    with open(a.eval_json) as f:
        old = json.load(f)
    run = old["run"]
    bad = changed_inputs(run)
    if bad:
        print("eval_rerun: the inputs changed since eval.json was written:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 2
    out = os.path.abspath(a.out)
    argv = with_out(run["argv"], out)
    argv[0] = os.path.abspath(a.kvcpt) if a.kvcpt else run["executable"]
    print("eval_rerun: in %s: %s" % (run["cwd"], " ".join(argv)))
    subprocess.run(argv, cwd=run["cwd"], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "eval.json")) as f:
        new = json.load(f)
    if numbers(new["results"]) != numbers(old["results"]):
        print("eval_rerun: the re-run's results differ from %s" % a.eval_json, file=sys.stderr)
        return 1
    print("eval_rerun: %d results equal to %s" % (len(new["results"]), a.eval_json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
