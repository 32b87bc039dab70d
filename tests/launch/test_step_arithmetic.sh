#!/usr/bin/env bash
# scripts/step_arithmetic.py, the 8B step forecast: by default the
# attention at FlashAttention-2 class rates (370/320 TFLOP/s), the
# selection at its measured 1.9 ms per layer at 16k scaled by L/16384, the
# suffix rows at their latency estimate and the optimizer at the measured
# AdamW rate are counted, each its own row, and the total is the rows'
# sum; --datasheet counts none of the three and every kernel at the peaks.
. "$(dirname "$0")/../lib.sh" || exit 1
out=$(python3 scripts/step_arithmetic.py 2>&1)
sum=$(awk '/ ms$/ { t += $(NF - 1) } END { printf "%.0f", t }' <<<"$out")
total=$(grep -o 'TFLOP/s, 3350 GB/s, .*: [0-9]* ms per step' <<<"$out" | grep -o '[0-9]* ms per step' | cut -d' ' -f1)
if grep -q "attention 370/320 TFLOP/s" <<<"$out" &&
    grep -q "^RefreshKV selection .*measured (1.9 ms/layer at 16k, x L/16384) *30.4 ms$" <<<"$out" &&
    grep -q "^suffix rows >= L, forward + backward (latency estimate; floor [0-9.]* ms) .* 110.0 ms$" <<<"$out" &&
    grep -q "^optimizer step, 8-bit AdamW on the device (8.03B parameters) .* 222.9 ms$" <<<"$out" &&
    [ -n "$total" ] && [ $((sum - total)) -le 1 ] && [ $((total - sum)) -le 1 ]; then
    ok "default forecast: FA2-class attention rates, the measured selection (32 x 0.95 ms), the suffix estimate and the optimizer (29.8 ms per 2^30 x 8.03B) in a total of ${total} ms that is its rows' sum"
else fail "default forecast" "sum $sum, total $total: $(tail -4 <<<"$out")"; fi
ds=$(python3 scripts/step_arithmetic.py --datasheet 2>&1)
if grep -q "sum at the datasheet rates:" <<<"$ds" && ! grep -q "^optimizer step\|latency estimate" <<<"$ds" &&
    [ "$(grep -o '[0-9]* ms per step' <<<"$ds" | cut -d' ' -f1)" -lt "$total" ]; then
    ok "--datasheet: the peaks only, no optimizer or latency rows, a shorter step"
else fail "--datasheet" "$(tail -2 <<<"$ds")"; fi
