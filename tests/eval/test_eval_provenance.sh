#!/usr/bin/env bash
# eval.json records how it was made (its "run" field: command line, working
# directory, code, data and manifest/tokenizer hashes, model files and their
# SHA-256, L, S, K, documents, every policy variant's parameters, threads,
# device, wall time), and scripts/eval_rerun.py re-runs the eval from that
# file alone and gets the same numbers; it refuses when the model changed.
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 120 --query-tail 9 --docs 20 --out "$tmp/d" >/dev/null
$K train --set model=tiny --set data="$tmp/d" --set out="$tmp/r" --set steps=1 --set warmup_steps=0 --set L=48 \
    --set S=8 --set K=6 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 \
    || { fail "setup" "kvcpt train failed"; exit 1; }
kv=$(realpath "$K")
# relative paths, from $tmp: the re-run must go back there
(cd "$tmp" && "$kv" eval --model r/model --data d --L 40,48 --S 8 --K 6 --max-docs 3 --quiet \
    --split dev --policies snapkv,refreshkv --refresh-fixed 5 --snapkv-window 2 --out e1 >/dev/null 2>"$tmp/err") \
    || { fail "eval" "$(tail -2 "$tmp/err")"; exit 1; }
msg=$(/usr/bin/python3 - "$tmp" <<'PY' 2>&1
import hashlib, json, os, sys
t = sys.argv[1]
run = json.load(open(os.path.join(t, "e1/eval.json")))["run"]
sha = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
want = {"kvcpt_version", "commit", "cwd", "executable", "data", "split", "threads", "device", "wall_seconds"}
assert want <= set(run), f"missing fields {want - set(run)}"
assert run["argv"][:2] == ["kvcpt", "eval"] and "--snapkv-window" in run["argv"], run["argv"]
assert run["cwd"] == os.path.realpath(t), run["cwd"]
assert run["data"] == "d" and run["split"] == "dev", (run["data"], run["split"])
assert run["manifest_sha256"] == sha(os.path.join(t, "d/manifest.json")), "manifest_sha256"
man = json.load(open(os.path.join(t, "d/manifest.json")))
assert run["tokenizer_sha256"] == man["tokenizer"]["sha256"], "tokenizer_sha256"
assert run["L"] == [40, 48] and run["S"] == 8 and run["K"] == "6" and run["documents"] == [3, 3], \
    (run["L"], run["S"], run["K"], run["documents"])
files = {f["file"]: f for f in run["models"][0]["files"]}
st = os.path.join(t, "r/model/model.safetensors")
assert files["model.safetensors"]["sha256"] == sha(st), "model.safetensors sha256"
assert files["model.safetensors"]["bytes"] == os.path.getsize(st), "bytes"
pol = run["policies"]
assert [p["name"] for p in pol] == ["snapkv", "refreshkv"], [p["name"] for p in pol]
assert pol[0]["window"] == 2 and pol[1]["fixed_stride"] == 5 and pol[1]["threshold"] == 0.85, pol
res = json.load(open(os.path.join(t, "e1/eval.json")))["results"]
assert all(pol[r["variant"]]["name"] in r["policy"] for r in res), "variant indices"
print("fine")
PY
)
[ "$msg" = fine ] && ok "eval.json's run field records the command, code, data and model hashes and every variant's parameters" \
    || fail "eval.json run field" "$msg"
# the re-run: from another directory, eval.json alone
if out=$(cd / && /usr/bin/python3 "$OLDPWD/scripts/eval_rerun.py" "$tmp/e1/eval.json" --out "$tmp/e2" 2>&1) \
    && cmp -s <(/usr/bin/python3 -c "import json,sys;print([r['ppl'] for r in json.load(open(sys.argv[1]))['results']])" "$tmp/e1/eval.json") \
              <(/usr/bin/python3 -c "import json,sys;print([r['ppl'] for r in json.load(open(sys.argv[1]))['results']])" "$tmp/e2/eval.json"); then
    ok "scripts/eval_rerun.py re-runs the eval from eval.json alone and gets the same numbers"
else
    fail "eval_rerun.py" "$(echo "$out" | tail -3)"
fi
# a changed model is named, and nothing is run
/usr/bin/python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-1]^=1; open(p,'wb').write(b)" "$tmp/r/model/model.safetensors"
out=$(/usr/bin/python3 scripts/eval_rerun.py "$tmp/e1/eval.json" --out "$tmp/e3" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "model.safetensors" && [ ! -e "$tmp/e3" ] \
    && ok "eval_rerun.py refuses a model whose SHA-256 changed, naming the file" \
    || fail "eval_rerun.py on a changed model" "status $rc: $out"
# eval.json holds the command line as JSON strings (UTF-8): an argument that
# is not is refused by name before any model is loaded, not as "out of memory"
mkdir -p "$tmp/"$'\xff' && cp -r "$tmp/d" "$tmp/"$'\xff'/d
if $K eval --model "$tmp/r/model" --data "$tmp/"$'\xff'/d --split dev --L 40 --S 8 --K 6 --quiet --out "$tmp/eu" \
    >"$tmp/out" 2>"$tmp/err"; then
    fail "non-UTF-8 --data" "exited 0"
elif grep -q "is not valid UTF-8 (byte 0xff" "$tmp/err" && ! grep -q policy "$tmp/out"; then
    ok "an argument that is not UTF-8 is refused, named, before any evaluation"
else
    fail "non-UTF-8 --data" "$(tail -1 "$tmp/err")"
fi
