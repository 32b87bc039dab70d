#!/usr/bin/env bash
# What kvcpt eval writes, and when: --dump never replaces an input nor an
# earlier dump until its run succeeds; contexts, option values, --out and
# the model paths are checked before any model is loaded; eval.json keeps
# the contexts finished before a failure; a plot that was not drawn is not
# reported as written.
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 120 --query-tail 9 --docs 20 --out "$tmp/d" >/dev/null
$K train --set model=tiny --set data="$tmp/d" --set out="$tmp/r" --set steps=2 --set warmup_steps=0 --set L=48 \
    --set S=8 --set K=6 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 \
    || { fail "setup" "kvcpt train failed"; exit 1; }
ev=(eval --data "$tmp/d" --S 8 --K 6 --quiet --max-docs 1)

# refused NAME PATTERN ARGS...: a non-zero exit whose message holds
# PATTERN, and no evaluation (the results table goes to stdout at its end)
refused() {
    local name=$1 pat=$2; shift 2
    if timeout 120 $K "$@" >"$tmp/out" 2>"$tmp/err"; then fail "$name" "exited 0"; return; fi
    local rc=$?
    if [ $rc -ge 124 ]; then fail "$name" "crashed or hung (status $rc): $(tail -2 "$tmp/err")"; return; fi
    if ! grep -q -- "$pat" "$tmp/err"; then fail "$name" "message does not name '$pat': $(tail -2 "$tmp/err")"; return; fi
    if grep -q "policy" "$tmp/out"; then fail "$name" "refused only after evaluating: $(head -3 "$tmp/out")"; return; fi
    ok "$name"
}

# --dump: an input is refused before anything is written, however spelt
# (on copies, so that a dump that does overwrite one spoils no later check)
cp -r "$tmp/r/model" "$tmp/mc" && cp -r "$tmp/d" "$tmp/dc"
cp "$tmp/mc/model.safetensors" "$tmp/model.copy"
cp "$tmp/dc/manifest.json" "$tmp/manifest.copy"
refused "eval --dump into the --model directory refused" "--dump '$tmp/mc/model.safetensors' is inside --model" \
    "${ev[@]}" --model "$tmp/mc" --L 48 --out "$tmp/e_dm" --dump "$tmp/mc/model.safetensors"
cmp -s "$tmp/model.copy" "$tmp/mc/model.safetensors" && ok "the model file is untouched by a refused --dump" \
    || fail "model file after --dump" "changed (size $(stat -c %s "$tmp/mc/model.safetensors"))"
cp "$tmp/model.copy" "$tmp/mc/model.safetensors"
refused "eval --dump onto the data manifest refused" "--dump '$tmp/dc/manifest.json' is inside --data" \
    "${ev[@]}" --data "$tmp/dc" --model "$tmp/r/model" --L 48 --out "$tmp/e_dd" --dump "$tmp/dc/manifest.json"
cmp -s "$tmp/manifest.copy" "$tmp/dc/manifest.json" && ok "the data manifest is untouched by a refused --dump" \
    || fail "manifest after --dump" "changed"
cp "$tmp/manifest.copy" "$tmp/dc/manifest.json"
refused "eval --dump to a new file below --data, spelt through '..', refused" "is inside --data" \
    "${ev[@]}" --data "$tmp/dc" --model "$tmp/r/model" --L 48 --out "$tmp/e_dn" --dump "$tmp/r/../dc/test/new.jsonl"
[ ! -e "$tmp/dc/test/new.jsonl" ] && [ ! -e "$tmp/dc/test/new.jsonl.tmp" ] && ok "nothing was created below --data" \
    || fail "below --data" "$(ls "$tmp/dc/test")"
# a good dump, then a run that fails at its second model: the good one stays, no .tmp is left
$K "${ev[@]}" --model "$tmp/r/model" --L 48 --out "$tmp/e_good" --dump "$tmp/dump.jsonl" >/dev/null 2>"$tmp/err"
n=$(/usr/bin/python3 -c "import json,sys;print(sum(1 for l in open(sys.argv[1]) if json.loads(l)['doc'] >= 0))" \
    "$tmp/dump.jsonl" 2>&1)
[ "$n" = 10 ] && [ ! -e "$tmp/dump.jsonl.tmp" ] && ok "eval --dump writes one JSON line per variant and document (10)" \
    || fail "eval --dump" "$n lines: $(tail -2 "$tmp/err")"
cp "$tmp/dump.jsonl" "$tmp/dump.copy"
# (at another context, so that a dump it did write would differ from the good one; the
# second model's config.json is read before any work, its missing weights only when its turn comes)
mkdir -p "$tmp/no_weights" && cp "$tmp/r/model/config.json" "$tmp/no_weights/"
if $K "${ev[@]}" --model "$tmp/r/model" --model "$tmp/no_weights" --L 40 --out "$tmp/e_bad" \
    --dump "$tmp/dump.jsonl" >/dev/null 2>"$tmp/err"; then
    fail "dump of a failed run" "exited 0"
elif cmp -s "$tmp/dump.copy" "$tmp/dump.jsonl" && [ ! -e "$tmp/dump.jsonl.tmp" ]; then
    ok "a run that fails at its second model keeps the earlier dump whole and leaves no .tmp"
else
    fail "dump of a failed run" "the earlier dump changed ($(wc -l <"$tmp/dump.jsonl") lines) or a .tmp is left"
fi

# contexts: all checked against the data first; eval.json grows context by context
refused "eval --L 48,1000: context 1000 refused before 48 is computed, naming the longest document" \
    "--L 1000: .*longest .* has 120" "${ev[@]}" --model "$tmp/r/model" --L 48,1000 --out "$tmp/e_ctx"
[ ! -e "$tmp/e_ctx/eval.json" ] && ok "no eval.json after the refused context" || fail "e_ctx" "eval.json written"
refused "eval with a second --model that does not exist: refused before the first is evaluated" "no_such_model" \
    "${ev[@]}" --model "$tmp/r/model" --model "$tmp/no_such_model" --L 40,48 --out "$tmp/e_none"
[ ! -e "$tmp/e_none/eval.json" ] && ok "no eval.json after the refused second model" || fail "e_none" "eval.json written"
$K "${ev[@]}" --model "$tmp/r/model" --model "$tmp/no_weights" --L 40,48 --out "$tmp/e_part" >/dev/null 2>&1
got=$(/usr/bin/python3 -c "import json,sys;r=json.load(open(sys.argv[1]))['results'];
print(len(r), sorted({x['context'] for x in r}), {x['model'] for x in r} == {sys.argv[2]})" \
    "$tmp/e_part/eval.json" "$tmp/r/model" 2>&1)
[ "$got" = "20 [40, 48] True" ] \
    && ok "the second model fails: eval.json keeps the first model's finished contexts (2 x 10 variants)" \
    || fail "eval.json of a failed run" "$got"

# --out and the model paths: refused at start-up, not after the evaluation
touch "$tmp/plainfile"
refused "eval --out naming a regular file refused at start-up" "--out '$tmp/plainfile' exists and is not a directory" \
    "${ev[@]}" --model "$tmp/r/model" --L 48 --out "$tmp/plainfile"
refused "eval --out below a regular file refused at start-up" "--out '$tmp/plainfile/sub': cannot create directory" \
    "${ev[@]}" --model "$tmp/r/model" --L 48 --out "$tmp/plainfile/sub"
bad=$tmp/model_$(printf '\377')
cp -r "$tmp/r/model" "$bad"
# (grep in the C locale: its ".*" must match the byte 0xff)
LC_ALL=C refused "eval --model with a byte 0xff in its path refused at start-up" "--model .* is not valid UTF-8 (byte 0xff" \
    "${ev[@]}" --model "$bad" --L 48 --out "$tmp/e_utf8"

# option values, refused naming the option and the value (eval and the bench commands that share them)
for o in "--snapkv-kernel -7" "--snapkv-kernel 4" "--snapkv-kernel 1025" "--snapkv-window 33" "--tova-window 40" \
    "--kvec-window 33" "--refresh-fixed 0" "--refresh-fixed 10,0" "--refresh-qc 0" "--sinks -5"; do
    pat=$o
    [ "$o" = "--refresh-fixed 10,0" ] && pat="--refresh-fixed 0"
    [ "$o" = "--sinks -5" ] && pat="--sinks expects an integer >= 0, got '-5'"
    # shellcheck disable=SC2086
    refused "eval $o refused" "$pat" "${ev[@]}" --model "$tmp/r/model" --L 48 --out "$tmp/e_opt" $o
done
grep -q "must be in \[1, 32\]" <(timeout 60 $K "${ev[@]}" --model "$tmp/r/model" --L 48 --out "$tmp/e_opt" \
    --kvec-window 33 2>&1) && ok "a window above the stored prefill rows names the limit (32)" \
    || fail "window limit" "32 not named"
for o in "--snapkv-kernel 4" "--snapkv-window 33" "--sinks -1"; do
    # shellcheck disable=SC2086
    refused "bench eval $o refused" "${o}" bench eval --model "$tmp/r/model" --data "$tmp/d" --L 48 --S 8 \
        --python "$tmp/no_python" $o
done
refused "bench decode --refresh-fixed -3 refused naming the value" "--refresh-fixed -3" \
    bench decode --preset tiny --device cpu --L 64 --steps 1 --refresh-fixed -3

# a plot that cannot be drawn (eval.png is a directory): a warning, not "wrote", and still eval.json and exit 0
mkdir -p "$tmp/e_plot/eval.png"
if $K "${ev[@]}" --model "$tmp/r/model" --L 48 --out "$tmp/e_plot" >"$tmp/out" 2>"$tmp/err"; then
    if grep -q "wrote.*eval\.png" "$tmp/out"; then
        fail "undrawn plot" "reported as written: $(grep wrote "$tmp/out")"
    elif ! grep -q "eval.png was not drawn" "$tmp/err"; then
        fail "undrawn plot" "no warning: $(tail -2 "$tmp/err")"
    elif [ ! -s "$tmp/e_plot/eval.json" ]; then
        fail "undrawn plot" "no eval.json"
    else
        ok "eval.png not drawn: a warning instead of 'wrote', eval.json written, exit 0"
    fi
else
    fail "undrawn plot" "exited non-zero: $(tail -2 "$tmp/err")"
fi
if command -v gnuplot >/dev/null; then
    grep -q "wrote $tmp/e_plot/eval_steps.png" "$tmp/out" && ok "the per-step plot that was drawn is reported" \
        || fail "drawn plot" "not reported: $(cat "$tmp/out" | tail -3)"
else
    echo "skip - drawn plot reported: gnuplot is not installed"
fi
