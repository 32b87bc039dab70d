#!/usr/bin/env bash
# The README quotes only what the docs hold: every figure of the README's
# Results table appears in the doc its row names (its last column), on a
# line of that doc that names the figure's policy (the table's column), as
# written there or rounded to the README's decimals. A README figure edited
# by hand, or left behind when a doc is regenerated, fails here.
# Standard-library Python only.
. "$(dirname "$0")/../lib.sh" || exit 1
msg=$(/usr/bin/python3 - README.md <<'PY' 2>&1
"""Every figure in the README's Results table appears in the doc its row names,
on a line of that doc that names the figure's policy (the column)."""
import re
import sys

readme = open(sys.argv[1], encoding="utf-8").read()
sec = readme[readme.index("## Results"):readme.index("## CLI")]
rows = [l for l in sec.split("\n") if l.startswith("| ")]
head = [c.strip() for c in rows[0].strip("|").split("|")]
# a README column -> the words a doc line naming that policy holds
pattern = {"full": r"\bfull\b", "streaming": r"streaming", "h2o": r"\bh2o\b", "snapkv": r"snapkv",
           "refreshkv QC 5": r"refreshkv.*QC 5\b", "refreshkv stride 10": r"refreshkv.*stride 10\b"}


def holds(line, n):
    """the line has a number that is n or rounds to it (n's decimals)"""
    d = len(n.split(".")[1])
    for x in re.findall(r"(?<![\d.])\d+\.\d+", line):
        if len(x.split(".")[1]) >= d and f"{float(x):.{d}f}" == n:
            return True
    return False


bad, checked = [], 0
for line in rows[1:]:
    cells = [c.strip() for c in line.strip("|").split("|")]
    m = re.search(r"`(docs/[^`]+)`", cells[-1])
    if not m:
        bad.append(f"row '{cells[0]}' names no doc")
        continue
    doc = open(m.group(1), encoding="utf-8").read().split("\n")
    for col, cell in zip(head[2:-1], cells[2:-1]):
        nums = re.findall(r"\d+\.\d+", cell)
        if not nums:
            bad.append(f"row '{cells[0]}', {col}: no figure")
            continue
        lines = [l for l in doc if re.search(pattern[col], l, re.I) and all(holds(l, n) for n in nums)]
        checked += 1
        if not lines:
            bad.append(f"row '{cells[0]}', {col}: {cell} is on no line of {m.group(1)} naming {col}")
print("\n".join(bad) if bad else f"fine {checked}")
PY
)
case "$msg" in
fine*) ok "README's Results table: all ${msg#fine } cells are figures of the docs their rows name" ;;
*) fail "README's Results table" "$msg" ;;
esac
