#!/usr/bin/env bash
# A model whose weights hold NaN: eval writes its table and eval.json with
# every cell kept (ppl null, "finite": false) and exits non-zero naming the
# problem, instead of exiting 0 with an empty results array.
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/data" >/dev/null
$K train --set model=tiny --set data="$tmp/data" --set out="$tmp/r" --set L=48 --set S=8 --set K=6 --set steps=2 \
    --set warmup_steps=1 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 || { fail "train" "did not run"; exit 1; }
# the last 1 KiB of tensor data (the final norm and the end of the last
# matrix) set to quiet NaN
/usr/bin/python3 -c '
import struct, sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read())
b[-1024:] = struct.pack("<f", float("nan")) * 256
open(p, "wb").write(b)' "$tmp/r/model/model.safetensors"
if $K eval --model "$tmp/r/model" --data "$tmp/data" --L 48 --S 8 --max-docs 2 --policies full,streaming \
    --out "$tmp/ev" >"$tmp/out" 2>"$tmp/err"; then
    fail "eval on NaN weights" "exited 0"
else
    grep -q "not finite" "$tmp/err" && ok "eval on NaN weights exits non-zero, saying the results are not finite" \
        || fail "eval on NaN weights: message" "$(tail -3 "$tmp/err")"
fi
res=$(/usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
r = j["results"]
print(len(r), all(x["ppl"] is None and x["finite"] is False for x in r), j["cells_not_finite"])' "$tmp/ev/eval.json" 2>&1)
[ "$res" = "2 True 2" ] && ok "eval.json keeps both cells, ppl null and finite false, cells_not_finite 2" \
    || fail "eval.json on NaN weights" "$res"
