#!/usr/bin/env bash
# The command line as a new user meets it: every command and bench target
# answers --help; no help line carries a hand-written default (the only
# "default" is the one the parser prints from the option's starting value);
# --context/--last/--budget are aliases of eval's --L/--S/--K and give the
# same eval.json; and the README's CLI table names only commands and
# options that exist, with the defaults --help prints.
. "$(dirname "$0")/../lib.sh" || exit 1

cmds=$($K --help | awk '/^commands:/{on=1; next} on && /^  [a-z]/{print $1}')
targets=$($K bench --help 2>&1 | awk '/^targets:/{on=1; next} on && /^  [a-z]/{print $1}')
all=()
for c in $cmds; do [ "$c" = bench ] || all+=("$c"); done
for t in $targets; do all+=("bench $t"); done
[ ${#all[@]} -ge 12 ] && ok "kvcpt --help lists ${#all[@]} commands and bench targets" || fail "command list" "${all[*]}"

for c in "${all[@]}"; do
    # shellcheck disable=SC2086
    if ! $K $c --help >"$tmp/help" 2>&1; then fail "kvcpt $c --help" "exit status $?"; continue; fi
    bad=$(grep -E '^  --' "$tmp/help" | sed -E 's/ \(default [^()]*\)$//' | grep -i 'default' || true)
    [ -z "$bad" ] && ok "kvcpt $c --help: every default printed once, by the parser" \
        || fail "kvcpt $c --help: hand-written default" "$bad"
done

# the one-line summaries say what the commands do now: convert reads GGUF
# when its own --help says so, tokenize takes any tokenizer.json (its
# --tokenizer), and train runs on each device its 'device' key names
top=$($K --help)
conv_line=$(grep -E '^  convert ' <<<"$top"); tok_line=$(grep -E '^  tokenize ' <<<"$top")
if $K convert --help | grep -q GGUF && ! grep -q GGUF <<<"$conv_line"; then
    fail "kvcpt --help: convert's summary" "convert reads GGUF, its summary does not say so: $conv_line"
else ok "kvcpt --help: convert's summary names GGUF, as convert --help does"; fi
if $K tokenize --help | grep -q -- "--tokenizer PATH" && grep -q "tokenizer.json" <<<"$tok_line" && ! grep -q "Llama" <<<"$tok_line"; then
    ok "kvcpt --help: tokenize's summary names any tokenizer.json, not one model's"
else fail "kvcpt --help: tokenize's summary" "$tok_line"; fi
th=$($K train --help)
summary=$(sed -n 3p <<<"$th")
devs=$(grep -E '^  device ' <<<"$th" | grep -oE 'cpu|cuda' | sort -u | tr '\n' ' ')
if [ "$devs" = "cpu cuda " ] && grep -q CPU <<<"$summary" && grep -qE 'CUDA|GPU' <<<"$summary" && ! grep -q "reference backend" <<<"$summary"; then
    ok "kvcpt train --help: the summary names the CPU and CUDA devices of its 'device' key"
else fail "kvcpt train --help: summary" "devices '$devs', summary: $summary"; fi

# eval's aliases reach the same options
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 60 --out "$tmp/data" >/dev/null
echo '{"model":"tiny","data":"'"$tmp"'/data","L":48,"S":8,"K":6,"mask":0,"steps":2,"warmup_steps":1,"global_batch":2,"micro_batch":2,"out":"'"$tmp"'/run"}' >"$tmp/train.json"
$K train --config "$tmp/train.json" >/dev/null 2>&1 || fail "train a tiny model for the alias check" "kvcpt train failed"
model=$tmp/run/model
a=(--model "$model" --data "$tmp/data" --policies streaming,snapkv --max-docs 3 --bootstrap 10)
$K eval "${a[@]}" --L 40 --S 8 --K 10 --out "$tmp/e1" >/dev/null 2>&1
$K eval "${a[@]}" --context 40 --last 8 --budget 10 --out "$tmp/e2" >/dev/null 2>&1
strip() { /usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); [r.pop("decode_ms_per_token",None) for r in j["results"]]; j.pop("seconds",None); print(json.dumps(j["results"],sort_keys=True))' "$1"; }
if [ -f "$tmp/e1/eval.json" ] && [ "$(strip "$tmp/e1/eval.json")" = "$(strip "$tmp/e2/eval.json" 2>/dev/null)" ]; then
    ok "eval --context/--last/--budget equal --L/--S/--K (same results)"
else fail "eval aliases" "results differ or eval failed"; fi

# the README's CLI table: each `./kvcpt CMD ...` row names an existing command
# and only options that command's --help lists under their own name; a
# "`--opt N` (default D)" in the row must be what --help prints
awk '/^## CLI/{on=1; next} on && /^## /{on=0} on && /^\| `\.\/kvcpt /' README.md >"$tmp/rows"
nrows=$(wc -l <"$tmp/rows")
[ "$nrows" -ge 8 ] && ok "README CLI table: $nrows kvcpt rows found" || fail "README CLI table" "only $nrows rows"
while IFS= read -r row; do
    cmd=$(sed -E 's/^\| `\.\/kvcpt ([a-z]+)( ([a-z|\\]+))?.*/\1 \3/' <<<"$row" | sed 's/\\//g')
    set -- $cmd
    if [ "$1" = bench ]; then names=$(tr '|' ' ' <<<"${2:-}"); else names=$1; fi
    for n in $names; do
        c=$([ "$1" = bench ] && echo "bench $n" || echo "$n")
        # shellcheck disable=SC2086
        if ! $K $c --help >"$tmp/h" 2>&1; then fail "README row: kvcpt $c" "no such command"; continue; fi
        own=$(grep -oE '^  --[A-Za-z0-9-]+' "$tmp/h" | sed 's/^  //')
        missing=""
        for o in $(grep -oE -- '--[A-Za-z][A-Za-z0-9-]*' <<<"${row%%\` |*}"); do
            grep -qx -- "$o" <<<"$own" || missing="$missing $o"
        done
        [ -z "$missing" ] && ok "README row kvcpt $c: every option exists under its own name" \
            || fail "README row kvcpt $c" "options not in --help:$missing"
        while read -r o d; do
            [ -n "$o" ] || continue
            grep -E -- "^  $o " "$tmp/h" | grep -q "(default $d)" && ok "README row kvcpt $c: $o default $d as --help prints" \
                || fail "README row kvcpt $c: $o" "README says default $d; --help: $(grep -E -- "^  $o " "$tmp/h")"
        done < <(grep -oE -- '`--[A-Za-z0-9-]+ [A-Za-z]+` \(default [^)]*\)' <<<"$row" | sed -E 's/`(--[A-Za-z0-9-]+) [A-Za-z]+` \(default ([^)]*)\)/\1 \2/')
    done
done <"$tmp/rows"

# every option a policy names in eval --help is one of eval's options
$K eval --help >"$tmp/eh"
named=$(grep -E '^ +options: ' "$tmp/eh" | grep -oE -- '--[a-z0-9-]+' | sort -u)
own=$(grep -oE '^  --[A-Za-z0-9-]+' "$tmp/eh" | sed 's/^  //')
missing=""
for o in $named; do grep -qx -- "$o" <<<"$own" || missing="$missing $o"; done
[ -n "$named" ] && [ -z "$missing" ] && ok "eval --help: the $(wc -w <<<"$named") options the policies name all exist" \
    || fail "eval --help: policy options" "not options of eval:$missing"
