#!/usr/bin/env bash
# The library's folders are layers, and a file includes only its own folder
# and the layers below it:
#
#   common < kernels, data < model < optim, checkpoints < parallel
#          < train, eval < bench < backends < cli
#
# Folders on one level (kernels and data, optim and checkpoints, train and
# eval) include nothing of each other: what two of them share belongs a
# level down. cli and bench are the two tools on top of the library; cli's
# `kvcpt bench` dispatches to bench's targets (cli/cmd_bench.c includes
# bench/bench.h), so bench sits just under cli and never includes it.
# backends/ holds each compute backend's registry entry, which gathers the
# seams its layers define (train/, eval/, bench/) into one table of
# common/backend.h; main registers them, so it sits between bench and cli
# and the layers below reach a backend only through the registry.
#
# And no two files include each other, nor two modules: a module is a
# source with its same-named header (eval/engine.c and eval/engine.h), and
# A including B's header while B includes A's is a circle, inside a folder
# or across. A header with no source of its name (inline helpers such as
# optim/norm_fixed_math.h, an interface table such as eval/engine_backend.h)
# may include the header of a module that includes it: nothing compiled
# depends back.
#
# Every .c/.h/.cu/.cuh under those folders is read; an include is
# resolved as the compilers do: beside the file, else from the repository
# root (-I.). The checker is first run on a copy of the tree with one
# upward include and one circle planted, and must report both, so that this
# test cannot pass by reading nothing.
. "$(dirname "$0")/../lib.sh" || exit 1

cat >"$tmp/check_layers.py" <<'PY'
import os, re, sys

root = sys.argv[1]
LEVELS = [["common"], ["kernels", "data"], ["model"], ["optim", "checkpoints"], ["parallel"], ["train", "eval"],
          ["bench"], ["backends"], ["cli"]]
level = {d: i for i, ds in enumerate(LEVELS) for d in ds}
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

files = []
for d in level:
    for r, _, fs in os.walk(os.path.join(root, d)):
        files += [os.path.relpath(os.path.join(r, f), root) for f in sorted(fs) if f.endswith((".c", ".h", ".cu", ".cuh"))]
if len(files) < 100:
    print(f"FAIL - layers: only {len(files)} sources found under {root}")
    sys.exit(1)

edges = []  # (file, line, target), targets inside the layered folders only
for f in files:
    for n, text in enumerate(open(os.path.join(root, f), errors="replace"), 1):
        m = include.match(text)
        if not m:
            continue
        beside = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
        target = beside if os.path.exists(os.path.join(root, beside)) else os.path.normpath(m.group(1))
        if os.path.exists(os.path.join(root, target)) and target.split("/")[0] in level:
            edges.append((f, n, target))

upward = [e for e in edges if e[0].split("/")[0] != e[2].split("/")[0]
          and level[e[2].split("/")[0]] >= level[e[0].split("/")[0]]]
for f, n, t in upward:
    a, b = f.split("/")[0], t.split("/")[0]
    how = "the same level" if level[a] == level[b] else "a higher level"
    print(f"  {f}:{n} -> {t} ({b}/ is on {how} than {a}/)")
if upward:
    print(f"FAIL - layers: {len(upward)} includes go sideways or up")
else:
    print(f"ok - layers: {len(edges)} includes in {len(files)} sources all go down (or stay in their folder)")

module = lambda p: os.path.splitext(p)[0]
compiled = {module(f) for f in files if f.endswith((".c", ".cu"))}
deps = {}
for f, n, t in edges:
    if module(f) != module(t) and module(f) in compiled and module(t) in compiled:
        deps.setdefault((module(f), module(t)), (f, n, t))
    if f != t:
        deps.setdefault((f, t), (f, n, t))
circles = sorted({tuple(sorted((a, b))) for a, b in deps if (b, a) in deps})
for a, b in circles:
    (f1, n1, t1), (f2, n2, t2) = deps[(a, b)], deps[(b, a)]
    print(f"  {f1}:{n1} -> {t1} and {f2}:{n2} -> {t2}")
if circles:
    print(f"FAIL - layers: {len(circles)} pairs of modules include each other")
else:
    print(f"ok - layers: no two of {len({module(f) for f in files})} modules include each other")
PY

# the planted copy: the sources only, one include up (common/ -> train/),
# two new headers of kernels/ that include each other, and two new modules
# each of whose sources includes the other's header
mkdir -p "$tmp/planted"
for d in common kernels data model optim checkpoints parallel train eval bench backends cli; do
    [ -d "$d" ] && cp -r "$d" "$tmp/planted/"
done
printf '#include "../train/trainer.h"\n' >>"$tmp/planted/common/util.c"
printf '#include "planted_b.h"\n' >"$tmp/planted/kernels/planted_a.h"
printf '#include "planted_a.h"\n' >"$tmp/planted/kernels/planted_b.h"
printf '#include "planted_d.h"\n' >"$tmp/planted/kernels/planted_c.c"
printf '#include "planted_c.h"\n' >"$tmp/planted/kernels/planted_d.c"
: >"$tmp/planted/kernels/planted_c.h"
: >"$tmp/planted/kernels/planted_d.h"
python3 "$tmp/check_layers.py" "$tmp/planted" >"$tmp/planted.out" 2>&1
n=$(wc -l <common/util.c)
if grep -q "^  common/util.c:$((n + 1)) -> train/trainer.h " "$tmp/planted.out" &&
   grep -q "^FAIL - layers: .* sideways or up" "$tmp/planted.out"; then
    ok "layers: a planted upward include (common/util.c -> train/trainer.h) is caught"
else
    fail "layers: a planted upward include" "not reported: $(head -c 2000 "$tmp/planted.out")"
fi
if grep -q "^  kernels/planted_a.h:1 -> kernels/planted_b.h and kernels/planted_b.h:1 -> kernels/planted_a.h" "$tmp/planted.out" &&
   grep -q "^FAIL - layers: .* include each other" "$tmp/planted.out"; then
    ok "layers: a planted circle (kernels/planted_a.h <-> planted_b.h) is caught"
else
    fail "layers: a planted circle" "not reported: $(head -c 2000 "$tmp/planted.out")"
fi
if grep -q "^  kernels/planted_c.c:1 -> kernels/planted_d.h and kernels/planted_d.c:1 -> kernels/planted_c.h" "$tmp/planted.out"; then
    ok "layers: a planted circle of modules (kernels/planted_c.c <-> planted_d.c) is caught"
else
    fail "layers: a planted circle of modules" "not reported: $(head -c 2000 "$tmp/planted.out")"
fi

python3 "$tmp/check_layers.py" .
