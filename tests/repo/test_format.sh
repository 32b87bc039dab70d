#!/usr/bin/env bash
# Every C, C++ and CUDA source the repository tracks follows .clang-format
# (clang-format 19, installed by scripts/setup.sh; `make format` rewrites the
# tree to it). The check is first run on a planted file in a scratch
# directory with the same .clang-format, and must flag it, so that this test
# cannot pass by checking nothing (a missing or unreadable config, a
# clang-format that accepts everything).
. "$(dirname "$0")/../lib.sh" || exit 1

cf=${CLANG_FORMAT:-clang-format-19}
if ! command -v "$cf" >/dev/null; then
    fail "format" "$cf not found (scripts/setup.sh installs it)"
    exit 1
fi

cp .clang-format "$tmp/.clang-format"
printf 'int  main(void){return 0;}\n' >"$tmp/planted.c"
planted=$(cd "$tmp" && "$cf" --dry-run --Werror planted.c 2>&1)
if grep -q '^planted.c:1:.*code should be clang-formatted' <<<"$planted"; then
    ok "format planted"
else
    fail "format planted" "$cf did not flag a misformatted file: the check would pass anything: $planted"
fi

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc')
else
    mapfile -t files < <(find . -path ./third_party -prune -o -path ./build -prune -o \
        \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cc' \) -type f -print | sed 's|^\./||' | sort)
fi
# one run over every file; clang-format names each file that differs, and
# any other complaint (an unreadable config, an unparsable file) fails too
out=$("$cf" --dry-run --Werror "${files[@]}" 2>&1) && rc=0 || rc=$?
mapfile -t bad < <(sed -n 's/^\([^: ]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<<"$out" | sort -u)
if [ "$rc" -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
    fail "format" "$cf exited with status $rc: $(head -5 <<<"$out")"
elif [ ${#bad[@]} -eq 0 ]; then
    ok "format: ${#files[@]} files follow .clang-format"
else
    fail "format" "${#bad[@]} of ${#files[@]} files differ from .clang-format (make format rewrites them): ${bad[*]:0:10}"
fi
