#!/usr/bin/env bash
# kvcpt eval from the command line (issue 10): two models side by side
# (before -> after), every policy, JSON and PNG written; bad input rejected.
set -u
cd "$(dirname "$0")/.."
K=./kvcpt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 200 --out "$tmp/data" >/dev/null
# the "before" model: 20 steps without the mask; "after": 10 more steps with it
base='"model":"tiny","data":"'$tmp'/data","L":48,"S":8,"K":6,"global_batch":4,"micro_batch":2,"lr":3e-3,"warmup_steps":2'
echo "{$base,\"mask\":0,\"steps\":20,\"out\":\"$tmp/pre\"}" > "$tmp/pre.json"
echo "{$base,\"mask\":1,\"steps\":10,\"init\":\"pretrained\",\"model\":\"$tmp/pre/model\",\"out\":\"$tmp/cpt\"}" > "$tmp/cpt.json"
$K train --config "$tmp/pre.json" >/dev/null 2>&1 && $K train --config "$tmp/cpt.json" >/dev/null 2>&1 \
    && ok "pretrain then CPT from the pretrained model" || fail "pretrain then CPT" "train failed"
out=$($K eval --model "$tmp/pre/model" --model "$tmp/cpt/model" --data "$tmp/data" --context 40,48 --last 8 \
      --budget L/8 --refresh-qc 2 --out "$tmp/ev" --max-docs 6 2>&1)
rows=$(grep -cE -- " -> [0-9]" <<<"$out")
[ "$rows" -eq 11 ] && ok "before -> after table has every policy variant (11 rows)" || fail "table" "$rows rows: $out"
n=$(/usr/bin/python3 -c "import json;r=json.load(open('$tmp/ev/eval.json'))['results'];print(len(r), len({x['policy'].split(' ')[0] for x in r}), all(x['documents']==6 for x in r))" 2>&1)
[ "$n" = "44 8 True" ] && ok "eval.json: 8 policies (11 variants) x 2 contexts x 2 models, 6 documents each" || fail "eval.json" "$n"
[ -s "$tmp/ev/eval.png" ] && ok "eval.png written" || fail "eval.png" "missing (is gnuplot installed? make setup)"
grep -q '"effective_stride_per_layer"' "$tmp/ev/eval.json" && ok "refreshkv reports effective stride per layer" || fail "stride" "absent"
expect_err() {
    local name=$1 want=$2; shift 2
    if o=$($K eval "$@" 2>&1); then fail "$name" "accepted"; elif grep -qF -- "$want" <<<"$o"; then ok "$name"; else fail "$name" "$o"; fi
}
m="$tmp/pre/model"
expect_err "budget above context" "above the context 48" --model "$m" --data "$tmp/data" --context 48 --last 8 --budget 60 --out "$tmp/x"
expect_err "unknown policy" "unknown policy 'snapkvv'; known policies: full, streaming" --model "$m" --data "$tmp/data" --context 48 --last 8 --policies full,snapkvv --out "$tmp/x"
expect_err "every document too short" "no document of split 'test' has the 58 tokens" --model "$m" --data "$tmp/data" --context 50 --last 7 --out "$tmp/x"
exit 0
