#!/usr/bin/env bash
# kvcpt's 8-bit AdamW against bitsandbytes' AdamW8bit on the CPU (the locked
# venv's bitsandbytes and torch), step by step: maps, which segments are
# 8-bit, state codes, absmax, fp32 states and parameters, with kvcpt's
# states fed back to bnb before every step, then both running freely.
# tests/tools/dump_adamw_steps writes kvcpt's side; tests/bnb_adamw_peer.py
# steps bnb and compares (what is bit-identical and what is bounded, and
# why: docs/optim.md, "bitsandbytes as the peer").
. "$(dirname "$0")/../lib.sh" || exit 1
PY=${KVCPT_PYTHON:-third_party/venv/bin/python}   # the locked venv of scripts/setup.sh
if ! python_has "$PY" torch numpy bitsandbytes; then
    fail "bnb adamw peer" "torch, numpy or bitsandbytes is not installed in $PY; run 'make setup'"
    exit 1
fi
./build/tests/tools/dump_adamw_steps "$tmp/case" 20 || { fail "bnb adamw peer" "dump_adamw_steps failed"; exit 1; }
ok "dump_adamw_steps wrote 20 steps of kvcpt's 8-bit AdamW"
$PY tests/bnb_adamw_peer.py "$tmp/case"
