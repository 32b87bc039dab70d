#!/usr/bin/env bash
# kvcpt bench eval beside the sdpa forward alone (--policies none), with a
# stand-in for tests/kvpress_peer.py (--python: a script that answers as the
# peer's --bench does, one forward time per call, so the figures are known):
# kvcpt's user run (every variant) and the forward of each repeat side by
# side, the medians, each pair's ratio, kvcpt's time without its model hash
# and load (what eval.json now records beside hash_seconds), both sides' CPU
# seconds, and no kvpress failure reported for the policy run that
# --policies none does not ask for.
. "$(dirname "$0")/../lib.sh" || exit 1
$K prepare --synthetic recall --vocab 64 --doc-tokens 120 --query-tail 9 --docs 20 --out "$tmp/d" >/dev/null
$K train --set model=tiny --set data="$tmp/d" --set out="$tmp/r" --set steps=1 --set warmup_steps=0 --set L=48 \
    --set S=8 --set K=6 --set global_batch=2 --set micro_batch=2 >/dev/null 2>&1 \
    || { fail "setup" "kvcpt train failed"; exit 1; }

# the peer's stand-in: forward times 0.4, 0.8, 0.6 s on calls 1, 2, 3 (median 0.6); it checks that
# it was asked for the forward alone
cat >"$tmp/peer" <<PEER
#!/usr/bin/env bash
case " \$* " in *" --policies none "*) ;; *) echo "not --policies none: \$*" >&2; exit 3;; esac
n=\$(( \$(cat "$tmp/calls" 2>/dev/null || echo 0) + 1 )); echo \$n >"$tmp/calls"
f=(0 0.4 0.8 0.6)
echo "{\"seconds\": 0.0, \"load_seconds\": 1.5, \"forward_seconds\": \${f[\$n]}, \"forward_cpu_seconds\": 0.25, \"policy_seconds\": {}, \"documents\": 1, \"threads\": 1}"
PEER
chmod +x "$tmp/peer"

if ! $K bench eval --model "$tmp/r/model" --data "$tmp/d" --L 48 --S 8 --max-docs 1 --policies none \
        --python "$tmp/peer" --repeat 3 --json >"$tmp/out" 2>"$tmp/err"; then
    fail "bench eval --policies none" "exited non-zero: $(tail -2 "$tmp/err")"
    exit 0
fi
j=$(tail -1 "$tmp/out")
q() { jq -r "$1" <<<"$j"; }
[ "$(cat "$tmp/calls")" = 3 ] && [ "$(q .repeat)" = 3 ] && [ "$(q '.pairs | length')" = 3 ] \
    && ok "--repeat 3: three pairs, each kvcpt run beside one forward" \
    || fail "repeat" "peer calls $(cat "$tmp/calls"), repeat $(q .repeat), pairs $(q '.pairs | length')"
[ "$(q .transformers_forward_seconds)" = 0.6 ] && ok "the forward's median over the pairs (0.4, 0.8, 0.6: 0.6 s)" \
    || fail "forward median" "$(q .transformers_forward_seconds)"
[ "$(q .kvpress_seconds)" = null ] && [ "$(q .kvcpt_seconds)" = null ] \
    && ok "--policies none: no kvpress policy time, no kvcpt run with kvpress's choices" \
    || fail "none" "kvpress_seconds $(q .kvpress_seconds), kvcpt_seconds $(q .kvcpt_seconds)"
# each pair's ratio is its own kvcpt time over its own forward; the reported ratio is their median.
# The ratio is printed to 3 decimals from the exact times, the times to 4: recomputed from the
# printed times it may differ by a unit of the ratio's last decimal, and by far more when a pair's
# ratio is taken over another pair's forward (0.4, 0.8, 0.6 s)
ratios=$(q '[.pairs[] | (.kvcpt_all_variants_seconds / .transformers_forward_seconds - .kvcpt_all_variants_over_forward)
             | fabs <= 0.0015] | all')
med=$(q '[.pairs[].kvcpt_all_variants_over_forward] | sort | .[1]')
[ "$ratios" = true ] && [ "$(q .kvcpt_all_variants_over_forward)" = "$med" ] \
    && ok "each pair's ratio from its own runs, the median of the three reported ($med)" \
    || fail "ratios" "pairs consistent: $ratios, median $med, reported $(q .kvcpt_all_variants_over_forward)"
load=$(q .kvcpt_all_variants_load_seconds) all=$(q .kvcpt_all_variants_seconds)
# leaving a positive load out lowers every pair's ratio, so their median too (both printed to 3
# decimals: equal when the load is below the last decimal)
awk -v l="$load" -v a="$all" -v r="$(q .kvcpt_all_variants_without_load_over_forward)" \
    -v R="$(q .kvcpt_all_variants_over_forward)" 'BEGIN { exit !(l > 0 && l < a && r > 0 && r <= R) }' \
    && ok "kvcpt's time without its model hash and load: $load of $all s left out" \
    || fail "load" "load $load, all $all, ratio without load $(q .kvcpt_all_variants_without_load_over_forward)"
echo 0 >"$tmp/calls"
$K bench eval --model "$tmp/r/model" --data "$tmp/d" --L 48 --S 8 --max-docs 1 --policies none \
    --python "$tmp/peer" >"$tmp/text" 2>&1
if grep -q "kvpress:" "$tmp/text" || ! grep -q "ratio kvcpt (every default variant) / forward" "$tmp/text"; then
    fail "text" "$(cat "$tmp/text")"
else
    ok "the text report gives the ratio and no kvpress failure"
fi

# CPU time: kvcpt's process (every thread, from the child's rusage) over the forward's (0.25 s, as the peer says)
cpu=$(q .kvcpt_all_variants_cpu_seconds)
awk -v c="$cpu" -v r="$(q .kvcpt_all_variants_cpu_over_forward_cpu)" -v f="$(q .transformers_forward_cpu_seconds)" \
    'BEGIN { exit !(c > 0 && f == 0.25 && r > 0) }' \
    && [ "$(q '[.pairs[].kvcpt_all_variants_cpu_seconds > 0] | all')" = true ] \
    && ok "CPU seconds of each side and their ratio ($cpu s over 0.25 s)" \
    || fail "cpu" "kvcpt $cpu, forward $(q .transformers_forward_cpu_seconds), ratio $(q .kvcpt_all_variants_cpu_over_forward_cpu)"

# eval.json: the model's load time beside its hash time
$K eval --model "$tmp/r/model" --data "$tmp/d" --L 48 --S 8 --K 6 --max-docs 1 --quiet --out "$tmp/e" >/dev/null 2>&1
[ "$(jq -r '.run.models[0].load_seconds | type' "$tmp/e/eval.json")" = number ] \
    && ok "eval.json records run.models[].load_seconds" || fail "load_seconds" "$(jq -c .run.models "$tmp/e/eval.json")"
