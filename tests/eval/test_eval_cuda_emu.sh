#!/usr/bin/env bash
# `kvcpt eval --device cuda` end to end on the CUDA emulator
# (build/emu/kvcpt: the whole program, its kernels run on the CPU), against
# `--device cpu`: every policy variant, two contexts, the same documents;
# PPL per cell within fp32 rounding, the same keys read per token, the same
# refreshkv strides; and a GPU batch of 3 against batches of 1.
set -u
cd "$(dirname "$0")/../.."
K=${KVCPT_BIN:-./kvcpt}
# KVCPT_EMU_KVCPT picks another build of it (build/emu-asan/kvcpt: make sanitize-emu)
G=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
if [ ! -x "$G" ]; then echo "skip - eval on the emulated GPU: $G is not built (make test builds it)"; exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 80 --out "$tmp/data" >/dev/null
echo '{"model":"tiny","data":"'$tmp'/data","L":48,"S":8,"K":6,"global_batch":4,"micro_batch":2,"lr":3e-3,
"warmup_steps":2,"mask":1,"steps":12,"out":"'$tmp'/run"}' >"$tmp/train.json"
$K train --config "$tmp/train.json" >/dev/null 2>&1 || fail "train the model to evaluate" "exit status $?"
args=(--model "$tmp/run/model" --data "$tmp/data" --L 40,48 --S 8 --K L/8 --refresh-qc 2
      --max-docs 6 --bootstrap 50)
$K eval "${args[@]}" --device cpu --batch 3 --out "$tmp/cpu" >/dev/null 2>&1 || fail "eval --device cpu" "exit status $?"
out=$($G eval "${args[@]}" --device cuda --batch 3 --out "$tmp/gpu" 2>&1) || fail "eval --device cuda" "$(tail -3 <<<"$out")"
grep -q "CUDA decode engine" <<<"$out" && ok "eval --device cuda runs the GPU decode engine" \
    || fail "eval --device cuda" "no engine line: $(head -3 <<<"$out")"
$G eval "${args[@]}" --device cuda --batch 1 --out "$tmp/gpu1" >/dev/null 2>&1 || fail "eval --device cuda --batch 1" "exit $?"
# PPL within 1e-4 relative (fp32 sums in another order through S - 1 whole-model
# steps); keys read and refreshkv strides exact (the same policy decisions)
cmp=$(/usr/bin/python3 tests/eval_cells.py --rel 1e-4 --devices cpu,cuda,cuda "$tmp/cpu/eval.json" "$tmp/gpu/eval.json" \
    "$tmp/gpu1/eval.json" 2>&1)
read -r cells worst bad <<<"$cmp"
[ "$cells" = 22 ] && [ "$bad" = none ] \
    && ok "eval --device cuda: $cells cells (11 policy variants x 2 contexts) match the CPU (worst PPL rel diff $worst, same keys, same strides), batch 3 and batch 1; eval.json names the device" \
    || fail "eval cuda vs cpu" "$cmp"
echo "# margin eval cuda vs cpu: worst PPL relative difference $worst (allowed 1e-4)"
# dynamic RoPE scaling's tables depend on the window L + S: the model's
# device tables, shared by its engines, follow a second and shorter context
# (a copy of the model with max_position_embeddings 32, dynamic factor 8)
cp -r "$tmp/run/model" "$tmp/dyn"
/usr/bin/python3 - "$tmp/dyn/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(max_position_embeddings=32, rope_scaling={"rope_type": "dynamic", "factor": 8.0})
json.dump(c, open(sys.argv[1], "w"))
PY
dargs=(--model "$tmp/dyn" --data "$tmp/data" --L 48,16 --S 8 --K L/8 --policies full --max-docs 3 --bootstrap 10 --quiet)
$K eval "${dargs[@]}" --device cpu --out "$tmp/dcpu" >/dev/null 2>&1 || fail "eval --device cpu (dynamic RoPE)" "exit $?"
$G eval "${dargs[@]}" --device cuda --out "$tmp/dgpu" >/dev/null 2>&1 || fail "eval --device cuda (dynamic RoPE)" "exit $?"
dyn=$(/usr/bin/python3 - "$tmp/dcpu/eval.json" "$tmp/dgpu/eval.json" <<'PY'
import json, sys
c, g = ({r["context"]: r["ppl"] for r in json.load(open(p))["results"]} for p in sys.argv[1:3])
print(" ".join("%d:%.2e" % (L, abs(g[L] - c[L]) / c[L]) for L in sorted(c)) if c.keys() == g.keys() else "contexts differ")
PY
)
# within 1e-6 relative: the briefly trained tiny model hardly reads positions,
# so tables left from the first context move its PPL by only about 4e-6
/usr/bin/python3 -c "import sys; sys.exit(0 if all(float(x.split(':')[1]) <= 1e-6 for x in sys.argv[1:]) and len(sys.argv) == 3 else 1)" $dyn \
    && ok "eval --device cuda, dynamic RoPE: L = 48 then 16 match the CPU (relative difference per context $dyn)" \
    || fail "eval cuda vs cpu, dynamic RoPE" "$dyn"
# kvcpt bench decode on the GPU engine: every policy timed, and a full step
# reads every key while a partial (streaming) step reads the budget's
b=$($G bench decode --preset tiny --L 96 --steps 10 --device cuda --json 2>&1)
chk=$(/usr/bin/python3 -c "
import json, sys
r = {j['policy'].split()[0]: j for j in map(json.loads, sys.stdin.read().splitlines())}
f, s = r['full']['kv_bytes_per_token'], r['streaming']['kv_bytes_per_token']
# tiny: 2 layers x 2 KV heads x (K + V) x 8 floats; full at positions 96..105 reads 97..106 keys, streaming 12 + itself
print(len(r), f == 2 * 2 * 2 * 8 * 4 * 101.5, s == 2 * 2 * 2 * 8 * 4 * 13, all(j['device'] == 'cuda' and j['ms_per_token'] > 0 for j in r.values()))
" <<<"$b" 2>&1)
[ "$chk" = "3 True True True" ] && ok "bench decode --device cuda: full, streaming and refreshkv timed; full reads every key, streaming K + 1" \
    || fail "bench decode --device cuda" "$chk: $b"
# a context whose caches cannot fit the device stops before allocating, saying
# what it needs: the emulated device is given 1 MiB (a context longer than
# the documents is refused earlier, by the check against the data)
o=$(KVCPT_EMU_DEVICE_MEM=1M $G eval --model "$tmp/run/model" --data "$tmp/data" --L 48 --S 8 --device cuda --out "$tmp/x" 2>&1)
grep -q "GB of caches per document and .* GB of prefill workspace, but .* GB are free" <<<"$o" \
    && ok "eval --device cuda: a context too long for GPU memory is refused with the sizes" || fail "oversized context" "$o"
