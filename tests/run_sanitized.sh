#!/usr/bin/env bash
# `make sanitize`: every test script that runs the program as $K (tests/run.sh cli) with
# build/asan/kvcpt (AddressSanitizer + UBSan) as the program under test.
# Sanitizer reports go to files, so that a test expecting a non-zero exit
# cannot mistake a report for the refusal it wanted; the run fails when any
# report was written. Ends with "N passed, N failed" like tests/run.sh.
set -u
cd "$(dirname "$0")/.."
bin=$PWD/build/asan/kvcpt
[ -x "$bin" ] || { echo "run_sanitized.sh: $bin is not built (make sanitize builds it)" >&2; exit 2; }
reports=$PWD/build/asan/reports
rm -rf "$reports" && mkdir -p "$reports"
export KVCPT_BIN=$bin
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1:print_summary=1:report_error_type=1"
# every report's summary line also lands here (tests/sanitize/report_hook.c):
# UBSan, inside the ASan runtime, writes its reports to stderr whatever log_path says
export KVCPT_SANITIZER_REPORTS=$reports/summaries
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0"
export KVCPT_TEST_TIMEOUT=${KVCPT_TEST_TIMEOUT:-2400}
# Under mpirun, leak checking is off (memory errors are still checked): Open
# MPI unloads its plugins in MPI_Finalize, before LeakSanitizer runs, so their
# one-time allocations show as leaks from "<unknown module>" that no
# suppression can name. Leaks are checked in every single-process run.
real_mpirun=$(command -v mpirun || true)
if [ -n "$real_mpirun" ]; then
    mkdir -p build/asan/bin
    printf '#!/bin/sh\nASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" exec %s "$@"\n' "$real_mpirun" >build/asan/bin/mpirun
    chmod +x build/asan/bin/mpirun
    export PATH=$PWD/build/asan/bin:$PATH
fi
bash tests/run.sh cli
rc=$?
shopt -s nullglob
files=("$reports"/*)
if [ ${#files[@]} -gt 0 ]; then
    echo "FAIL - sanitizer: ${#files[@]} report(s) in $reports:"
    for f in "${files[@]}"; do echo "== $f"; head -30 "$f"; done
    exit 1
fi
echo "ok - sanitizer: no AddressSanitizer, LeakSanitizer or UBSan report"
exit $rc
