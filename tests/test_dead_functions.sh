#!/usr/bin/env bash
# Every C function the library exports is called somewhere: by the program,
# a tool or a test (a macro that calls it counts). A function declared and
# defined but never called is dead code that still has to be read and kept
# compiling. (Kernels, C++ symbols, are not counted: their launches are.)
. "$(dirname "$0")/lib.sh"
lib=build/libkvcpt.a
if [ ! -f "$lib" ] || ! command -v nm >/dev/null; then echo "skip - dead functions: $lib or nm is missing"; exit 0; fi
nm --defined-only -g "$lib" 2>/dev/null | awk '$2 == "T" && $3 !~ /^_Z/ {print $3}' | sort -u >"$tmp/syms"
python3 - "$tmp/syms" <<'PY'
import os, re, sys
syms = open(sys.argv[1]).read().split()
dirs = ["common", "model", "kernels", "data", "optim", "checkpoints", "parallel", "train", "eval", "cli", "bench", "tests"]
files = [os.path.join(r, f) for d in dirs for r, _, fs in os.walk(d) for f in fs
                       if f.endswith((".c", ".h", ".cu", ".cuh", ".cc")) and "venv" not in r]
text = [l for p in files for l in open(p, errors="replace")]
if len(syms) < 50:
    print(f"FAIL - dead functions: only {len(syms)} exported functions found (nm output not understood)"); sys.exit()
dead = []
for s in syms:
    word = re.compile(r"\b" + re.escape(s) + r"\b")
    # a declaration or definition: the name right after a return type at the start of a line
    decl = re.compile(r"^(static |extern |inline )*(const )?(unsigned )?[A-Za-z_][A-Za-z0-9_]*[ \*]+" + re.escape(s) + r"\(")
    uses = [l for l in text if word.search(l) and not (decl.match(l) and not l.startswith("return "))]
    if not uses: dead.append(s)
if dead: print(f"FAIL - dead functions: {len(dead)} of {len(syms)} never called: {' '.join(dead)}")
else: print(f"ok - all {len(syms)} C functions exported by the library are called somewhere")
PY
