#!/usr/bin/env bash
# The CUDA emulator's several devices (build/emu/emu_checks, from
# tests/cuda_emu/emu_checks.cu, with KVCPT_EMU_DEVICES=3):
#  - cudaSetDevice / cudaGetDevice / cudaGetDeviceProperties per device,
#    distinct PCI bus ids, an invalid ordinal refused with
#    cudaErrorInvalidDevice and recorded for cudaGetLastError;
#  - three planted bugs, device 1's buffer used while device 0 is current
#    (a copy, a memset, a kernel launch), each stop the program with a
#    message naming both devices (and the kernel, for the launch);
#  - KVCPT_EMU_DEVICES keeps its meaning for 0, unset and a bad value.
. "$(dirname "$0")/../lib.sh" || exit 1
E=${KVCPT_EMU_CHECKS:-build/emu/emu_checks} # make sanitize-emu: build/emu-asan/emu_checks
if [ ! -x "$E" ]; then echo "skip - emulated devices: $E is not built (make test builds it)"; exit 0; fi

KVCPT_EMU_DEVICES=3 "$E" devices 2>&1 || true

# NAME|what the message must hold (around the pointer's value)
expect_stops "" env KVCPT_EMU_DEVICES=3 "$E" <<'LIST'
cross-memcpy|cudaMemcpy: the source 0x| is memory of device 1, but the current device is 0
cross-memset|cudaMemset: the destination 0x| is memory of device 1, but the current device is 0
cross-launch|fill_kernel (launch 1): argument 0 (0x|) is memory of device 1, but the kernel runs on device 0
LIST

# the single-device meanings stay: unset is one device, 0 none, garbage refused
out=$("$E" devices 2>&1)
if grep -q "FAIL - KVCPT_EMU_DEVICES=3 plays three devices" <<<"$out"; then ok "KVCPT_EMU_DEVICES unset plays one device"
else fail "KVCPT_EMU_DEVICES unset" "$out"; fi
out=$(KVCPT_EMU_DEVICES=0 "$E" devices 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 0 ] && grep -q "cudaErrorNoDevice" <<<"$out"; then ok "KVCPT_EMU_DEVICES=0 plays no device"
else fail "KVCPT_EMU_DEVICES=0" "exit status $rc, output: $out"; fi
out=$(KVCPT_EMU_DEVICES=two "$E" devices 2>&1) && rc=0 || rc=$?
if [ "$rc" -eq 2 ] && grep -q "KVCPT_EMU_DEVICES=two: expected a device count" <<<"$out"; then ok "KVCPT_EMU_DEVICES=two is refused"
else fail "KVCPT_EMU_DEVICES=two" "exit status $rc, output: $out"; fi

# each device's memory size: cudaMemGetInfo and a cudaMalloc past the size
out=$(KVCPT_EMU_DEVICES=2 KVCPT_EMU_DEVICE_MEM=1M "$E" device-mem 2>&1) && rc=0 || rc=$?
echo "$out"
if [ "$rc" -eq 0 ] && grep -q "ok - a 500 KiB block past the device's size" <<<"$out" && ! grep -q FAIL <<<"$out"; then
    ok "KVCPT_EMU_DEVICE_MEM=1M: sizes, free bytes and an allocation past the size checked"
else fail "KVCPT_EMU_DEVICE_MEM=1M device-mem" "exit status $rc"; fi
# the default is an H100's 80 GiB (so the 1 MiB check above fails without the variable)
out=$(KVCPT_EMU_DEVICES=2 "$E" device-mem 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 0 ] && grep -q "FAIL - KVCPT_EMU_DEVICE_MEM=1M" <<<"$out"; then ok "KVCPT_EMU_DEVICE_MEM unset: not 1 MiB"
else fail "KVCPT_EMU_DEVICE_MEM unset" "exit status $rc, output: $out"; fi
for bad in 12Q -5 "" G 0 99999999999999999999G; do
    out=$(KVCPT_EMU_DEVICE_MEM="$bad" "$E" device-mem 2>&1) && rc=0 || rc=$?
    if [ "$rc" -eq 2 ] && grep -q "KVCPT_EMU_DEVICE_MEM=$bad: expected a positive byte count" <<<"$out"; then
        ok "KVCPT_EMU_DEVICE_MEM='$bad' is refused"
    else fail "KVCPT_EMU_DEVICE_MEM='$bad'" "exit status $rc, output: $out"; fi
done
