#!/usr/bin/env bash
# A Qwen2 model (config.json model_type qwen2: q, k and v projections with
# biases) through the CPT path from random init, no Python needed: a few
# steps of `kvcpt train` with the RefreshKV mask and 8-bit AdamW on the CPU
# (the loss goes down; the final model is written as Qwen2ForCausalLM with
# its bias tensors), the same run on 2 ranks under mpirun (ZeRO-3 shards,
# biases included) equal to it bit for bit, a resume from its step-3
# checkpoint ending in the same final model bit for bit, and the run on the
# CUDA engine run by the emulator (build/emu/kvcpt) within fp32 rounding of
# the CPU's curve; then `kvcpt eval` of every policy on the trained model,
# on the CPU and on the emulated GPU, the same perplexities within 1e-4.
# The emulated and mpirun parts skip, saying so, where their binary is absent.
. "$(dirname "$0")/../lib.sh" || exit 1
E=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 80 --out "$tmp/data" >/dev/null
# Qwen2.5's config.json fields: sliding_window set but switched off
cat > "$tmp/qwen2.json" <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 64, "hidden_size": 64,
 "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 4096, "tie_word_embeddings": true,
 "use_sliding_window": false, "sliding_window": 4096, "max_window_layers": 2, "bos_token_id": 1, "eos_token_id": 2}
JSON
cat > "$tmp/cfg.json" <<JSON
{"model": "$tmp/qwen2.json", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 4, "micro_batch": 2, "steps": 6, "warmup_steps": 2, "lr": 3e-3, "optim": "adamw8bit",
 "eval_interval": 3, "eval_batches": 2, "ckpt_interval": 3, "keep_last": 3}
JSON
losses() { grep -o '"loss":[^,]*' "$1/log.jsonl" | cut -d: -f2; }

# 1. the CPU run
if $K train --config "$tmp/cfg.json" --set out="$tmp/a" >"$tmp/a.log" 2>&1; then
    first=$(losses "$tmp/a" | head -1) last=$(losses "$tmp/a" | tail -1)
    if awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f) }'; then
        ok "qwen2 trains 6 CPT steps with the RefreshKV mask on the CPU (loss $first -> $last)"
    else fail "qwen2 CPU run" "loss $first -> $last did not go down"; fi
    cfgj=$(tr -d ' \n' <"$tmp/a/model/config.json")
    nbias=$(head -c 20000 "$tmp/a/model/model.safetensors" | grep -ao 'self_attn\.[qkv]_proj\.bias' | wc -l)
    case "$cfgj" in *'"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2"'*'"use_sliding_window":false'*)
        [ "$nbias" = 6 ] && ok "the final model is a Qwen2ForCausalLM with its 6 q/k/v bias tensors" ||
            fail "final model's biases" "$nbias bias tensors in model.safetensors' header" ;;
    *) fail "final model's config.json" "$cfgj" ;;
    esac
else fail "qwen2 CPU run" "$(tail -3 "$tmp/a.log")"; fi

# 2. ZeRO-3 over 2 ranks: the same global batch, the same bits
if command -v mpirun >/dev/null 2>&1 && $K --version | grep -q "collectives: single, mpi"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    if mpirun --oversubscribe -np 2 "$K" train --config "$tmp/cfg.json" --set out="$tmp/r2" >"$tmp/r2.log" 2>&1 &&
        [ "$(losses "$tmp/r2")" = "$(losses "$tmp/a")" ] && cmp -s "$tmp/a/model/model.safetensors" "$tmp/r2/model/model.safetensors"; then
        ok "2 ranks under mpirun (ZeRO-3): the 1-rank loss curve and final model bit for bit"
    else fail "qwen2 on 2 ranks" "$(tail -3 "$tmp/r2.log")"; fi
else echo "skip - qwen2 on 2 ranks: mpirun or an MPI-enabled kvcpt is missing"; fi

# 3. resume from the step-3 checkpoint (biases and their optimizer states in it)
cp -r "$tmp/a" "$tmp/b" && rm -rf "$tmp/b/ckpt/step_00000006" "$tmp/b/model"
if $K train --config "$tmp/cfg.json" --set out="$tmp/b" --resume >"$tmp/b.log" 2>&1 && grep -q "resumed from .*step 3" "$tmp/b.log" &&
    cmp -s "$tmp/a/model/model.safetensors" "$tmp/b/model/model.safetensors"; then
    ok "resumed from the step-3 checkpoint: the same final model bit for bit"
else fail "qwen2 resume" "$(tail -3 "$tmp/b.log")"; fi

# 4. the CUDA engine (emulated): 3 steps, fp32 on both sides
args=(--model "$tmp/a/model" --data "$tmp/data" --L 48 --S 8 --K L/8 --refresh-qc 2 --max-docs 4 --bootstrap 50)
if [ -x "$E" ]; then
    $K train --config "$tmp/cfg.json" --set out="$tmp/c3" --set steps=3 >"$tmp/c3.log" 2>&1 ||
        fail "qwen2 CPU run, 3 steps" "$(tail -3 "$tmp/c3.log")"
    if $E train --config "$tmp/cfg.json" --set out="$tmp/g3" --set steps=3 --set device=cuda >"$tmp/g3.log" 2>&1 &&
        grep -q "device cuda" "$tmp/g3.log"; then
        if paste <(losses "$tmp/c3") <(losses "$tmp/g3") | awk '{ n++; d = $1 - $2; if (d < 0) d = -d;
                if ($2 == "" || d > 1e-5 * ($1 < 0 ? -$1 : $1)) bad++ } END { exit (n == 3 && !bad) ? 0 : 1 }'; then
            ok "the emulated CUDA engine's 3-step curve within 1e-5 of the CPU's"
        else fail "qwen2 CUDA curve" "cpu $(losses "$tmp/c3" | tr '\n' ' ') vs cuda $(losses "$tmp/g3" | tr '\n' ' ')"; fi
    else fail "qwen2 emulated CUDA run" "$(tail -3 "$tmp/g3.log")"; fi
else echo "skip - qwen2 on the emulated CUDA engine: $E is not built (make test builds it)"; fi

# 5. every policy on the trained model
if $K eval "${args[@]}" --device cpu --out "$tmp/ec" >"$tmp/ec.log" 2>&1; then
    n=$(/usr/bin/python3 -c "import json, math; r = json.load(open('$tmp/ec/eval.json'))['results']
print(len(r), len({x['policy'].split(' ')[0] for x in r}), all(math.isfinite(x['ppl']) and x['documents'] == 4 for x in r))")
    [ "$n" = "11 8 True" ] && ok "kvcpt eval runs every policy on it (8 policies, 11 variants, finite PPL)" ||
        fail "qwen2 eval" "results: $n"
else fail "qwen2 eval" "$(tail -3 "$tmp/ec.log")"; fi
if [ -x "$E" ]; then
    if $E eval "${args[@]}" --device cuda --out "$tmp/eg" >"$tmp/eg.log" 2>&1; then
        cmpv=$(/usr/bin/python3 - "$tmp/ec/eval.json" "$tmp/eg/eval.json" <<'PY'
import json, sys
c, g = ({r["policy"]: r["ppl"] for r in json.load(open(p))["results"]} for p in sys.argv[1:3])
worst = max(abs(g[k] - c[k]) / c[k] for k in c) if c.keys() == g.keys() else float("inf")
print(len(c), "%.2e" % worst)
PY
)
        read -r cells worst <<<"$cmpv"
        awk -v w="$worst" -v n="$cells" 'BEGIN { exit !(n == 11 && w <= 1e-4) }' &&
            ok "eval --device cuda (emulated): the CPU's $cells perplexities within 1e-4 (worst $worst)" ||
            fail "qwen2 eval cuda vs cpu" "$cmpv"
    else fail "qwen2 eval --device cuda" "$(tail -3 "$tmp/eg.log")"; fi
fi
