#!/usr/bin/env bash
# The bf16 engine's attention switch (model/attn_impl.h) on the emulated
# GPU (build/emu/kvcpt): a model with head dim 16, which the tensor-core
# kernels take, trains three steps with KVCPT_ATTN=mma, cuda-core and
# cudnn (cuDNN's graphs executed by the emulator's stand-in,
# tests/cuda_emu/cudnn_emu.c), and each curve stays within the bf16
# tolerance of the CPU's (the same 3.9e-3 relative as
# test_train_cuda_emu.sh's precision=bf16 check); mma and cuda-core differ
# from each other (different kernels ran), the log names which, and the
# config key attn_impl wins over the variable. An unknown value, mma where
# no tensor-core kernel runs (precision fp32), cudnn on fp32 and cudnn with
# the eval cache's per-row mask (mask_evict) are refused naming the
# variable or key. The tensor-core backward's variant (KVCPT_ATTN_BWD): the
# one pass by default, the two passes on request, each within the same
# tolerance and named in the log, the two passes planning fewer bytes (no
# partial dQ, dK, dV: at this size their losses are the one pass's bits, so
# the plan tells them apart); an unknown value refused naming the variable.
. "$(dirname "$0")/../lib.sh" || exit 1
E=${KVCPT_EMU_KVCPT:-build/emu/kvcpt}
if [ ! -x "$E" ]; then echo "skip - attention switch on the emulated GPU: $E is not built (make test builds it)"; exit 0; fi
$K prepare --synthetic recall --vocab 64 --doc-tokens 57 --query-tail 9 --docs 40 --out "$tmp/data" >/dev/null
cat >"$tmp/config.json" <<'JSON'
{"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 1, "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 4096,
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
JSON
cat >"$tmp/cfg.json" <<JSON
{"model": "$tmp/config.json", "init": "random", "data": "$tmp/data", "L": 48, "S": 8, "K": 6, "mask": 1,
 "global_batch": 2, "micro_batch": 2, "steps": 3, "warmup_steps": 1, "lr": 3e-3, "optim": "adamw",
 "eval_interval": 0, "eval_batches": 0, "ckpt_interval": 0, "keep_last": 1}
JSON
losses() { grep -o '"loss":[^,]*' "$1/log.jsonl" | cut -d: -f2; }
$K train --config "$tmp/cfg.json" --set out="$tmp/cpu" --set device=cpu >"$tmp/cpu.log" 2>&1 ||
    fail "cpu run" "$(tail -2 "$tmp/cpu.log")"
for impl in mma cuda-core cudnn; do
    KVCPT_ATTN=$impl $E train --config "$tmp/cfg.json" --set out="$tmp/$impl" --set device=cuda --set precision=bf16 \
        >"$tmp/$impl.log" 2>&1
    case $impl in
    mma) want="tensor cores (mma)" ;;
    cuda-core) want="the CUDA-core kernels (cuda-core)" ;;
    *) want="cuDNN's fused attention (cudnn" ;;
    esac
    if grep -q "attention on $want" "$tmp/$impl.log" &&
        paste <(losses "$tmp/$impl") <(losses "$tmp/cpu") | awk '
            { n++; d = $1 - $2; if (d < 0) d = -d; if ($1 == "" || $2 == "" || d > 3.9e-3 * ($2 < 0 ? -$2 : $2)) bad++ }
            END { exit (n == 3 && !bad) ? 0 : 1 }'; then
        ok "KVCPT_ATTN=$impl: attention on $want, 3 losses within 3.9e-3 of the CPU's: $(losses "$tmp/$impl" | paste -sd' ')"
    else fail "KVCPT_ATTN=$impl" "cpu $(losses "$tmp/cpu" | paste -sd' '); $(tail -3 "$tmp/$impl.log")"; fi
done
if ! diff <(losses "$tmp/mma") <(losses "$tmp/cuda-core") >/dev/null; then
    ok "the two implementations give different bits (each ran its own kernels)"
else fail "mma vs cuda-core" "the same losses: the switch changed nothing"; fi
KVCPT_ATTN=mma $E train --config "$tmp/cfg.json" --set out="$tmp/key" --set device=cuda --set precision=bf16 \
    --set attn_impl=cuda-core >"$tmp/key.log" 2>&1
if grep -q "attention on the CUDA-core kernels" "$tmp/key.log" && diff <(losses "$tmp/cuda-core") <(losses "$tmp/key") >/dev/null &&
    grep -q '"attn_impl": "cuda-core"' "$tmp/key/train_config.json"; then
    ok "attn_impl=cuda-core wins over KVCPT_ATTN=mma: the cuda-core run's losses, bit for bit, and the key in train_config.json"
else fail "attn_impl key" "$(tail -3 "$tmp/key.log")"; fi
out=$(KVCPT_ATTN=tensor $E train --config "$tmp/cfg.json" --set out="$tmp/bad" --set device=cuda --set precision=bf16 2>&1)
if [ $? -ne 0 ] && grep -q "KVCPT_ATTN: the attention implementation must be mma (tensor cores), cuda-core, cudnn (cuDNN's fused attention) or auto (got 'tensor')" <<<"$out"; then
    ok "KVCPT_ATTN=tensor is refused naming the variable"
else fail "KVCPT_ATTN=tensor" "$(tail -2 <<<"$out")"; fi
out=$($E train --config "$tmp/cfg.json" --set out="$tmp/bad2" --set device=cuda --set attn_impl=mma 2>&1)
if [ $? -ne 0 ] && grep -q "config 'attn_impl' is mma, but the tensor-core attention kernels are the bf16 engine's" <<<"$out" &&
    [ ! -f "$tmp/bad2/log.jsonl" ]; then
    ok "attn_impl=mma with precision fp32 is refused before training, naming the key"
else fail "attn_impl=mma, fp32" "$(tail -2 <<<"$out")"; fi
out=$($E train --config "$tmp/cfg.json" --set out="$tmp/bad4" --set device=cuda --set precision=bf16 \
    --set attn_impl=cudnn --set mask_evict=1 2>&1)
if [ $? -ne 0 ] && grep -q "config 'attn_impl' is cudnn, which runs the paper's RefreshKV rows only: set mask_evict=0" <<<"$out" &&
    [ ! -f "$tmp/bad4/log.jsonl" ]; then
    ok "attn_impl=cudnn with mask_evict=1 is refused before training, naming the keys"
else fail "attn_impl=cudnn, mask_evict" "$(tail -2 <<<"$out")"; fi
out=$(KVCPT_ATTN=cudnn $E train --config "$tmp/cfg.json" --set out="$tmp/bad5" --set device=cuda 2>&1)
if [ $? -ne 0 ] && grep -q "KVCPT_ATTN is cudnn, but cuDNN's fused attention runs in the bf16 engine" <<<"$out"; then
    ok "KVCPT_ATTN=cudnn with precision fp32 is refused naming the variable"
else fail "KVCPT_ATTN=cudnn, fp32" "$(tail -2 <<<"$out")"; fi
out=$($K train --config "$tmp/cfg.json" --set out="$tmp/bad3" --set attn_impl=flash 2>&1)
if [ $? -ne 0 ] && grep -q "\-\-set: 'attn_impl': the attention implementation must be" <<<"$out"; then
    ok "attn_impl=flash is refused naming the key"
else fail "attn_impl=flash" "$(tail -2 <<<"$out")"; fi
if grep -q "attention on tensor cores (mma), backward one_pass" "$tmp/mma.log"; then
    ok "the tensor-core run's backward is the one pass by default (named in the log)"
else fail "default backward variant" "$(grep 'attention on' "$tmp/mma.log")"; fi
KVCPT_ATTN=mma KVCPT_ATTN_BWD=two_pass $E train --config "$tmp/cfg.json" --set out="$tmp/two" --set device=cuda \
    --set precision=bf16 >"$tmp/two.log" 2>&1
# the memory plan follows the variable too: the two passes have no partials
plan() { sed -n 's/.*the plan predicts .* GiB (\([0-9]*\) bytes).*/\1/p' "$1"; }
p1=$(plan "$tmp/mma.log") p2=$(plan "$tmp/two.log")
if grep -q "attention on tensor cores (mma), backward two_pass" "$tmp/two.log" &&
    paste <(losses "$tmp/two") <(losses "$tmp/cpu") | awk '
        { n++; d = $1 - $2; if (d < 0) d = -d; if ($1 == "" || $2 == "" || d > 3.9e-3 * ($2 < 0 ? -$2 : $2)) bad++ }
        END { exit (n == 3 && !bad) ? 0 : 1 }' &&
    [ -n "$p1" ] && [ -n "$p2" ] && [ "$p2" -lt "$p1" ]; then
    ok "KVCPT_ATTN_BWD=two_pass: the two passes ran, 3 losses within 3.9e-3 of the CPU's ($(losses "$tmp/two" | paste -sd' ')), planned $((p1 - p2)) bytes fewer than the one pass (its partials)"
else fail "KVCPT_ATTN_BWD=two_pass" "planned bytes $p2 vs one pass $p1; cpu $(losses "$tmp/cpu" | paste -sd' '); $(tail -3 "$tmp/two.log")"; fi
out=$(KVCPT_ATTN=mma KVCPT_ATTN_BWD=three_pass $E train --config "$tmp/cfg.json" --set out="$tmp/bad4" --set device=cuda \
    --set precision=bf16 2>&1)
if [ $? -ne 0 ] && grep -q "KVCPT_ATTN_BWD: the attention backward must be one_pass or two_pass (got 'three_pass')" <<<"$out" &&
    [ ! -f "$tmp/bad4/log.jsonl" ]; then
    ok "KVCPT_ATTN_BWD=three_pass is refused before training, naming the variable"
else fail "KVCPT_ATTN_BWD=three_pass" "$(tail -2 <<<"$out")"; fi
