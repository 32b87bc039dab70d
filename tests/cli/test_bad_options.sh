#!/usr/bin/env bash
# Option values out of range are refused with a non-zero exit and a message
# naming the option, instead of crashing or being accepted silently.
. "$(dirname "$0")/../lib.sh" || exit 1
refused() { # name pattern command...
    local name=$1 pat=$2; shift 2
    if timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"; then fail "$name" "exited 0"; return; fi
    local rc=$?
    if [ $rc -ge 124 ]; then fail "$name" "crashed or hung (status $rc): $(tail -2 "$tmp/err")"; return; fi
    grep -q -- "$pat" "$tmp/err" && ok "$name" || fail "$name" "message does not name '$pat': $(tail -2 "$tmp/err")"
}
printf '{"text": "hello world, a small document"}\n' >"$tmp/in.jsonl"
refused "prepare --threads 100000 refused" "--threads" $K prepare --input "$tmp/in.jsonl" --out "$tmp/o1" --threads 100000
refused "prepare --threads -3 refused" "--threads" $K prepare --input "$tmp/in.jsonl" --out "$tmp/o2" --threads -3
# counts and sizes are refused below their range by the option table, naming
# the option (--markers -1 used to mean "the records per document")
refused "prepare --min-tokens 0 refused" "--min-tokens expects an integer >= 1, got '0'" \
    $K prepare --input "$tmp/in.jsonl" --out "$tmp/o3" --min-tokens 0
refused "prepare --synthetic mqar --markers -1 refused" "--markers expects an integer >= 0, got '-1'" \
    $K prepare --synthetic mqar --markers -1 --out "$tmp/o4"
refused "prepare --synthetic copy --copy-offset -2 refused" "--copy-offset expects an integer >= 0, got '-2'" \
    $K prepare --synthetic copy --copy-offset -2 --out "$tmp/o5"
[ ! -e "$tmp/o3" ] && [ ! -e "$tmp/o4" ] && [ ! -e "$tmp/o5" ] && ok "prepare: the refused options wrote no --out" \
    || fail "prepare refusals" "an --out directory was created"
# a synthetic vocabulary must fit the shards' 32-bit ids and the generator's
# table: refused at once, naming the option and its range (2^32 used to
# allocate gigabytes, then wrap the shard's vocab_size to 0)
for v in 4294967296 16777217 7; do
    refused "prepare --synthetic recall --vocab $v refused" "--vocab must be in \[8, 16777216\] (got $v)" \
        $K prepare --synthetic recall --vocab $v --out "$tmp/syn$v"
done

# the cache budget: a count or L/N, whole numbers only (no SIGFPE at L/0, no "1e3" read as 1)
for k in L/0 L/abc L/ 1e3 8x 2.9 ""; do
    refused "bench decode --K '$k' refused" "--K '$k'" $K bench decode --preset tiny --device cpu --L 64 --steps 1 --K "$k"
done

# an option is named as the user typed it: --K or its alias --budget, --S
# or --last, --L or --context (each alone, not a list of others); the
# source location "(at file.c:N)" only with KVCPT_DEBUG=1
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 20 --out "$tmp/names" >/dev/null
ev=($K eval --model tiny --data "$tmp/names" --split train --policies full --out "$tmp/names_out")
named() { # name, the whole error line, args...
    local name=$1 want=$2; shift 2
    "${ev[@]}" "$@" >/dev/null 2>"$tmp/err"
    [ "$(cat "$tmp/err")" = "$want" ] && ok "$name" || fail "$name" "got '$(cat "$tmp/err")', want '$want'"
}
named "eval --K 2000 names --K" "kvcpt: error: --K '2000' gives 2000 keys, above the context 32" --L 32 --S 4 --K 2000
named "eval --budget 2000 names --budget" "kvcpt: error: --budget '2000' gives 2000 keys, above the context 32" \
    --L 32 --S 4 --budget 2000
named "eval --S 0 names --S alone" "kvcpt: error: kvcpt eval: --S expects an integer >= 1, got '0'" --S 0
named "eval --last 0 names --last" "kvcpt: error: kvcpt eval: --last expects an integer >= 1, got '0'" --last 0
named "eval --L 1k names --L" "kvcpt: error: --L: expected up to 8 comma-separated integers (got '1k')" --L 1k
named "eval --context 1k names --context" "kvcpt: error: --context: expected up to 8 comma-separated integers (got '1k')" \
    --context 1k
KVCPT_DEBUG=1 "${ev[@]}" --S 0 >/dev/null 2>"$tmp/err"
grep -q "^kvcpt: error: kvcpt eval: --S expects an integer >= 1, got '0' (at common/options.c:[0-9]*)$" "$tmp/err" \
    && ok "KVCPT_DEBUG=1 adds the source location" || fail "KVCPT_DEBUG=1" "$(cat "$tmp/err")"
# a data directory without a manifest: said so, with no jansson "(line 0)"
named "eval --data without a manifest.json: no '(line 0)'" "kvcpt: error: data directory '$tmp/nowhere' has no readable \
manifest.json ($tmp/nowhere/manifest.json: No such file or directory); give the directory \`kvcpt prepare --out\` wrote \
(a dataset is complete only once prepare has written its manifest)" --data "$tmp/nowhere"

# config.json sizes and ids out of range (the model's products must never wrap)
base='"vocab_size":512,"intermediate_size":768,"num_key_value_heads":2,"rms_norm_eps":1e-5,"rope_theta":10000.0,"max_position_embeddings":4096,"tie_word_embeddings":false'
cfg() { # name json-fields -> $tmp/name/config.json
    mkdir -p "$tmp/$1" && echo "{$base,$2}" >"$tmp/$1/config.json"
}
ok_fields='"hidden_size":256,"num_hidden_layers":4,"num_attention_heads":8,"head_dim":32,"bos_token_id":1,"eos_token_id":2'
cfg good "$ok_fields"
$K bench model --preset "$tmp/good" --device cpu --seq 8 --steps 1 --warmup 0 --no-peers >/dev/null 2>"$tmp/err" \
    && ok "config: the base config is accepted" || fail "config: base config" "$(tail -2 "$tmp/err")"
cfg heads '"hidden_size":256,"num_hidden_layers":4,"num_attention_heads":4611686018427387906,"head_dim":4,"bos_token_id":1,"eos_token_id":2'
refused "config: num_attention_heads 2^62+2 with head_dim 4 (Hq*D wraps to 8) refused" "num_attention_heads" $K bench model --preset "$tmp/heads" --device cpu
cfg hidden '"hidden_size":4611686018427387904,"num_hidden_layers":4,"num_attention_heads":8,"head_dim":32,"bos_token_id":1,"eos_token_id":2'
refused "config: hidden_size 2^62 refused" "hidden_size" $K bench model --preset "$tmp/hidden" --device cpu
cfg layers32 '"hidden_size":256,"num_hidden_layers":4294967298,"num_attention_heads":8,"head_dim":32,"bos_token_id":1,"eos_token_id":2'
refused "config: num_hidden_layers 2^32+2 refused" "num_hidden_layers" $K bench model --preset "$tmp/layers32" --device cpu
cfg layers1e9 '"hidden_size":256,"num_hidden_layers":1000000000,"num_attention_heads":8,"head_dim":32,"bos_token_id":1,"eos_token_id":2'
refused "config: num_hidden_layers 1e9 refused" "num_hidden_layers" $K bench model --preset "$tmp/layers1e9" --device cpu
cfg bos '"hidden_size":256,"num_hidden_layers":4,"num_attention_heads":8,"head_dim":32,"bos_token_id":-5,"eos_token_id":2'
refused "config: bos_token_id -5 refused" "bos_token_id" $K bench model --preset "$tmp/bos" --device cpu
cfg eos '"hidden_size":256,"num_hidden_layers":4,"num_attention_heads":8,"head_dim":32,"bos_token_id":1,"eos_token_id":[2,512]'
refused "config: eos_token_id >= vocab_size refused" "eos_token_id" $K bench model --preset "$tmp/eos" --device cpu

# training numbers that cannot be right
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 20 --out "$tmp/data" >/dev/null
refused "train: grad_clip=nan refused" "grad_clip" $K train --set model=tiny --set data="$tmp/data" \
    --set out="$tmp/run" --set grad_clip=nan --set steps=1 --set warmup_steps=0 --set L=48 --set S=8 --set K=6 \
    --set global_batch=2 --set micro_batch=2

# settings a run would trip over only after its last step (and --resume
# would repeat that step forever), or that crash or mislead: refused at
# start-up, before any work, naming the value
targs=(--set model=tiny --set data="$tmp/data" --set steps=1 --set warmup_steps=0 --set L=48 --set S=8 --set K=6
       --set global_batch=2 --set micro_batch=2)
started() { [ -e "$1/log.jsonl" ] && echo " (but $1/log.jsonl was written: refused after start-up)"; }
for v in -1 -1000 1073741825; do
    refused "train: eval_batches=$v refused" "'eval_batches' must be in \[0," $K train "${targs[@]}" --set eval_batches=$v --set out="$tmp/eb$v"
done
refused "train: mask=2 refused" "'mask' must be 0 or 1 (got 2)" $K train "${targs[@]}" --set mask=2 --set out="$tmp/m2"
refused "train: reshard_after_forward=2 refused" "'reshard_after_forward' must be 0 or 1 (got 2)" \
    $K train "${targs[@]}" --set reshard_after_forward=2 --set out="$tmp/r2"
# a model config asking for biases kvcpt's Llama has no tensors for: refused
# naming the field and the file, for random init and for CPT alike
cfg bias_a '"hidden_size":256,"num_hidden_layers":4,"num_attention_heads":8,"head_dim":32,"attention_bias":true'
refused "train: a model config with attention_bias true refused" "bias_a/config.json: config field 'attention_bias' is true" \
    $K train "${targs[@]}" --set model="$tmp/bias_a" --set out="$tmp/ba"
mkdir -p "$tmp/bias_m" && $K train "${targs[@]}" --set out="$tmp/plain" >/dev/null 2>&1 && cp "$tmp/plain/model/"* "$tmp/bias_m/" &&
    sed -i 's/"mlp_bias": false/"mlp_bias": true/' "$tmp/bias_m/config.json" || fail "train: biased CPT fixture" "no model"
refused "train: CPT from a model with mlp_bias true refused" "bias_m/config.json: config field 'mlp_bias' is true" \
    $K train "${targs[@]}" --set model="$tmp/bias_m" --set init=pretrained --set out="$tmp/bm"
[ ! -e "$tmp/ba/log.jsonl" ] && [ ! -e "$tmp/bm/log.jsonl" ] && ok "train: the biased models were refused before any step" \
    || fail "train: biased models" "a log.jsonl was written"
# stderr is a file here, not a terminal: the progress line's interval divides
refused "train: log_interval=0 refused (no division by zero)" "'log_interval' must be >= 1 (got 0)" \
    $K train "${targs[@]}" --set log_interval=0 --set out="$tmp/li0"
refused "train: epochs=2^62 refused, naming the overflow (not the split's size)" "'epochs' (4611686018427387904) x .* overflows" \
    $K train "${targs[@]}" --set steps=0 --set epochs=4611686018427387904 --set out="$tmp/ep"
refused "train: an out with a line break refused at start-up, naming it" "'out' holds a control character (0x0a, a line break)" \
    $K train "${targs[@]}" --set out="$tmp/nl
x"
[ ! -e "$tmp/nl
x/log.jsonl" ] && ok "train: the refused out with a line break was not started" || fail "out with a line break" "log.jsonl written"
# a model directory whose name is not UTF-8 (byte 0xFF): config.json is
# UTF-8 JSON and would drop the key, so the value is refused naming it
ffdir="$tmp/model"$'\xff'
mkdir -p "$ffdir" && cat >"$ffdir/config.json" <<'JSON'
{"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 1, "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
refused "train: a model path that is not UTF-8 refused, naming the key" "'model' is not valid UTF-8 (byte 0xff" \
    $K train "${targs[@]}" --set model="$ffdir" --set out="$tmp/ff"
# micro_batch x ranks wraps to 0 under 4 ranks (2^62 x 4 = 2^64): refused, no SIGFPE
if command -v mpirun >/dev/null 2>&1 && $K --version | grep -q "collectives: single, mpi"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    refused "train under mpirun: micro_batch 2^62 x 4 ranks overflowing refused" "'micro_batch' (4611686018427387904) x ranks (4) overflows" \
        mpirun --oversubscribe -np 4 $K train "${targs[@]}" --set micro_batch=4611686018427387904 --set global_batch=4 --set out="$tmp/mb"
    # a mistake every rank finds alike is printed once, by rank 0, and the
    # launcher's notice names rank 0 as the rank that failed
    once() { # name, text, command...
        local name=$1 want=$2; shift 2
        timeout 60 "$@" >"$tmp/out" 2>&1
        local n; n=$(grep -cF -- "$want" "$tmp/out")
        if [ "$n" = 1 ] && ! grep -q "Process name: \[\[[0-9]*,[0-9]*\],[1-9]" "$tmp/out"; then ok "$name"
        else fail "$name" "printed $n times: $(head -c 600 "$tmp/out")"; fi
    }
    once "train under mpirun -np 2: a batch that does not divide is said once" "'global_batch' (2) must be divisible by 'micro_batch' (2) x ranks (2)" \
        mpirun --oversubscribe -np 2 $K train "${targs[@]}" --set out="$tmp/mp2"
    once "train under mpirun -np 2: an unknown option is said once" "unknown option '--bogus'" \
        mpirun --oversubscribe -np 2 $K train --bogus
    once "train --help under mpirun -np 2 is printed once" "usage: kvcpt train" mpirun --oversubscribe -np 2 $K train --help
else echo "skip - micro_batch x ranks under mpirun: mpirun or an MPI-enabled kvcpt is missing"; fi
# the dev split is evaluated at the end: one whose documents are shorter
# than L + S + 1 is refused at start-up, naming the split, the lengths and
# eval_batches=0; an empty one (10 documents, split seed 2, none in dev)
# means no dev evaluation
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 10 --split-seed 2 --out "$tmp/nodev" >/dev/null
/usr/bin/python3 -c "import json,sys;sys.exit(json.load(open('$tmp/nodev/manifest.json'))['splits']['dev']['documents'] != 0)" \
    || fail "empty dev split premise" "split seed 2 put documents into dev"
# an empty dev split (a small corpus) is no dev split: the run trains
# without a dev evaluation and says so, naming eval_batches=0; asking for
# one every N steps is refused at start-up, naming both keys
if $K train "${targs[@]}" --set data="$tmp/nodev" --set out="$tmp/nd" >/dev/null 2>"$tmp/err" &&
   grep -q "note: data '$tmp/nodev': its dev split holds no document; no dev evaluation (set eval_batches=0" "$tmp/err" &&
   [ -s "$tmp/nd/log.jsonl" ] && ! grep -q dev_loss "$tmp/nd/log.jsonl"; then
    ok "train: an empty dev split trains without a dev evaluation, saying so and naming eval_batches=0"
else fail "train on an empty dev split" "$(tail -3 "$tmp/err")"; fi
refused "train: eval_interval=1 on an empty dev split refused, naming eval_interval=0 eval_batches=0" \
    "its dev split holds no document .*set eval_interval=0 eval_batches=0" \
    $K train "${targs[@]}" --set data="$tmp/nodev" --set eval_interval=1 --set out="$tmp/nd1"
[ ! -e "$tmp/nd1/log.jsonl" ] && ok "train: the refused eval_interval run did not start" || fail "eval_interval on an empty dev split" "trained$(started "$tmp/nd1")"
# short dev documents: the dev shard of a 30-token dataset in place of the 57-token one's
$K prepare --synthetic recall --vocab 64 --doc-tokens 30 --query-tail 9 --docs 60 --out "$tmp/short" >/dev/null
cp -r "$tmp/data" "$tmp/shortdev" && cp "$tmp/short/dev/shard_000000.bin" "$tmp/shortdev/dev/shard_000000.bin"
/usr/bin/python3 - "$tmp/shortdev/manifest.json" "$tmp/short/manifest.json" <<'PY'
import json, sys
m, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
m["splits"]["dev"] = s["splits"]["dev"]
json.dump(m, open(sys.argv[1], "w"))
PY
refused "train: a dev split of 30-token documents refused for 57-token samples, naming the lengths and eval_batches=0" "the longest 30 tokens.*or set eval_batches=0 (no dev evaluation)" \
    $K train "${targs[@]}" --set data="$tmp/shortdev" --set out="$tmp/sd"
[ ! -e "$tmp/sd/log.jsonl" ] && ok "train: the run on a too-short dev split did not start" || fail "too-short dev split" "trained$(started "$tmp/sd")"

# every step trains: the last step of a linear decay to 0 (here the only
# one, no warm-up) runs above the end value
$K train "${targs[@]}" --set lr=1e-3 --set out="$tmp/one" >/dev/null 2>&1
lr1=$(/usr/bin/python3 -c "import json;print(json.loads(open('$tmp/one/log.jsonl').readline())['lr'])" 2>/dev/null)
[ "$lr1" = "0.001" ] && ok "train: steps=1 warmup_steps=0 takes its step at the peak lr (logged $lr1)" \
    || fail "steps=1 warmup_steps=0" "step 1 ran at lr '$lr1', not the peak 0.001"

# a loss plot that cannot be drawn is a warning saying so; the model is written first
mkdir -p "$tmp/plotdir/loss.png/x"
if $K train "${targs[@]}" --set out="$tmp/plotdir" --resume >/dev/null 2>"$tmp/err" && [ -f "$tmp/plotdir/model/model.safetensors" ] &&
   grep -q "loss plot .* was not drawn" "$tmp/err"; then
    ok "train: a loss plot that cannot be drawn (loss.png is a directory) is a warning; the model is written"
else fail "train: failed loss plot" "$(tail -2 "$tmp/err")"; fi
# an out beginning with '-' must not reach gnuplot as an option
kbin=$(realpath "$K")
if (cd "$tmp" && "$kbin" train "${targs[@]}" --set out=-dashrun >/dev/null 2>"$tmp/err") &&
   head -c 8 "$tmp/-dashrun/loss.png" 2>/dev/null | od -An -c | grep -q "P   N   G"; then
    ok "train: out '-dashrun' (relative, leading '-'): loss.png is drawn"
elif grep -q "not drawn" "$tmp/err"; then ok "train: out '-dashrun': the plot says it was not drawn"
else fail "train: out beginning with '-'" "no loss.png and no 'not drawn' warning: $(tail -2 "$tmp/err")"; fi

# loss_on: answers needs data whose manifest marks them
refused "train: loss_on=answers on data without answers refused" "loss_on=answers needs data" $K train --set model=tiny \
    --set data="$tmp/data" --set out="$tmp/run" --set loss_on=answers --set steps=1 --set warmup_steps=0 --set L=48 \
    --set S=8 --set K=6 --set global_batch=2 --set micro_batch=2
refused "train: loss_on=some refused" "loss_on" $K train --set model=tiny --set data="$tmp/data" --set out="$tmp/run" \
    --set loss_on=some --set steps=1 --set L=48 --set S=8 --set K=6 --set global_batch=2 --set micro_batch=2
$K prepare --synthetic mqar --vocab 64 --doc-tokens 57 --query-tail 16 --values 3 --markers 12 --docs 20 --out "$tmp/mq" >/dev/null
first_loss() { # loss_on -> the logged loss of step 1
    $K train --set model=tiny --set data="$tmp/mq" --set out="$tmp/lo_$1" --set loss_on="$1" --set steps=1 \
        --set warmup_steps=0 --set L=48 --set S=8 --set K=6 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 &&
        /usr/bin/python3 -c "import json;print(json.loads(open('$tmp/lo_$1/log.jsonl').readline())['loss'])"
}
la=$(first_loss all); lq=$(first_loss answers)
[ -n "$la" ] && [ -n "$lq" ] && [ "$la" != "$lq" ] && ok "train: loss_on=answers runs on mqar data and scores other targets than all ($lq vs $la)" \
    || fail "train loss_on=answers" "all '$la', answers '$lq'"
# a window of L + S + 1 = 9 tokens holds no repeated marker's value: said
# so at start-up, not as a backward pass without a forward one
refused "train: loss_on=answers with no answer in the sample window refused, saying so" "no answer falls in the sample window of L + S + 1 = 9" \
    $K train --set model=tiny --set data="$tmp/mq" --set out="$tmp/lo_win" --set loss_on=answers --set steps=1 \
    --set warmup_steps=0 --set L=8 --set S=0 --set K=2 --set global_batch=2 --set micro_batch=2

# a dataset with no document is refused unless asked for
refused "prepare keeping no document refused (every one below --min-tokens)" "no document kept" \
    $K prepare --input "$tmp/in.jsonl" --out "$tmp/empty" --min-tokens 100000
[ ! -e "$tmp/empty/manifest.json" ] && ok "the refused empty dataset has no manifest" || fail "empty dataset" "manifest.json written"
$K prepare --input "$tmp/in.jsonl" --out "$tmp/empty2" --min-tokens 100000 --allow-empty >/dev/null 2>&1 \
    && [ -s "$tmp/empty2/manifest.json" ] && ok "prepare --allow-empty writes the empty dataset" || fail "--allow-empty" "not written"

# --resume over a damaged log.jsonl (a line that is not a record) is refused
# naming the line, instead of dropping what it cannot parse
rargs=(--set model=tiny --set data="$tmp/data" --set L=48 --set S=8 --set K=6 --set warmup_steps=1
       --set global_batch=2 --set micro_batch=2 --set ckpt_interval=2 --set out="$tmp/dmg")
$K train "${rargs[@]}" --set steps=2 >/dev/null 2>&1 || fail "train for the damaged-log case" "did not run"
printf 'garbage\0\0\n' >>"$tmp/dmg/log.jsonl"
refused "--resume over a damaged log.jsonl refused, naming the line" "log.jsonl line 3 is not a log record" \
    $K train "${rargs[@]}" --set steps=4 --resume --allow-schedule-change

# --resume with a changed global_batch or seed would be another run: refused
rargs2=(--set model=tiny --set data="$tmp/data" --set L=48 --set S=8 --set K=6 --set warmup_steps=1
        --set micro_batch=2 --set ckpt_interval=2 --set out="$tmp/rid")
$K train "${rargs2[@]}" --set global_batch=2 --set steps=2 >/dev/null 2>&1 || fail "train for the resume cases" "did not run"
refused "--resume with another global_batch refused, naming it" "'global_batch' is 4 but the checkpoint" \
    $K train "${rargs2[@]}" --set global_batch=4 --set steps=4 --resume --allow-schedule-change
refused "--resume with another seed refused, naming it" "'seed' is 9 but the checkpoint" \
    $K train "${rargs2[@]}" --set global_batch=2 --set seed=9 --set steps=4 --resume --allow-schedule-change
$K train "${rargs2[@]}" --set global_batch=2 --set steps=4 --resume --allow-schedule-change >/dev/null 2>"$tmp/err" \
    && ok "--resume with the same settings goes on" || fail "--resume, same settings" "$(tail -2 "$tmp/err")"

# --resume on other data would go on from the checkpoint's data position in
# other documents: refused, naming both directories
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 30 --out "$tmp/data2" >/dev/null
refused "--resume with another data directory refused, naming both" "but the checkpoint .* was written on '$tmp/data'" \
    $K train "${rargs2[@]}" --set global_batch=2 --set steps=6 --set data="$tmp/data2" --resume --allow-schedule-change
cp -r "$tmp/data" "$tmp/datacopy"
$K train "${rargs2[@]}" --set global_batch=2 --set steps=6 --set data="$tmp/datacopy" --resume --allow-schedule-change >/dev/null 2>"$tmp/err" \
    && ok "--resume on a copy of the same data (same manifest) goes on" || fail "--resume on a copy of the data" "$(tail -2 "$tmp/err")"

# a checkpoint directory renamed to another step (here step_31, the newest
# name): skipped with a warning naming both steps, the run resumes from the
# newest checkpoint whose name is its step, and the renamed one is kept
cp -r "$tmp/rid" "$tmp/ren"
last=$(ls -d "$tmp"/ren/ckpt/step_* | sort | tail -1)
prev=$(ls -d "$tmp"/ren/ckpt/step_* | sort | tail -2 | head -1)
mv "$last" "$tmp/ren/ckpt/step_31"
if $K train "${rargs2[@]}" --set global_batch=2 --set steps=8 --set out="$tmp/ren" --resume --allow-schedule-change >/dev/null 2>"$tmp/err" &&
   grep -q "manifest says step [0-9]* but the directory is named step 31" "$tmp/err" && grep -qF "resumed from $prev" "$tmp/err" &&
   [ -f "$tmp/ren/ckpt/step_31/manifest.json" ]; then
    ok "--resume skips a step_31 directory whose manifest names another step, with a warning, and keeps it"
else fail "--resume with a renamed checkpoint directory" "$(grep -v '^step' "$tmp/err" | tail -3)"; fi

# a path longer than kvcpt's path buffers: an error naming it, never a cut
# path (which would read or write another file)
long=$tmp; for i in $(seq 1 17); do long=$long/$(printf 'a%.0s' $(seq 1 250)); done
out=$($K convert --from "$long" --to "$tmp/conv" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "path too long" <<<"$out"; then ok "a 4.3 kB --from path: 'path too long'"
else fail "a 4.3 kB --from path" "rc $rc: ${out:0:200}"; fi

# a write that fails half way (here: the file-size limit, as a full disk
# would) leaves no partial *.tmp behind; SIGXFSZ ignored, so write() fails
# with EFBIG instead of killing the process
out=$( (ulimit -f 64; trap '' XFSZ; exec $K prepare --synthetic copy --vocab 2048 --docs 200 --out "$tmp/full") 2>&1); rc=$?
left=$(find "$tmp/full" -name '*.tmp' 2>/dev/null)
if [ $rc -ne 0 ] && grep -q "short write" <<<"$out" && [ -z "$left" ]; then ok "a failed write removes its .tmp (prepare, 64 KiB file limit)"
else fail "a failed write removes its .tmp" "rc $rc, left: $left, output: ${out:0:200}"; fi

# bench counts that wrap int64 or pass the model's positions (tiny and the
# base config: max_position_embeddings 4096): refused naming the option and
# the range that fits, never a wrapped bound or a wrapped allocation size
D="$K bench decode --preset tiny --device cpu"
refused "bench decode --steps 2^63-1 refused" "--steps 9223372036854775807 is out of range.*\[1, 4094\]" $D --L 64 --steps 9223372036854775807
refused "bench decode --steps 2^63-2 (L + steps + 1 wraps) refused" "--steps 9223372036854775806 is out of range.*\[1, 4094\]" \
    $D --L 64 --steps 9223372036854775806
refused "bench decode --L 2^63-1 refused" "--L 9223372036854775807 is out of range.*\[1, 4094\]" $D --L 9223372036854775807 --steps 1
refused "bench decode --L 4090 --steps 20: past max_position_embeddings, refused" "--L 4090 is out of range.*\[1, 4075\]" \
    $D --L 4090 --steps 20
refused "bench decode: the second of --L 64,5000 refused" "--L 5000 is out of range" $D --L 64,5000 --steps 1
refused "bench decode --L 0 refused" "--L 0 is out of range" $D --L 0 --steps 1
$D --L 4090 --steps 5 --json >"$tmp/out" 2>"$tmp/err" && [ "$(grep -c '"context":4090' "$tmp/out")" = 3 ] \
    && ok "bench decode --L 4090 --steps 5: the last position is the model's last, accepted" \
    || fail "bench decode at the position limit" "$(tail -2 "$tmp/err")"
M="$K bench model --preset tiny --device cpu --no-peers --steps 1 --warmup 0"
refused "bench model --batch 2^63-1 refused" "--batch 9223372036854775807 is out of range.*\[1, 2097151\]" $M --batch 9223372036854775807
refused "bench model --batch 2^62 --seq 4 (2 x batch x seq wraps) refused" "--batch 4611686018427387904 is out of range" \
    $M --batch 4611686018427387904 --seq 4
refused "bench model --seq 2^63-1 refused" "--seq 9223372036854775807 is out of range.*\[2, 4096\]" $M --seq 9223372036854775807
refused "bench model --seq 5000: past max_position_embeddings, refused" "--seq 5000 is out of range.*\[2, 4096\]" $M --seq 5000
refused "bench model --L -5 refused" "--L -5 is out of range.*\[0, 31\]" $M --seq 32 --L -5
refused "bench model --L 64 --seq 32 refused" "--L 64 is out of range.*\[0, 31\]" $M --seq 32 --L 64
refused "bench model --K -3 refused" "--K -3 is out of range.*\[0, 16\]" $M --seq 32 --L 16 --K -3
refused "bench model --pool 4 refused" "--pool 4 is out of range" $M --seq 32 --L 16 --pool 4
mkdir -p "$tmp/nodata"
E="$K bench eval --model $tmp/good --data $tmp/nodata"
refused "bench eval --L 2^63-1 refused" "--L 9223372036854775807 is out of range.*\[1, 4095\]" $E --L 9223372036854775807 --S 10
refused "bench eval --S 2^63-1 (L + S wraps) refused" "--S 9223372036854775807 is out of range.*\[1, 4032\]" $E --L 64 --S 9223372036854775807
refused "bench eval --L 4000 --S 200: past max_position_embeddings, refused" "--S 200 is out of range.*\[1, 96\]" $E --L 4000 --S 200
refused "bench eval --context 4000 --last 200: named as typed" "--last 200 is out of range: with --context 4000" $E --context 4000 --last 200
refused "bench eval --last 0 refused naming --last alone" "bench eval: --last must be >= 1 (got 0)$" $E --L 64 --last 0
