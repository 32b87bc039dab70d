#!/usr/bin/env bash
# The documented figures still come out of the code: scripts/figures.sh
# remakes the demo at a reduced size and SmolLM2's PPL on one book at
# L = 1024, bit for bit on OpenBLAS's Haswell kernels, and the output must
# equal the block the docs hold under "<!-- figures: NAME -->". A change of
# CPU numerics (a kernel's sums in another order, a schedule, a default)
# fails here until the docs are regenerated with the same command.
. "$(dirname "$0")/../lib.sh" || exit 1

documented() { # doc file, name: the fenced block after the marker
    awk -v m="<!-- figures: $2 -->" '$0 == m {f = 1; next} f && /^```/ {if (in_b) exit; in_b = 1; next} in_b {print}' "$1"
}

check() { # name, doc file
    local name=$1 doc=$2 rc
    documented "$doc" "$name" >"$tmp/$name.want"
    if [ ! -s "$tmp/$name.want" ]; then
        fail "$name figures" "$doc has no block under '<!-- figures: $name -->'"
        return
    fi
    bash scripts/figures.sh "$name" "$tmp/w" >"$tmp/$name.got" 2>"$tmp/$name.err" && rc=0 || rc=$?
    if [ "$rc" = 3 ]; then
        echo "skip - $name figures: $(cat "$tmp/$name.err")"
    elif [ "$rc" != 0 ]; then
        fail "$name figures" "scripts/figures.sh $name exited $rc: $(tail -5 "$tmp/$name.err")"
    elif cmp -s "$tmp/$name.got" "$tmp/$name.want"; then
        ok "$name: scripts/figures.sh $name prints the $(wc -l <"$tmp/$name.got") lines $doc documents"
    else
        fail "$name figures" "scripts/figures.sh $name no longer prints what $doc documents (regenerate the docs' block and the figures it stands for): $(diff "$tmp/$name.want" "$tmp/$name.got" | head -12)"
    fi
}

check demo docs/results-demo.md
check smollm2 docs/results-smollm2.md
