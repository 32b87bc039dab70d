#!/usr/bin/env bash
# Every C function the library exports (a non-static function defined under
# common/ kernels/ data/ model/ optim/ checkpoints/ parallel/ train/ eval/) is
# called by the library itself, the program (cli/), its benchmarks (bench/) or
# the compute backends' registry entries (backends/).
# One that only tests call is test code kept in the library: it has to be
# read, kept compiling and kept in step with the code it imitates, and the
# tests that call it check a path the program never takes. It belongs in a
# test helper (tests/*.h), or, where a test compares it with the code the
# program runs, in tests/dead_functions_allow.txt with the reason (such as
# the CPU oracle of a CUDA twin: each op has both, with one signature, and
# the GPU tests compare them). One nothing calls at all is dead.
# Kernels (C++ symbols) are not counted: their launches are.
#
# The exported functions are read from the built objects (nm), so a function
# in a backend this build lacks is not checked; the calls are read from the
# sources, comments and strings removed, declarations and definitions not
# counted (a macro or a table that names a function counts as a call), and
# from the objects' undefined symbols (a call a macro pastes together).
. "$(dirname "$0")/../lib.sh" || exit 1
allow=tests/dead_functions_allow.txt
if ! command -v nm >/dev/null || ! command -v python3 >/dev/null; then
    echo "skip - dead functions: nm or python3 is missing"; exit 0
fi
lib_dirs="common kernels data model optim checkpoints parallel train eval"
prog_dirs="cli bench $(find backends -type d | sort | tr '\n' ' ')"
# the objects built from the sources that exist now (a removed source's
# object may linger in build/); a .cu file's object from the emulator's
# build where this one has no CUDA backend
objs() {
    local d f o
    for d in "$@"; do
        for f in "$d"/*.c "$d"/*.cu; do
            [ -f "$f" ] || continue
            o=build/${f%.c}.o; [[ $f == *.cu ]] && o=build/$f.o
            [ -f "$o" ] || { [[ $f == *.cu ]] && o=build/emu/$f.o; }
            [ -f "$o" ] && echo "$o"
        done
    done
}
mapfile -t lib_objs < <(objs $lib_dirs)
mapfile -t prog_objs < <(objs $prog_dirs)
if [ "${#lib_objs[@]}" -lt 50 ]; then
    echo "skip - dead functions: the library is not built (${#lib_objs[@]} objects under build/; make kvcpt)"; exit 0
fi
nm --defined-only -g "${lib_objs[@]}" 2>/dev/null | awk '$2 == "T" && $3 !~ /^_Z/ {print $3}' | sort -u >"$tmp/exported"
nm -u "${lib_objs[@]}" "${prog_objs[@]}" 2>/dev/null | awk 'NF == 2 {print $2}' | sort -u >"$tmp/linked"
python3 - "$tmp/exported" "$tmp/linked" "$allow" "$lib_dirs $prog_dirs" <<'PY'
import os, re, sys
exported = set(open(sys.argv[1]).read().split())
linked = set(open(sys.argv[2]).read().split())
allow_path, prog_dirs = sys.argv[3], sys.argv[4].split()
if len(exported) < 100:
    print(f"FAIL - dead functions: only {len(exported)} exported functions found (nm output not understood)"); sys.exit()

def sources(dirs):
    for d in dirs:
        for root, _, names in os.walk(d):
            for n in sorted(names):
                if n.endswith((".c", ".h", ".cu", ".cuh", ".cc")):
                    yield os.path.join(root, n)

# comments and string/char literals blanked (newlines kept, so lines stay lines)
strip = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
blank = lambda m: "".join(c if c == "\n" else " " for c in m.group(0))
ident = re.compile(r"[A-Za-z_]\w*")
# a declaration or definition: NAME( after nothing but a return type
# (words and stars) on its line, or at the start of a line (its type above)
decl_prefix = re.compile(r'^\s*(?:extern\s+"C"\s+)?(?:[A-Za-z_]\w*[\s\*]+)*$')
not_types = {"return", "else", "case", "do", "goto", "sizeof", "typeof"}

def calls(dirs):
    """exported name -> the files that call it"""
    out = {}
    for path in sources(dirs):
        text = open(path, errors="replace").read()
        # keep the quotes of extern "C" so the declarations are seen as such
        text = strip.sub(lambda m: m.group(0) if m.group(0) == '"C"' else blank(m), text)
        for line in text.split("\n"):
            for m in ident.finditer(line):
                name = m.group(0)
                if name not in exported: continue
                rest = line[m.end():].lstrip()
                before = line[:m.start()]
                if rest.startswith("("):
                    words = before.split()
                    if before == "" or (words and words[0] not in not_types and decl_prefix.match(before)):
                        continue
                out.setdefault(name, set()).add(path)
    return out

program = calls(prog_dirs)
tests = calls(["tests"])
used = set(program) | (linked & exported)

allowed = {}
for n, line in enumerate(open(allow_path), 1):
    line = line.strip()
    if not line or line.startswith("#"): continue
    name, _, reason = line.partition(" ")
    if not reason.strip():
        print(f"FAIL - dead functions: {allow_path}:{n}: '{name}' has no reason"); continue
    allowed[name] = reason.strip()

only_tests = sorted(s for s in exported - used if s in tests)
uncalled = sorted(s for s in exported - used if s not in tests)
bad = [s for s in only_tests + uncalled if s not in allowed]
stale = sorted(s for s in allowed if s not in only_tests)
for s in bad:
    if s in tests:
        who = " ".join(sorted(tests[s])[:3])
        print(f"FAIL - dead functions: {s} is exported by the library but only tests call it ({who})")
    else:
        print(f"FAIL - dead functions: {s} is exported by the library and nothing calls it")
for s in stale:
    why = "the program calls it" if s in used else "not exported" if s not in exported else "nothing calls it"
    print(f"FAIL - dead functions: {allow_path} lists {s}, but {why}: remove the entry")
if not bad and not stale:
    print(f"ok - each of the {len(exported)} C functions the library exports is called by the library or the program,"
          f" but the {len(allowed)} listed in {allow_path}, which tests compare with what the program runs")
PY
