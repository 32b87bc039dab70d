#!/usr/bin/env bash
# A FIFO where a regular file belongs (config.json, the model's tensors, the
# tokenizer, a data shard, a manifest) is refused at once, naming the path,
# instead of blocking forever in open() waiting for a writer.
. "$(dirname "$0")/../lib.sh" || exit 1
refused() { # name command...
    local name=$1; shift
    timeout 20 "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -eq 0 ]; then fail "$name" "exited 0"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then fail "$name" "blocked (killed after 20 s)"
    elif grep -q "not a regular file" "$tmp/err"; then ok "$name"
    else fail "$name" "$(tail -2 "$tmp/err")"; fi
}
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/data" >/dev/null
$K train --set model=tiny --set data="$tmp/data" --set out="$tmp/r" --set L=48 --set S=8 --set K=6 --set steps=1 \
    --set warmup_steps=0 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 || { fail "train" "did not run"; exit 1; }

mkdir -p "$tmp/m1" && mkfifo "$tmp/m1/config.json"
refused "FIFO as config.json refused" $K bench model --preset "$tmp/m1/config.json" --device cpu
cp -r "$tmp/r/model" "$tmp/m2" && rm "$tmp/m2/model.safetensors" && mkfifo "$tmp/m2/model.safetensors"
refused "FIFO as the model's tensor file refused" $K eval --model "$tmp/m2" --data "$tmp/data" --L 48 --S 8 \
    --max-docs 2 --policies full --out "$tmp/ev"
mkfifo "$tmp/tok.json"
refused "FIFO as tokenizer.json refused" sh -c "echo hi | $K tokenize --tokenizer '$tmp/tok.json'"
cp -r "$tmp/data" "$tmp/d2" && shard=$(ls "$tmp"/d2/train/*.bin | head -1) && rm "$shard" && mkfifo "$shard"
refused "FIFO as a data shard refused" $K train --set model=tiny --set data="$tmp/d2" --set out="$tmp/r2" --set L=48 \
    --set S=8 --set K=6 --set steps=1 --set warmup_steps=0 --set global_batch=2 --set micro_batch=2
cp -r "$tmp/data" "$tmp/d3" && rm "$tmp/d3/manifest.json" && mkfifo "$tmp/d3/manifest.json"
refused "FIFO as the data manifest refused" $K train --set model=tiny --set data="$tmp/d3" --set out="$tmp/r3" --set L=48 \
    --set S=8 --set K=6 --set steps=1 --set warmup_steps=0 --set global_batch=2 --set micro_batch=2
