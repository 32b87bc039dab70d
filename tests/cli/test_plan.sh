#!/usr/bin/env bash
# `kvcpt plan`: bytes per rank for N = 1, 2, 4, 8 on the 8B shape.
# Checked against numbers computed here from the architecture: 8,030,261,248
# parameters; bf16 shards of them; 8-bit AdamW = 2 bytes + 8 per 256-block
# for tensors of >= 4096 elements (8 bytes each below), plus what the device
# optimizer allocates beside the states (a spare element per state buffer,
# 64 bytes per segment, the code maps, the bad-gradient word); near-even
# shards; the largest unit (final norm + lm_head) gathered twice plus its
# gradient.
set -u
cd "$(dirname "$0")/../.."
K=${KVCPT_BIN:-./kvcpt}
ok() { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
out=$("$K" plan --preset llama3.1-8b --ranks 1,2,4,8 --seq 8192 --json 2>&1)
check=$(python3 - "$out" <<'PY'
import json, sys
rows = json.loads(sys.argv[1])
P = 8030261248
C, L, V, F, KD = 4096, 32, 128256, 14336, 1024
mats = [V*C, V*C] + [C*C, KD*C, KD*C, C*C, F*C, F*C, C*F] * L
norms = [C] * (2*L + 1)
assert sum(mats) + sum(norms) == P, "parameter count"
opt1 = sum(2*n + 8*((n + 255)//256) if n >= 4096 else 8*n for n in mats + norms)
# the device optimizer's extras (optim_device_bytes): spare elements, the segment table, maps, bad word
dev1 = opt1 + 2 + 8 + 8 + 64*(len(mats) + len(norms) + 1) + 4*1022 + 8
errs = []
if [r["ranks"] for r in rows] != [1, 2, 4, 8]: errs.append("ranks %s" % [r["ranks"] for r in rows])
r1 = rows[0]
if r1["params"] != 2*P: errs.append("N=1 params %d != %d" % (r1["params"], 2*P))
if r1["grads"] != 4*P: errs.append("N=1 grads %d != %d" % (r1["grads"], 4*P))
if r1["optim"] != dev1: errs.append("N=1 optimizer %d != %d" % (r1["optim"], dev1))
if r1["unit_buffers"] != 0: errs.append("N=1 needs no gather buffers")
for r in rows[1:]:
    n = r["ranks"]
    if not (2*P/n <= r["params"] <= 2*P/n + 2*L*256*8): errs.append("N=%d params %d not ~1/N" % (n, r["params"]))
    if not (opt1/n <= r["optim"] <= opt1/n + 1e6): errs.append("N=%d optimizer %d not ~1/N" % (n, r["optim"]))
    if r["unit_buffers"] != (V*C + C)*(2+2+4): errs.append("N=%d gather buffers %d" % (n, r["unit_buffers"]))
    if r["activations"] != r1["activations"]: errs.append("activations should not depend on N")
    if abs(r["total"] - sum(r[k] for k in ("params","grads","optim","unit_buffers","activations"))) > 1: errs.append("total")
print("; ".join(errs) if errs else "OK %.1f %.1f" % (r1["total"]/2**30, rows[3]["total"]/2**30))
PY
)
case "$check" in OK*) ok "plan: 8B bytes per rank for N=1,2,4,8 match the architecture (total ${check#OK } GiB at N=1, 8)";;
                 *) fail "plan 8B" "$check";; esac
if "$K" plan --ranks 0 >/dev/null 2>&1; then fail "plan --ranks 0" "accepted"; else ok "plan refuses --ranks 0"; fi
t=$("$K" plan --ranks 1,8 | head -3 | tail -1)
grep -q "^parameters" <<<"$t" && ok "plan prints a table by default" || fail "plan table" "$t"

# --engine cuda: the engine per GPU (whole working weights, one micro-batch's
# gradient and activations, this rank's shards), checked against the
# architecture: fp32 embedding + norms and bf16 matrices, fp32 gradients,
# the 8-bit states of every tensor on the device (bf16sr), one rank's
# shards (fp32 master and gradient sum, the exchange buffer of the largest
# unit, one f64 per norm block, the 8-bit states), the activations of one
# set with recompute=full vs 32 without, and with recompute=attn 32 kept
# parts (q, k, v, att, lse, x2) and one rebuilt part (xn1, rstd1, q|k|v
# rows, xn2, rstd2, gate|up rows, h) the layers share, and the fit line
cu() { "$K" plan --preset llama3.1-8b --seq 8242 --K 2048 --L 8192 --ranks 1 --engine cuda --json "$@" 2>&1; }
check=$(python3 - "$(cu --precision bf16sr --recompute full)" "$(cu --precision fp32)" "$(cu --precision fp32 --recompute 1)" \
    "$(cu --precision fp32 --recompute attn)" <<'PY'
import json, sys
sr, f32, f32r, f32a = (json.loads(a)[0] for a in sys.argv[1:5])
C, L, V, F, KD, QD, Hq, T = 4096, 32, 128256, 14336, 1024, 4096, 32, 8242
mats = [V*C, V*C] + [C*C, KD*C, KD*C, C*C, F*C, F*C, C*F] * L
norms = [C] * (2*L + 1)
P = sum(mats) + sum(norms)
opt = sum(2*n + 8*((n + 255)//256) if n >= 4096 else 8*n for n in mats + norms)
opt += 2 + 8 + 8 + 64*(len(mats) + len(norms) + 1) + 4*1022 + 8  # spare elements, segment table, maps, bad word
# an fp32 layer set: xn1, rstd1, the fused q|k|v rows, q, k, v, att, lse,
# x2, xn2, rstd2, the fused gate|up rows, h; each buffer 256-byte aligned
aligned = lambda *ns: 4*sum((n + 63)//64*64 for n in ns)
layer_set = aligned(T*C, T, T*(QD + 2*KD), T*QD, T*KD, T*KD, T*QD, T*Hq, T*C, T*C, T, 2*T*F, T*F)
kept, rebuilt = aligned(T*QD, T*KD, T*KD, T*QD, T*Hq, T*C), aligned(T*C, T, T*(QD + 2*KD), T*C, T, 2*T*F, T*F)
e = []
if sr["params"] != 4*(V*C + sum(norms)): e.append("bf16 fp32 part %d" % sr["params"])
if sr["wbf16"] != 2*(sum(mats) - V*C): e.append("bf16 matrices %d" % sr["wbf16"])
# sharded fp32 streams its layers: the embedding and tail resident, two
# layer slots of weights, one of gradients
layer = 2*C + 2*C*C + 2*KD*C + 3*F*C
if f32["params"] != 4*(V*C + C + V*C + 2*layer) or f32["grads"] != 4*(V*C + C + V*C + layer): e.append("fp32 streamed params/grads %d %d" % (f32["params"], f32["grads"]))
if sr["grads"] != 4*P or f32["wbf16"] != 0: e.append("bf16sr grads / fp32 wbf16")
if sr["optim"] != opt: e.append("device optimizer %d != %d" % (sr["optim"], opt))
if f32["optim"] != 0: e.append("sharded optimizer counted as the whole-model one")
units = [V*C] + [layer] * L + [C + V*C]  # embedding, layers, final norm + lm_head
blocks = sum((n + 255)//256 for n in mats + norms)
shards = 4*P + 4*P + 4*max(units) + 8*blocks + opt
if f32["shards"] != shards: e.append("one rank's shards %d != %d" % (f32["shards"], shards))
if sr["shards"] != 0: e.append("bf16sr (no shards) counts shards")
if f32["acts"] - f32r["acts"] != 31*layer_set: e.append("recompute saves %d, not 31 layer sets %d" % (f32["acts"] - f32r["acts"], 31*layer_set))
if kept + rebuilt != layer_set or f32["acts"] - f32a["acts"] != 31*rebuilt: e.append("recompute=attn saves %d, not 31 rebuilt parts %d" % (f32["acts"] - f32a["acts"], 31*rebuilt))
if [r["recompute"] for r in (sr, f32, f32r, f32a)] != ["full", "none", "full", "attn"]: e.append("recompute names %s" % [r["recompute"] for r in (sr, f32, f32r, f32a)])
if f32["least_recompute"] is not None or f32["fits"]: e.append("fp32 one rank fits 80 GiB with %s" % f32["least_recompute"])
for r in (sr, f32, f32r, f32a):
    if r["counted"] != sum(r[k] for k in ("params", "wbf16", "grads", "rope", "acts", "optim", "shards")) or r["total"] != r["counted"] + r["workspace"]: e.append("sums")
if f32["fits"] or not sr["fits"]: e.append("fits on one GPU: fp32 keep-all %s, bf16sr %s" % (f32["fits"], sr["fits"]))
print("; ".join(e) if e else "OK %.2f %.2f %.2f %.2f" % (sr["total"]/2**30, f32["total"]/2**30, f32r["total"]/2**30, f32a["total"]/2**30))
PY
)
case "$check" in OK*) ok "plan --engine cuda: 8B per GPU matches the architecture (bf16sr+recompute full, fp32, fp32+recompute full, fp32+recompute attn: ${check#OK } GiB)";;
                 *) fail "plan --engine cuda 8B" "$check";; esac
# attn cudnn (--attn, or KVCPT_ATTN): the region its calls carve, counted
# from the 8B shape (kernels/attention_cudnn_size.h: bf16 dQ, dK, dV; the
# softmax sums and fp32 dQ accumulator over max(L, S) rows; the suffix's
# key and value lists of min(K, L) + S entries and their gradients; the
# suffix's lse; each buffer 256-byte aligned), and cuDNN's workspace at its
# 128 MiB cap among the temporaries; none of it with another attention
check=$(python3 - "$(cu --precision bf16sr --recompute full --attn cudnn)" "$(KVCPT_ATTN=cudnn cu --precision bf16sr --recompute full)" \
    "$(cu --precision bf16sr --recompute full)" <<'PY'
import json, sys
cd, env, mma = (json.loads(a)[0] for a in sys.argv[1:4])
T, Hq, Hkv, D, L, K = 8242, 32, 8, 128, 8192, 2048
S = T - L
n = min(K, L) + S
sizes = [2*T*Hq*D, 2*T*Hkv*D, 2*T*Hkv*D, 4*Hq*max(L, S), 4*Hq*max(L, S)*D] + [2*Hkv*n*D]*4 + [4*Hq*S]
off = 0
for b in sizes: off = (off + 255)//256*256 + b
region = (off + 255)//256*256
e = []
if cd["attn_scratch"] != region: e.append("cudnn region %d != %d" % (cd["attn_scratch"], region))
if cd["cudnn_workspace"] != 128 << 20: e.append("cuDNN workspace %d, not the 128 MiB cap" % cd["cudnn_workspace"])
if cd["counted"] != sum(cd[k] for k in ("params", "wbf16", "grads", "rope", "acts", "attn_scratch", "optim", "shards")): e.append("counted leaves out the region")
if cd["total"] != cd["counted"] + cd["workspace"] or cd["workspace"] < cd["cudnn_workspace"]: e.append("total or workspace")
if env != cd: e.append("KVCPT_ATTN=cudnn plans otherwise than --attn cudnn")
if mma["attn_scratch"] != 0 or mma["cudnn_workspace"] != 0: e.append("the default attention counts cudnn's scratch")
if cd["acts"] != mma["acts"]: e.append("the activations depend on the attention")
print("; ".join(e) if e else "OK %.2f %+.1f" % (region/2**30, (cd["total"] - mma["total"])/2**20))
PY
)
case "$check" in OK*) set -- ${check#OK }; ok "plan --attn cudnn: 8B region $1 GiB from the shape, cuDNN's workspace at its cap, ${2} MiB total against the default attention's";;
                 *) fail "plan --attn cudnn" "$check";; esac
t=$("$K" plan --preset llama3.1-8b --seq 8242 --K 2048 --L 8192 --ranks 1 --engine cuda --precision bf16sr --attn cudnn 2>&1)
if grep -q "attn cudnn$" <<<"$t" && grep -q "^  attention scratch (cudnn) " <<<"$t" && grep -q "of which cuDNN's workspace, at its cap (ATTN_CUDNN_WORKSPACE_CAP): *0.12 GiB  (134217728 bytes)" <<<"$t"; then
    ok "plan --attn cudnn states the region and cuDNN's workspace cap"
else fail "plan --attn cudnn text" "$t"; fi
# The ZeRO-3 budget's activations are the CUDA engine's: what its first
# forward allocates (activation sets, selections, residual streams, tokens,
# final norm rows, scratch) plus the RoPE tables, at the same activation
# element size, recompute setting and mask, for the 8B shape and the tiny
# model, the mask off, on, with evict and with restride. Evict and restride
# grow every layer's selection from B x Hkv x T to B x Hkv x
# refresh_sel_len int32 records (kernels/refresh_mask.c: (T - L) rows of
# 1 + W, W = min(K, or K + T-1 - L without evict; T-1) + 1), which the
# budget once left out (it counted K x Hkv per layer, whatever the mask).
pairs=()
for shape in "llama3.1-8b 8242 8192 2048 1 bf16" "tiny 49 40 6 2 fp32"; do
    read -r preset T L Kk B acts <<<"$shape"
    mask="--K $Kk --L $L"
    for rm in "none|" "attn|" "full|" "none|$mask" "attn|$mask" "full|$mask" "none|$mask --mask-evict" \
              "attn|$mask --mask-restride 4" "full|$mask --mask-evict --mask-restride 3"; do
        r=${rm%%|*} m=${rm#*|}
        common="--preset $preset --seq $T --micro-batch $B --ranks 2 --recompute $r $m"
        z=$("$K" plan $common --acts "$acts" --engine zero3 --json 2>&1)
        g=$("$K" plan $common --precision "$acts" --engine cuda --json 2>&1)
        pairs+=("$preset|$T|$L|$Kk|$B|$r|$acts|$m|$z|$g")
    done
done
check=$(python3 - "${pairs[@]}" <<'PY'
import json, sys
shapes = {"llama3.1-8b": (32, 8), "tiny": (2, 2)}  # layers, KV heads
acts = {}
e = []
for arg in sys.argv[1:]:
    preset, T, L, K, B, r, a, m, z, g = arg.split("|")
    T, L, K, B = int(T), int(L), int(K), int(B)
    try:
        z, g = json.loads(z)[0], json.loads(g)[0]
    except ValueError:
        e.append("%s %s %s %s: not JSON: %s %s" % (preset, r, a, m, z[:200], g[:200])); continue
    if z["activations"] != g["acts"] + g["rope"]:
        e.append("%s %s %s %s: ZeRO-3 activations %d != the CUDA engine's %d + rope %d" % (preset, r, a, m, z["activations"], g["acts"], g["rope"]))
    acts[(preset, r, a, m)] = z["activations"]
for (preset, r, a, m), v in acts.items():
    if "evict" not in m and "restride" not in m: continue
    nl, hkv = shapes[preset]
    T, L, K, B = {"llama3.1-8b": (8242, 8192, 2048, 1), "tiny": (49, 40, 6, 2)}[preset]
    past = K if "evict" in m else K + T - 1 - L
    sel_len = (T - L) * (1 + min(past, T - 1) + 1)
    want = nl * 4 * B * hkv * (sel_len - T)
    plain = acts[(preset, r, a, "--K %d --L %d" % (K, L))]
    if v - plain != want or want <= 0:
        e.append("%s %s %s %s: the selections grew by %d, not %d" % (preset, r, a, m, v - plain, want))
print("; ".join(e[:4]) if e else "OK %d" % len(acts))
PY
)
case "$check" in OK*) ok "plan: ZeRO-3 activations = the CUDA engine's activations + rope tables, and evict/restride grow the selections to refresh_sel_len (${check#OK } settings of the 8B and tiny shapes)";;
                 *) fail "plan ZeRO-3 activations" "$check";; esac
for a in "--mask-evict" "--mask-restride 4"; do
    if out=$("$K" plan --preset tiny --seq 49 $a 2>&1); then fail "plan $a without --K" "accepted"
    elif grep -q "they need --K" <<<"$out"; then ok "plan refuses $a without --K, naming it"
    else fail "plan $a without --K" "$out"; fi
done
t=$("$K" plan --preset tiny --seq 49 --K 6 --L 40 --mask-evict --mask-restride 3 --ranks 1 --engine zero3 | head -1)
grep -q "mask on (L 40, K 6, evict, restride 3)$" <<<"$t" && ok "plan: the ZeRO-3 header names the mask" || fail "plan ZeRO-3 header" "$t"
# the shipped 8B config on 8 GPUs: the shards shrink to an eighth and the
# step fits 80 GB with the headroom printed
t=$("$K" plan --preset llama3.1-8b --config launch/configs/cpt-llama3.1-8b.json --ranks 8 --seq 8242 --engine cuda | tail -1)
grep -q "^fits 80.00 GiB per GPU: headroom" <<<"$t" && ok "plan: the shipped 8B config on 8 GPUs: $t" || fail "plan 8B on 8 GPUs" "$t"
# the one-GPU configs on the cards they name (an H100 shows 79.6 GiB, an
# H200 about 139 GiB), each at the total its comment gives, with the least
# recompute that fits the card named (the 80 GB card needs attn: none is
# 106 GiB; the 141 GB card and 8 GPUs fit none); and the 8-GPU config's
# precision on one 80 GB card does not fit (why the 80 GB config is bf16sr)
for c in "cpt-llama3.1-8b-1gpu-80gb 79G 78.83 attn" "cpt-llama3.1-8b-1gpu-141gb 139G 105.43 none" "cpt-llama3.1-8b 80G 66.01 none 8"; do
    read -r name mem total least ranks <<<"$c"
    out=$("$K" plan --preset llama3.1-8b --config "launch/configs/$name.json" --ranks "${ranks:-1}" --seq 8242 --engine cuda --gpu-mem "$mem")
    if grep -q "^fits ${mem%G}.00 GiB per GPU: headroom" <<<"$out" && grep -q "^  total  *$total GiB" <<<"$out" &&
        grep -q "$total GiB" "launch/configs/$name.json" &&
        grep -q "^recompute by memory .*; the least that fits ${mem%G}.00 GiB per GPU: recompute=$least\( (\|$\)" <<<"$out"; then
        ok "plan: launch/configs/$name.json on ${ranks:-1} GPU(s) of $mem: $total GiB, as its comment says, fits; least recompute that fits: $least"
    else fail "plan $name" "$(tail -3 <<<"$out")"; fi
done
# --recompute auto takes the least that fits over the config's setting:
# the 8-GPU config (recompute none, 66.01 GiB) on 40 GiB cards needs attn
out=$("$K" plan --preset llama3.1-8b --config launch/configs/cpt-llama3.1-8b.json --recompute auto --ranks 8 --seq 8242 --engine cuda --gpu-mem 40G)
if grep -q "precision bf16, recompute attn," <<<"$out" && grep -q "^  total  *38.72 GiB" <<<"$out" && grep -q "^fits 40.00 GiB" <<<"$out" &&
    grep -q "the least that fits 40.00 GiB per GPU: recompute=attn (none is 26.01 GiB over)" <<<"$out"; then
    ok "plan --recompute auto: the 8-GPU config on 40 GiB cards runs recompute attn, 38.72 GiB (none is 26.01 GiB over)"
else fail "plan --recompute auto" "$(tail -3 <<<"$out")"; fi
out=$("$K" plan --preset llama3.1-8b --config launch/configs/cpt-llama3.1-8b-1gpu-80gb.json --recompute none --ranks 1 --seq 8242 --engine cuda --gpu-mem 79G)
grep -q "^does NOT fit 79.00 GiB per GPU: 27.12 GiB" <<<"$out" && ok "plan --recompute none over the config's attn: 106.12 GiB does not fit 79 GiB" ||
    fail "plan --recompute none" "$(tail -2 <<<"$out")"
if out=$("$K" plan --recompute some 2>&1); then fail "plan --recompute some" "accepted"
elif grep -q "recompute must be none, attn or full" <<<"$out"; then ok "plan refuses --recompute some, naming the settings"
else fail "plan --recompute some" "$out"; fi
t=$("$K" plan --preset llama3.1-8b --config launch/configs/cpt-llama3.1-8b.json --ranks 1 --seq 8242 --engine cuda --gpu-mem 79G | tail -1)
grep -q "^does NOT fit 79.00 GiB" <<<"$t" && ok "plan: the 8-GPU config (fp32 master) on one 80 GB card does not fit: $t" || fail "plan 8B ZeRO-3 on one GPU" "$t"
t=$("$K" plan --engine cuda --ranks 8 --seq 8242 --precision fp32 --gpu-mem 200G | tail -1)
grep -q "^fits 200.00 GiB per GPU: headroom" <<<"$t" && ok "plan --gpu-mem 200G: $t" || fail "plan --gpu-mem" "$t"
t=$("$K" plan --engine cuda --ranks 8 --seq 8242 --precision fp32 | tail -1)
grep -q "^does NOT fit 80.00 GiB per GPU" <<<"$t" && ok "plan: fp32 keeping every activation does not fit 80 GiB: $t" || fail "plan no fit" "$t"
if "$K" plan --gpu-mem 12Q >/dev/null 2>&1; then fail "plan --gpu-mem 12Q" "accepted"; else ok "plan refuses --gpu-mem 12Q"; fi
# sizes whose byte counts overflow int64 (--seq 2^62; --seq x --micro-batch
# 2^32 x 2^32): refused naming the options, never wrapped into small totals
for a in "--seq 4611686018427387904" "--seq 4611686018427387904 --engine zero3 --json" "--seq 4294967296 --micro-batch 4294967296 --engine zero3"; do
    if out=$("$K" plan $a 2>&1); then fail "plan $a" "accepted: $(tail -2 <<<"$out")"
    elif grep -q "too large for this model: its byte counts would overflow 64 bits" <<<"$out" && ! grep -q "^total\|^\[" <<<"$out"; then
        ok "plan $a refused (overflow), no table printed"
    else fail "plan $a" "$(tail -2 <<<"$out")"; fi
done
