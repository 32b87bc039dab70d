#!/usr/bin/env bash
# kvcpt convert from the command line: --help lists the options, and bad
# input exits non-zero with the file and byte offset named (never a crash).
set -u
cd "$(dirname "$0")/.."
K=${KVCPT_BIN:-./kvcpt}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
check() { if eval "$2"; then echo "ok - $1"; else echo "FAIL - $1: $3"; fi; }

help=$("$K" convert --help)
check "convert --help lists its options" \
  'for o in --from --to --to-format --to-dtype --shard-size --overwrite; do grep -q -- "$o" <<<"$help" || exit 1; done' "$help"

"$K" convert --from "$tmp" >"$tmp/out" 2>&1; rc=$?
check "missing --to is an error" '[ $rc -ne 0 ] && grep -q "are required" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"

mkdir -p "$tmp/bad"
printf '{"vocab_size":64,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":8}' >"$tmp/bad/config.json"
# header length field claims 2 GB
printf '\x00\x00\x00\x80\x00\x00\x00\x00{}' >"$tmp/bad/model.safetensors"
"$K" convert --from "$tmp/bad" --to "$tmp/out_dir" >"$tmp/out" 2>&1; rc=$?
check "2 GB header claim: clean error naming file and offset" \
  '[ $rc -eq 1 ] && grep -q "bad/model.safetensors.* at byte 0: header length 2147483648 exceeds" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
check "nothing written for a failed conversion" '[ ! -e "$tmp/out_dir/model.kvcpt" ]' "output exists"

printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":{"dtype":"F32"' >"$tmp/bad/model.safetensors"
"$K" convert --from "$tmp/bad" --to "$tmp/out_dir" >"$tmp/out" 2>&1; rc=$?
check "truncated JSON header: clean error" '[ $rc -eq 1 ] && grep -q "invalid JSON header" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"

# a config.json carrying both RoPE layouts (transformers 4's rope_theta +
# rope_scaling, 5's rope_parameters) that disagree: refused, both named
mkdir -p "$tmp/rope"
printf '{"vocab_size":64,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"rope_theta":500000.0,"rope_parameters":{"rope_type":"default","rope_theta":10000.0}}' >"$tmp/rope/config.json"
"$K" plan --preset "$tmp/rope" >"$tmp/out" 2>&1; rc=$?
check "rope_theta and rope_parameters.rope_theta disagree: refused naming both" \
  '[ $rc -ne 0 ] && grep -q "rope_theta.*rope_parameters.rope_theta.*disagree" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
printf '{"vocab_size":64,"hidden_size":32,"intermediate_size":48,"num_hidden_layers":2,"num_attention_heads":4,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":64},"rope_parameters":{"rope_type":"default","rope_theta":10000.0}}' >"$tmp/rope/config.json"
"$K" plan --preset "$tmp/rope" >"$tmp/out" 2>&1; rc=$?
check "rope_scaling and rope_parameters disagree: refused naming both" \
  '[ $rc -ne 0 ] && grep -q "rope_scaling.*rope_parameters.*different" "$tmp/out"' "rc $rc: $(cat "$tmp/out")"
