#!/usr/bin/env bash
# The attention tests can fail, both ways: a change planted in the dense
# oracle (kernels/attention_ref.c) fails the comparisons of the CPU fast
# path against it, and so does a change planted in the fast path
# (kernels/attention.c). Each plant is one line of a copy of the source,
# linked into a C test ahead of the library (make planted-test); the library
# itself is never changed. Each check also wants the comparisons the plant
# does not reach to pass, so that the binary is seen to run and the failure
# to come from the plant.
. "$(dirname "$0")/../lib.sh" || exit 1
if [ ! -f build/libkvcpt.a ]; then
    fail "planted attention changes" "build/libkvcpt.a is not built (make test-bins builds it)"
    exit 0
fi

# plant NAME SOURCE OLD NEW TEST: builds $tmp/NAME, TEST linked with a copy
# of SOURCE whose one occurrence of the text OLD reads NEW, and runs it into
# $tmp/NAME.out. Returns non-zero (after a FAIL line) when it cannot.
plant() {
    local name=$1 src=$2 old=$3 new=$4 test=$5
    if ! python3 - "$src" "$tmp/$name.c" "$old" "$new" 2>"$tmp/$name.err" <<'PY'; then
import sys
src, dst, old, new = sys.argv[1:]
text = open(src).read()
if text.count(old) != 1:
    sys.exit(f"{src} holds the text to change {text.count(old)} times, not once: {old}")
open(dst, "w").write(text.replace(old, new))
PY
        fail "plant $name" "$(cat "$tmp/$name.err")"
        return 1
    fi
    if ! make -s --no-print-directory planted-test PLANTED="$tmp/$name.c" PLANTED_OF="$src" PLANTED_TEST="$test" \
        PLANTED_OUT="$tmp/$name" >"$tmp/$name.build" 2>&1; then
        fail "plant $name" "the planted test does not build: $(tail -5 "$tmp/$name.build")"
        return 1
    fi
    "$tmp/$name" >"$tmp/$name.out" 2>&1
    return 0
}

# expect NAME WHAT FAILING... -- PASSING...: each FAILING check (a prefix of
# its name) reported FAIL in $tmp/NAME.out, each PASSING one ok.
expect() {
    local name=$1 what=$2 missing="" seen=fail c
    shift 2
    for c in "$@"; do
        if [ "$c" = -- ]; then seen=ok; continue; fi
        if [ "$seen" = fail ]; then grep -qF -- "FAIL - $c" "$tmp/$name.out" || missing="$missing [FAIL - $c]"
        else grep -qF -- "ok - $c" "$tmp/$name.out" || missing="$missing [ok - $c]"; fi
    done
    if [ -z "$missing" ]; then
        ok "planted $what: $(grep -c '^FAIL - ' "$tmp/$name.out") comparisons fail, e.g. $(grep -m1 '^FAIL - ' "$tmp/$name.out" | cut -c8-200)"
    else
        fail "planted $what" "missing$missing; output: $(grep -E '^(ok|FAIL) - ' "$tmp/$name.out" | head -c 1500)"
    fi
}

REF=kernels/attention_ref.c FAST=kernels/attention.c
BLOCKS=tests/kernels/test_attention_blocks.c MASK=tests/kernels/test_attention_mask.c
causal="causal T 1100" masked="paper's mask L 900 K 40 T 1100"

# the oracle ignores the mask: every row causal
old='if (!refresh_active(m, T) || p < m->L) {' new='if (1) {'
if plant ref_mask_blocks "$REF" "$old" "$new" "$BLOCKS"; then
    expect ref_mask_blocks "oracle without the mask (test_attention_blocks)" "$masked: out equals" \
        "$masked: dq equals" -- "$causal: out equals" "$causal: dk equals"
fi
if plant ref_mask_mask "$REF" "$old" "$new" "$MASK"; then
    expect ref_mask_mask "oracle without the mask (test_attention_mask)" "masked forward equals the dense reference" \
        "evict + restride 5: forward equals the dense reference" "evict + restride 5: dk equals the dense reference" \
        -- "K = L: output bit-identical to causal" "tie among pooled peak keeps lower positions"
fi
# the oracle's backward forgets the softmax scale in dS
if plant ref_scale "$REF" 'double ds = P[j] * (dp - di) / sqrt((double)D);' 'double ds = P[j] * (dp - di);' \
    "$BLOCKS"; then
    expect ref_scale "oracle's dS without 1/sqrt(D) (test_attention_blocks)" "$causal: dq equals" "$causal: dk equals" \
        "$masked: dq equals" -- "$causal: out equals" "$causal: dv equals"
fi
# the fast path: a masked row leaves out its own key p
if plant fast_row "$FAST" 'hk->ks + p - hk->L + 1}' 'hk->ks + p - hk->L}' "$BLOCKS"; then
    expect fast_row "fast path's masked rows one key short (test_attention_blocks)" "$masked: out equals" \
        "$masked: lse equals" -- "$causal: out equals" "$causal: dv equals"
fi
# the fast path: the causal blocks' output divided by 1.0001 times the sum
if plant fast_norm "$FAST" 'o[r * a->qs + d] /= sums[r];' 'o[r * a->qs + d] /= sums[r] * 1.0001f;' "$BLOCKS"; then
    expect fast_norm "fast path's causal blocks normalised 1e-4 off (test_attention_blocks)" "$causal: out equals" \
        -- "$causal: lse equals"
fi
