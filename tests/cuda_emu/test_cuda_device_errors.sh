#!/usr/bin/env bash
# How the program meets the CUDA runtime's answers about devices, on the
# emulated runtime (build/emu/kvcpt): no GPU, or no NVIDIA driver at all, is
# a quiet zero; a driver older than the runtime is said loudly, and device=auto then runs on the CPU
# saying why, instead of silently.
set -u
cd "$(dirname "$0")/../.."
K=build/emu/kvcpt
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
[ -x "$K" ] || { fail "cuda device errors" "$K is not built (make test builds it)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

KVCPT_EMU_DEVICES=0 $K --version >"$tmp/out" 2>"$tmp/err"
grep -q "visible devices: 0" "$tmp/out" && [ ! -s "$tmp/err" ] && ok "no GPU: zero devices, nothing on stderr" \
    || fail "no GPU" "$(cat "$tmp/out" "$tmp/err")"

KVCPT_EMU_DEVICES=no-driver $K --version >"$tmp/out" 2>"$tmp/err"
grep -q "visible devices: 0" "$tmp/out" && [ ! -s "$tmp/err" ] && ok "no NVIDIA driver at all (a CPU machine): zero devices, nothing on stderr" \
    || fail "no driver" "$(cat "$tmp/out" "$tmp/err")"

KVCPT_EMU_DEVICES=driver-too-old $K --version >"$tmp/out" 2>"$tmp/err"
grep -q "visible devices: 0" "$tmp/out" && grep -q "CUDA is unusable.*driver version is insufficient" "$tmp/err" \
    && ok "driver too old: zero devices, and a warning naming the runtime's error" || fail "driver too old" "$(cat "$tmp/out" "$tmp/err")"

KVCPT_EMU_DEVICES=driver-too-old $K bench model --preset tiny --seq 16 --steps 1 --warmup 0 >"$tmp/out" 2>"$tmp/err"
grep -q " cpu" "$tmp/out" && [ "$(grep -c "CUDA is unusable" "$tmp/err")" -eq 1 ] \
    && ok "driver too old: device auto runs on the CPU and says why, once" || fail "auto fallback" "$(cat "$tmp/out" "$tmp/err")"

if KVCPT_EMU_DEVICES=driver-too-old $K bench model --preset tiny --seq 16 --steps 1 --device cuda >"$tmp/out" 2>"$tmp/err"; then
    fail "driver too old, --device cuda" "exited 0"
else
    grep -q "CUDA is unusable" "$tmp/err" && grep -q "no CUDA device is visible" "$tmp/err" \
        && ok "driver too old, --device cuda: refused, with the runtime's reason" || fail "--device cuda" "$(cat "$tmp/err")"
fi
