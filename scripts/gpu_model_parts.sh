#!/usr/bin/env bash
# Carries the real model (SmolLM2's GGUF, 93 MB) and the corpus to a lent GPU
# machine over several device commands: one command carries at most 64 MiB
# (the working tree, the bundle and whatever else it names in carry), so the
# GGUF travels as numbered parts, one call's worth each, and is joined there.
#
#   bash scripts/gpu_model_parts.sh split [--gguf F] [--corpus DIR] [--out DIR] [--room BYTES]
#       here: writes OUT/call-1/, OUT/call-2/, ... (OUT default .gpumodel,
#       git-ignored), each small enough to travel beside the working tree and
#       .gpubundle in one command, and OUT/manifest.tsv naming every file, its
#       call, size and sha256, and the whole GGUF's. The corpus's *.jsonl.zst
#       (the documents realmodel prepares; ../shared is not on the machine)
#       fill the first call, the GGUF's bytes the rest of it and the calls
#       after. ROOM is a call's space for them: 64 MiB less the tree (`git
#       ls-files`, tracked and untracked-not-ignored, as the device tool
#       copies it), less .gpubundle/bundle.tar.gz (assumed 28 MiB when not
#       built yet: it was 27.5 MB, 26.2 MiB, on 2026-11-28), less 1 MiB of margin.
#   bash scripts/gpu_model_parts.sh add [--from DIR] [--stage DIR]
#       there, in every call that carries a call-K directory: checks each
#       carried file's sha256 against the manifest and appends it to the
#       staging directory STAGE (default $KVCPT_SESSION_WORK/model-parts, the
#       session's work directory: it persists while the machine stays warm);
#       a file that is not in the manifest or whose sha256 differs is refused
#       naming it. Says which files are still missing and in which call.
#   bash scripts/gpu_model_parts.sh join [--stage DIR] [--to DIR] [--kvcpt BIN]
#       there, once every part is staged: checks every part's sha256 again,
#       concatenates them, checks the whole's, and converts it with `kvcpt
#       convert --from X.gguf --to DIR` (default $KVCPT_SESSION_WORK/smollm2-135m,
#       written under a temporary name and renamed); the corpus is at
#       STAGE/corpus. A missing or corrupt part is refused naming it.
# Exit 1 on any refusal, with the reason on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "gpu_model_parts.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || die "usage: split | add | join (see the comment at the top)"
verb=$1
shift
session=${KVCPT_SESSION_WORK:-/tmp/kvcpt-gpu-session}
gguf=third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf corpus=../shared/corpus out=.gpumodel room=
from=.gpumodel stage=$session/model-parts to=$session/smollm2-135m kvcpt=./kvcpt
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value"
    case "$verb $1" in
    "split --gguf") gguf=$2 ;; "split --corpus") corpus=$2 ;; "split --out") out=$2 ;; "split --room") room=$2 ;;
    "add --from") from=$2 ;; "add --stage" | "join --stage") stage=$2 ;;
    "join --to") to=$2 ;; "join --kvcpt") kvcpt=$2 ;;
    *) die "$verb: unknown option '$1'" ;;
    esac
    shift 2
done
MIB=$((1 << 20))
CARRY_MAX=$((64 * MIB))

sha() { sha256sum "$1" | cut -d' ' -f1; }

split_model() {
    [ -f "$gguf" ] || die "split: --gguf '$gguf' is not a file"
    [ -d "$corpus" ] || die "split: --corpus '$corpus' is not a directory"
    local tree bundle note
    tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
    if [ -f .gpubundle/bundle.tar.gz ]; then bundle=$(stat -c %s .gpubundle/bundle.tar.gz) note="measured"
    else bundle=$((28 * MIB)) note="assumed: not built yet"; fi
    if [ -z "$room" ]; then room=$((CARRY_MAX - tree - bundle - MIB)); fi
    [[ $room =~ ^[1-9][0-9]{0,17}$ ]] || die "split: --room '$room' is not a positive byte count (tree $tree + bundle $bundle leave none of 64 MiB)"
    local files=() f total=0 size
    for f in "$corpus"/*.jsonl.zst; do
        [ -f "$f" ] || continue
        files+=("$f")
        total=$((total + $(stat -c %s "$f")))
    done
    [ ${#files[@]} -gt 0 ] || die "split: --corpus '$corpus' holds no *.jsonl.zst"
    [ "$total" -lt "$room" ] || die "split: the corpus ($total bytes) does not fit one call's room ($room bytes)"
    size=$(stat -c %s "$gguf")
    rm -rf "$out.tmp" && mkdir -p "$out.tmp/call-1"
    local name manifest=$out.tmp/manifest.tsv call=1 used=$total offset=0 k=0 n part
    name=$(basename "$gguf")
    printf 'call\tkind\tname\tbytes\tsha256\n' >"$manifest"
    for f in "${files[@]}"; do
        cp "$f" "$out.tmp/call-1/"
        printf '1\tcorpus\t%s\t%s\t%s\n' "$(basename "$f")" "$(stat -c %s "$f")" "$(sha "$f")" >>"$manifest"
    done
    while [ $offset -lt "$size" ]; do
        n=$((room - used))
        [ $n -gt $((size - offset)) ] && n=$((size - offset))
        if [ $n -le 0 ]; then call=$((call + 1)) used=0; mkdir -p "$out.tmp/call-$call"; continue; fi
        k=$((k + 1))
        part=$(printf '%s.part-%02d' "$name" $k)
        dd if="$gguf" of="$out.tmp/call-$call/$part" bs=1M iflag=skip_bytes,count_bytes skip=$offset count=$n status=none
        [ "$(stat -c %s "$out.tmp/call-$call/$part")" = "$n" ] || die "split: writing $part gave the wrong size"
        printf '%d\tpart\t%s\t%d\t%s\n' $call "$part" $n "$(sha "$out.tmp/call-$call/$part")" >>"$manifest"
        offset=$((offset + n)) used=$((used + n))
    done
    printf '%d\twhole\t%s\t%d\t%s\n' $call "$name" "$size" "$(sha "$gguf")" >>"$manifest"
    rm -rf "$out" && mv "$out.tmp" "$out"
    echo "split $name ($size bytes) into $k parts over $call calls in $out (room per call $room bytes: 64 MiB less the tree's $tree, the bundle's $bundle ($note) and 1 MiB); corpus (${#files[@]} files, $total bytes) in call 1"
    for ((c = 1; c <= call; c++)); do
        echo "  call $c: carry .gpubundle $out/manifest.tsv $out/call-$c ($(du -cb "$out/call-$c"/* | tail -1 | cut -f1) bytes)"
    done
}

# the manifest rows of one kind: call kind name bytes sha256
rows() { awk -F'\t' -v k="$2" 'NR > 1 && $2 == k' "$1"; }

add_parts() {
    [ -f "$from/manifest.tsv" ] || die "add: $from/manifest.tsv is missing (carry it with each call's directory)"
    mkdir -p "$stage/corpus"
    if [ -f "$stage/manifest.tsv" ] && ! cmp -s "$from/manifest.tsv" "$stage/manifest.tsv"; then
        die "add: $from/manifest.tsv differs from the staged one in $stage (parts of another split): empty $stage first"
    fi
    local d f base row added=0
    for d in "$from"/call-*; do
        [ -d "$d" ] || continue
        for f in "$d"/*; do
            base=$(basename "$f")
            row=$(awk -F'\t' -v n="$base" 'NR > 1 && $3 == n && $2 != "whole"' "$from/manifest.tsv")
            [ -n "$row" ] || die "add: $d/$base is not in the manifest"
            [ "$(sha "$f")" = "$(cut -f5 <<<"$row")" ] || die "add: $d/$base is corrupt (its sha256 is not the manifest's); carry it again"
            if [ "$(cut -f2 <<<"$row")" = corpus ]; then cp "$f" "$stage/corpus/$base.tmp" && mv "$stage/corpus/$base.tmp" "$stage/corpus/$base"
            else cp "$f" "$stage/$base.tmp" && mv "$stage/$base.tmp" "$stage/$base"; fi
            added=$((added + 1))
        done
    done
    cp "$from/manifest.tsv" "$stage/manifest.tsv"
    local missing
    missing=$(awk -F'\t' -v s="$stage" 'NR > 1 && $2 != "whole" {
        p = s "/" ($2 == "corpus" ? "corpus/" : "") $3
        if (system("test -f \"" p "\"")) printf "%s (call %s) ", $3, $1 }' "$stage/manifest.tsv")
    echo "staged $added files in $stage; $([ -n "$missing" ] && echo "still missing: $missing" || echo "every part and corpus file is staged: join")"
}

join_parts() {
    local m=$stage/manifest.tsv name size want row part bytes sum
    [ -f "$m" ] || die "join: $m is missing (no call has staged parts with add)"
    row=$(rows "$m" whole)
    [ -n "$row" ] || die "join: $m has no whole row"
    name=$(cut -f3 <<<"$row") size=$(cut -f4 <<<"$row") want=$(cut -f5 <<<"$row")
    # every file first: a missing one is named before any work
    while IFS=$'\t' read -r call _ part bytes sum; do
        [ -f "$stage/$part" ] || die "join: part $part is missing from $stage (call $call carries it)"
    done < <(rows "$m" part)
    while IFS=$'\t' read -r call _ part bytes sum; do
        [ -f "$stage/corpus/$part" ] || die "join: corpus file $part is missing from $stage/corpus (call $call carries it)"
        [ "$(sha "$stage/corpus/$part")" = "$sum" ] || die "join: corpus file $part is corrupt in $stage/corpus (sha256 differs from the manifest's)"
    done < <(rows "$m" corpus)
    : >"$stage/$name.tmp"
    while IFS=$'\t' read -r call _ part bytes sum; do
        [ "$(stat -c %s "$stage/$part")" = "$bytes" ] && [ "$(sha "$stage/$part")" = "$sum" ] ||
            { rm -f "$stage/$name.tmp"; die "join: part $part is corrupt in $stage (its size or sha256 is not the manifest's; call $call carries it)"; }
        cat "$stage/$part" >>"$stage/$name.tmp"
    done < <(rows "$m" part)
    [ "$(stat -c %s "$stage/$name.tmp")" = "$size" ] && [ "$(sha "$stage/$name.tmp")" = "$want" ] ||
        { rm -f "$stage/$name.tmp"; die "join: the joined $name is not the manifest's whole (size or sha256 differs)"; }
    mv "$stage/$name.tmp" "$stage/$name"
    echo "joined $name ($size bytes, sha256 $want) in $stage"
    [ -x "$kvcpt" ] || die "join: --kvcpt '$kvcpt' is not an executable (unpack the bundle first)"
    rm -rf "$to.tmp"
    "$kvcpt" convert --from "$stage/$name" --to "$to.tmp" >"$stage/convert.log" 2>&1 ||
        { tail -3 "$stage/convert.log" >&2; die "join: kvcpt convert --from $stage/$name failed (log $stage/convert.log)"; }
    rm -rf "$to" && mv "$to.tmp" "$to"
    echo "converted to $to ($(ls "$to" | tr '\n' ' '))"
}

case $verb in
split) split_model ;;
add) add_parts ;;
join) join_parts ;;
*) die "unknown verb '$verb' (split, add, join)" ;;
esac
