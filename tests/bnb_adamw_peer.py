#!/usr/bin/env python3
"""bitsandbytes' AdamW8bit, on the CPU, as the peer of kvcpt's 8-bit AdamW.

Reads a case written by tests/tools/dump_adamw_steps (kvcpt's parameters,
state codes, absmax and fp32 states after every step, with the gradients
and hyper-parameters it used), makes one torch Parameter per segment and
steps bnb.optim.AdamW8bit (min_8bit_size 4096, the same lr, betas, eps and
weight decay) with the same gradients.

Compared:
  maps        create_dynamic_map(signed=True/False) against kvcpt's maps
              (within 2 ulp: torch's vectorized linspace rounds a little
              differently); the optimizer is then given kvcpt's maps, and
              its qmap1/qmap2 must equal them bitwise;
  layout      which segments bnb keeps in 8 bits (min_8bit_size), and its
              number of 256-element blocks per segment;
  resynced    every step t starts bnb from kvcpt's state after t-1 (codes,
              absmax, fp32 states, parameters), so each step is compared on
              its own. bnb's fp32 states just before re-quantization are
              captured by wrapping its CPU kernel's quantize helper;
  free run    bnb stepping on its own for all steps (summary numbers and a
              loose bound; its quantizer differs, so states drift apart).

bnb's CPU 8-bit kernel is not kvcpt's arithmetic bit for bit, so the
comparison is split into what must be identical and what is bounded:
  * its quantizer looks the normalized value up in a 65536-entry table over
    [-1, 1] (step 2/65535) instead of finding the nearest code, so values
    below about 1.5e-5 of the block's absmax (zero included) cannot be
    stored and neighbouring small codes merge. Checked: bnb's codes equal
    an emulation of that table exactly; the same fp32 input quantized by
    kvcpt's nearest-code rule gives kvcpt's codes except where the inputs
    themselves differ (next point);
  * torch's vectorized add(alpha=) is a fused multiply-add and the update
    is written sqrt(v)/c2 + eps, (-lr/c1) m / denom (kvcpt:
    step_size m / (sqrt(v) + eps c2), bnb's CUDA form), so moments,
    absmax and parameters may differ by a few fp32 roundings:
      m, v:   |d| <= 4 eps32 (|beta1 m| + |(1-beta1) g|)  (v likewise)
      params: |d| <= 8 eps32 (|p| + |u|), u = the update
    and a code may move by one where its input moved across a midpoint
    (at most 0.2 % of the codes of a step).
A numpy model of kvcpt's documented step (docs/optim.md) must reproduce
kvcpt's codes, absmax and parameters bitwise, so the fp32 states behind
kvcpt's codes are known exactly.

usage: bnb_adamw_peer.py CASE_DIR
Prints "ok - ..." / "FAIL - ..." lines and "# ..." measurements; exits 1
on any failure.
"""
import json
import os
import sys

import numpy as np
import torch

import bitsandbytes as bnb
import bitsandbytes.functional as BF

failed = 0
F32 = np.float32
EPS32 = float(np.finfo(np.float32).eps)


def report(ok, name, why=""):
    global failed
    print(("ok - " if ok else "FAIL - ") + name + ("" if ok else ": " + why))
    failed += 0 if ok else 1


def info(msg):
    print("# " + msg)


d = sys.argv[1]
case = json.load(open(os.path.join(d, "case.json")))
S, N, B = case["steps"], case["total"], case["block"]
hp = case["hyper"]
segs = case["segments"]
n_code, n_absmax, n_f32 = case["n_code"], case["n_absmax"], case["n_f32"]


def raw(name, dtype, shape):
    return np.fromfile(os.path.join(d, name), dtype=dtype).reshape(shape)


grads = raw("grads.f32", F32, (S, N))
params = raw("params.f32", F32, (S + 1, N))
m_code = raw("m_code.u8", np.uint8, (S, n_code))
v_code = raw("v_code.u8", np.uint8, (S, n_code))
m_absmax = raw("m_absmax.f32", F32, (S, n_absmax))
v_absmax = raw("v_absmax.f32", F32, (S, n_absmax))
m32 = raw("m32.f32", F32, (S, n_f32))
v32 = raw("v32.f32", F32, (S, n_f32))
qmap = {"m": raw("qmap_m.f32", F32, (256,)), "v": raw("qmap_v.f32", F32, (256,))}


def seg_view(s, t):
    """kvcpt's state of segment s after step t (t = 0: the zero start)."""
    sg = segs[s]
    n = sg["numel"]
    nb = -(-n // B)
    if sg["quantized"]:
        o, a = sg["state_offset"], sg["absmax_offset"]
        if t == 0:
            return dict(mc=np.zeros(n, np.uint8), vc=np.zeros(n, np.uint8), ma=np.zeros(nb, F32), va=np.zeros(nb, F32))
        return dict(mc=m_code[t - 1, o:o + n], vc=v_code[t - 1, o:o + n], ma=m_absmax[t - 1, a:a + nb],
                    va=v_absmax[t - 1, a:a + nb])
    o = sg["state_offset"]
    if t == 0:
        return dict(m=np.zeros(n, F32), v=np.zeros(n, F32))
    return dict(m=m32[t - 1, o:o + n], v=v32[t - 1, o:o + n])


def seg_param(s, t):
    sg = segs[s]
    return params[t, sg["offset"]:sg["offset"] + sg["numel"]]


def seg_grad(s, t):
    sg = segs[s]
    return grads[t - 1, sg["offset"]:sg["offset"] + sg["numel"]]


# ---------------------------------------------------------------- the maps
mids = {k: ((c[:-1] + c[1:]) * F32(0.5)).astype(F32) for k, c in qmap.items()}
zero_index = {k: int(np.nonzero(c == 0)[0][0]) for k, c in qmap.items()}
for k, signed in (("m", True), ("v", False)):
    ref = BF.create_dynamic_map(signed=signed).numpy()
    du = np.abs(ref.view(np.int32).astype(np.int64) - qmap[k].view(np.int32).astype(np.int64))
    info(f"create_dynamic_map(signed={signed}) under this torch: {int((du != 0).sum())} of 256 codes differ from "
         f"kvcpt's {k} map, by at most {int(du.max())} ulp (torch's vectorized linspace rounding)")
    report(bool(du.max() <= 2 and np.array_equal(np.sign(ref), np.sign(qmap[k]))),
           f"kvcpt's {k} map within 2 ulp of create_dynamic_map(signed={signed})", f"max {int(du.max())} ulp")


def expand(a, n):
    return np.repeat(a, B)[:n]


def nearest(x, absmax, k):
    """kvcpt's quantizer: count of midpoints strictly below x/absmax; a
    block whose absmax is 0 stores the zero code."""
    a = expand(absmax, x.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = (x / a).astype(F32)
    q = np.searchsorted(mids[k], y, side="left").astype(np.uint8)
    q[a == 0] = zero_index[k]
    return q


LUT_SIZE = 65536


def bnb_lut(k):
    i = np.arange(LUT_SIZE, dtype=F32)
    val = (F32(-1.0) + (F32(2.0) * i) / F32(LUT_SIZE - 1)).astype(F32)
    return np.searchsorted(mids[k], val, side="left").astype(np.uint8)


LUT = {k: bnb_lut(k) for k in qmap}


def lut_quantize(x, absmax, k):
    """bitsandbytes 0.50's CPU quantize_blockwise: x * (1/absmax) clamped to
    [-1, 1], to a 16-bit grid index ((v+1)*0.5*65535 + 0.5, truncated), then
    the grid point's nearest code; an absmax-0 block stores code 0. The last
    multiply-add is evaluated exactly (float64) then rounded, as a fused
    multiply-add would be."""
    a = expand(absmax, x.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = (F32(1.0) / a).astype(F32)
        v = np.clip((x * inv).astype(F32), F32(-1), F32(1))
    h = ((v + F32(1.0)).astype(F32) * F32(0.5)).astype(F32)
    idx = (h.astype(np.float64) * 65535.0 + 0.5).astype(F32)
    idx = np.nan_to_num(idx).astype(np.int64).clip(0, LUT_SIZE - 1)
    q = LUT[k][idx]
    q[a == 0] = 0
    return q


lut_codes = {k: len(np.unique(LUT[k])) for k in LUT}
info(f"codes bnb's CPU quantizer can produce: signed {lut_codes['m']} of 256, unsigned {lut_codes['v']} of 256")

# ------------------------------------------------- kvcpt's step, in numpy


def scalars(t):
    c1 = 1.0 - hp["beta1"] ** t
    c2 = (1.0 - hp["beta2"] ** t) ** 0.5
    return dict(b1=F32(hp["beta1"]), b2=F32(hp["beta2"]), omb1=F32(1.0 - hp["beta1"]), omb2=F32(1.0 - hp["beta2"]),
                step_size=F32(-hp["lr"] * c2 / c1), eps_hat=F32(hp["eps"] * c2), decay=F32(1.0 - hp["lr"] * hp["weight_decay"]),
                gs=F32(hp["grad_scale"]))


def kv_moments(sc, m, v, g):
    g = (g * sc["gs"]).astype(F32)
    m = ((m * sc["b1"]).astype(F32) + (sc["omb1"] * g).astype(F32)).astype(F32)
    v = ((v * sc["b2"]).astype(F32) + ((sc["omb2"] * g).astype(F32) * g).astype(F32)).astype(F32)
    return m, v


def kv_param(sc, p, m, v):
    p = (p * sc["decay"]).astype(F32)
    den = (np.sqrt(v).astype(F32) + sc["eps_hat"]).astype(F32)
    return (p + (sc["step_size"] * (m / den).astype(F32)).astype(F32)).astype(F32)


def block_absmax(x):
    n = x.size
    pad = np.zeros(-(-n // B) * B, F32)
    pad[:n] = np.abs(x)
    return pad.reshape(-1, B).max(axis=1)


def kv_step(s, t):
    """kvcpt's step t of segment s from its own state after t-1: the fp32
    moments before quantization, then codes, absmax and parameters."""
    sc = scalars(t)
    st, p, g = seg_view(s, t - 1), seg_param(s, t - 1), seg_grad(s, t)
    if segs[s]["quantized"]:
        n = p.size
        m = (qmap["m"][st["mc"]] * expand(st["ma"], n)).astype(F32)
        v = (qmap["v"][st["vc"]] * expand(st["va"], n)).astype(F32)
    else:
        m, v = st["m"], st["v"]
    m, v = kv_moments(sc, m, v, g)
    out = dict(m=m, v=v, p=kv_param(sc, p, m, v))
    if segs[s]["quantized"]:
        out["ma"], out["va"] = block_absmax(m), block_absmax(v)
        out["mc"], out["vc"] = nearest(m, out["ma"], "m"), nearest(v, out["va"], "v")
    return out


def bits(a):
    return a.astype(F32).view(np.uint32)


model_bad = []
for t in range(1, S + 1):
    for s in range(len(segs)):
        k, now = kv_step(s, t), seg_view(s, t)
        if not np.array_equal(bits(k["p"]), bits(seg_param(s, t))):
            model_bad.append(f"step {t} seg {s}: params")
        keys = (("mc", "mc"), ("vc", "vc"), ("ma", "ma"), ("va", "va")) if segs[s]["quantized"] else (("m", "m"), ("v", "v"))
        for a, b in keys:
            x, y = k[a], now[b]
            if not np.array_equal(x.view(np.uint8) if x.dtype == np.uint8 else bits(x),
                                  y.view(np.uint8) if y.dtype == np.uint8 else bits(y)):
                model_bad.append(f"step {t} seg {s}: {a}")
gaps_ok = True
for s in range(len(segs)):
    lo = segs[s]["offset"] + segs[s]["numel"]
    hi = segs[s + 1]["offset"] if s + 1 < len(segs) else N
    gaps_ok &= bool(np.array_equal(bits(params[:, lo:hi]), bits(np.broadcast_to(params[0, lo:hi], (S + 1, hi - lo)))))
report(not model_bad, f"numpy model of kvcpt's step reproduces its codes, absmax, fp32 states and params bitwise "
       f"({S} steps, {len(segs)} segments)", "; ".join(model_bad[:6]))
report(gaps_ok, "kvcpt leaves the elements between segments untouched", "a gap element changed")

# --------------------------------------------------------------- bnb setup
torch.manual_seed(0)
tp = [torch.nn.Parameter(torch.from_numpy(seg_param(s, 0).copy())) for s in range(len(segs))]


def make_opt(ps):
    """AdamW8bit with kvcpt's hyper-parameters and kvcpt's maps (its state
    takes qmap1/qmap2 from name2qmap, filled only when empty)."""
    o = bnb.optim.AdamW8bit(ps, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                            weight_decay=hp["weight_decay"], min_8bit_size=case["min_8bit_size"])
    o.name2qmap["dynamic"] = torch.from_numpy(qmap["m"].copy())
    o.name2qmap["udynamic"] = torch.from_numpy(qmap["v"].copy())
    return o


captured = {}
quantizer = ["bnb"]  # "nearest": kvcpt's rule instead of bnb's table (free run only)
try:
    import bitsandbytes.backends.cpu.ops as cpu_ops
    _orig_quant = cpu_ops._quant_blockwise_fp32_direct

    def _capture(A_fp32, code, absmax_out, out_uint8, blocksize):
        x = A_fp32.detach().clone().numpy()
        captured[out_uint8.data_ptr()] = x
        if quantizer[0] == "bnb":
            return _orig_quant(A_fp32, code, absmax_out, out_uint8, blocksize)
        k = "m" if float(code[0]) < 0 else "v"
        a = block_absmax(x)
        out_uint8.copy_(torch.from_numpy(nearest(x, a, k)))
        absmax_out.copy_(torch.from_numpy(a))

    cpu_ops._quant_blockwise_fp32_direct = _capture
    hooked = True
except (ImportError, AttributeError) as e:
    hooked = False
    hook_err = repr(e)
report(hooked, "bnb's CPU 8-bit kernel exposes its fp32 states before quantization (_quant_blockwise_fp32_direct)",
       hook_err if not hooked else "")

opt = make_opt(tp)
try:
    for s in range(len(segs)):
        tp[s].grad = torch.from_numpy(seg_grad(s, 1).copy())
    opt.step()
except Exception as e:  # noqa: BLE001  bnb's own failure is the finding
    report(False, "bnb AdamW8bit steps on the CPU", f"{type(e).__name__}: {e}")
    sys.exit(1)
report(True, f"bnb {bnb.__version__} AdamW8bit steps on the CPU (torch {torch.__version__})")

layout_bad = []
for s, sg in enumerate(segs):
    st = opt.state[tp[s]]
    q8 = st["state1"].dtype == torch.uint8
    if q8 != sg["quantized"]:
        layout_bad.append(f"seg {s} ({sg['numel']} elements): bnb 8-bit {q8}, kvcpt {sg['quantized']}")
    if q8:
        nb = -(-sg["numel"] // B)
        if st["absmax1"].numel() != nb or st["absmax2"].numel() != nb:
            layout_bad.append(f"seg {s}: bnb has {st['absmax1'].numel()} blocks, kvcpt {nb}")
        for key, k in (("qmap1", "m"), ("qmap2", "v")):
            if not np.array_equal(st[key].numpy().view(np.uint32), qmap[k].view(np.uint32)):
                layout_bad.append(f"seg {s}: state {key} differs from kvcpt's {k} map")
report(not layout_bad, "bnb keeps the same segments in 8 bits (min_8bit_size 4096), with the same blocks and maps",
       "; ".join(layout_bad))


def load_state(s, t):
    """bnb's state and parameter of segment s set to kvcpt's after step t."""
    st = opt.state[tp[s]]
    kv = seg_view(s, t)
    if segs[s]["quantized"]:
        st["state1"].copy_(torch.from_numpy(kv["mc"].copy()))
        st["state2"].copy_(torch.from_numpy(kv["vc"].copy()))
        st["absmax1"].copy_(torch.from_numpy(kv["ma"].copy()))
        st["absmax2"].copy_(torch.from_numpy(kv["va"].copy()))
    else:
        st["state1"].copy_(torch.from_numpy(kv["m"].copy()))
        st["state2"].copy_(torch.from_numpy(kv["v"].copy()))
    st["step"] = t
    tp[s].data.copy_(torch.from_numpy(seg_param(s, t).copy()))


def ulps(a, b):
    ia, ib = bits(a).astype(np.int64), bits(b).astype(np.int64)
    ia = np.where(ia & 0x80000000, 0x80000000 - ia, ia)
    ib = np.where(ib & 0x80000000, 0x80000000 - ib, ib)
    return np.abs(ia - ib)


# ---------------------------------------------------- resynced, step by step
tot = dict(codes=0, same=0, zero_block=0, quantizer=0, arith=0, arith_big=0, lut_miss=0, absmax=0, absmax_same=0,
           state=0, state_same=0, state_bad=0, p=0, p_same=0, p_bad=0, f32=0, f32_same=0, f32_bad=0)
worst = dict(absmax_rel=0.0, state_ulp=0, state_ratio=0.0, p_abs=0.0, p_ratio=0.0, f32_ratio=0.0, arith_frac=0.0)
per_step_codes = []
for t in range(1, S + 1):
    if t > 1:
        for s in range(len(segs)):
            load_state(s, t - 1)
            tp[s].grad = torch.from_numpy(seg_grad(s, t).copy())
        captured.clear()
        opt.step()
    step_same = step_codes = 0
    for s, sg in enumerate(segs):
        st = opt.state[tp[s]]
        kv, now = kv_step(s, t), seg_view(s, t)
        p_prev, g = seg_param(s, t - 1), seg_grad(s, t)
        pb = tp[s].detach().numpy()
        sc = scalars(t)
        u = np.abs(sc["step_size"]) * np.abs(kv["m"]) / (np.sqrt(kv["v"]) + sc["eps_hat"])
        bound = 8 * EPS32 * (np.abs(p_prev) + u)
        dp = np.abs(pb.astype(np.float64) - seg_param(s, t).astype(np.float64))
        tot["p"] += dp.size
        tot["p_same"] += int((dp == 0).sum())
        tot["p_bad"] += int((dp > bound).sum())
        worst["p_abs"] = max(worst["p_abs"], float(dp.max()))
        worst["p_ratio"] = max(worst["p_ratio"], float((dp / bound).max()))
        if not sg["quantized"]:
            for key, ref, prev, gterm in (("state1", kv["m"], seg_view(s, t - 1)["m"] * sc["b1"], sc["omb1"] * g),
                                          ("state2", kv["v"], seg_view(s, t - 1)["v"] * sc["b2"], sc["omb2"] * g * g)):
                b = st[key].numpy()
                dd = np.abs(b.astype(np.float64) - ref)
                bd = 4 * EPS32 * (np.abs(prev) + np.abs(gterm))
                tot["f32"] += dd.size
                tot["f32_same"] += int((dd == 0).sum())
                tot["f32_bad"] += int((dd > bd).sum())
                worst["f32_ratio"] = max(worst["f32_ratio"], float(np.max(np.where(bd > 0, dd / np.maximum(bd, 1e-45), 0))))
            continue
        for k, skey, akey in (("m", "state1", "absmax1"), ("v", "state2", "absmax2")):
            bc = st[skey].numpy()
            ba = st[akey].numpy()
            ours_c, ours_a = now[k + "c"], now[k + "a"]
            x = captured.get(st[skey].data_ptr()) if hooked else None
            # absmax
            tot["absmax"] += ba.size
            tot["absmax_same"] += int((bits(ba) == bits(ours_a)).sum())
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(ours_a > 0, np.abs(ba.astype(np.float64) - ours_a) / ours_a, np.abs(ba))
            worst["absmax_rel"] = max(worst["absmax_rel"], float(rel.max()))
            # codes
            zero_blk = expand((ba == 0) & (ours_a == 0), bc.size)
            tot["codes"] += bc.size
            same = bc == ours_c
            tot["same"] += int(same.sum())
            step_same += int(same.sum())
            step_codes += bc.size
            tot["zero_block"] += int((~same & zero_blk).sum())
            if x is None:
                continue
            # the fp32 state bnb quantized, against kvcpt's
            prev = (qmap[k][seg_view(s, t - 1)[k + "c"]] * expand(seg_view(s, t - 1)[k + "a"], bc.size)).astype(F32)
            if k == "m":
                bd = 4 * EPS32 * (np.abs(prev * sc["b1"]) + np.abs(sc["omb1"] * g))
            else:
                bd = 4 * EPS32 * (np.abs(prev * sc["b2"]) + np.abs(sc["omb2"] * g * g))
            dx = np.abs(x.astype(np.float64) - kv[k])
            tot["state"] += x.size
            tot["state_same"] += int((dx == 0).sum())
            tot["state_bad"] += int((dx > bd).sum())
            worst["state_ulp"] = max(worst["state_ulp"], int(ulps(x, kv[k]).max()))
            worst["state_ratio"] = max(worst["state_ratio"], float(np.max(np.where(bd > 0, dx / np.maximum(bd, 1e-45), 0))))
            # bnb's codes are its table lookup of its own state, exactly
            tot["lut_miss"] += int((lut_quantize(x, ba, k) != bc).sum())
            # kvcpt's rule on bnb's state: differs from kvcpt's codes only
            # where the fp32 inputs differ (one code at most)
            qn = nearest(x, ba, k)
            arith = (qn != ours_c) & ~zero_blk
            tot["arith"] += int(arith.sum())
            tot["arith_big"] += int((np.abs(qn.astype(int) - ours_c.astype(int)) > 1)[arith].sum())
            worst["arith_frac"] = max(worst["arith_frac"], float(arith.mean()))
            tot["quantizer"] += int(((bc != qn) & ~zero_blk).sum())
    per_step_codes.append((step_same, step_codes))

info(f"resynced: {S} steps, codes identical {tot['same']} of {tot['codes']} "
     f"({100.0 * tot['same'] / tot['codes']:.2f} %); per step "
     + ", ".join(f"{a}/{b}" for a, b in per_step_codes[:3]) + " ...")
info(f"resynced: differing codes: {tot['zero_block']} in all-zero blocks (absmax 0: bnb stores code 0, kvcpt the zero "
     f"code), {tot['quantizer']} from bnb's 65536-entry table (kvcpt's nearest-code rule on bnb's own fp32 state gives "
     f"kvcpt's code), {tot['arith']} from fp32 inputs that differ (|d code| > 1: {tot['arith_big']})")
info(f"resynced: fp32 states before quantization identical {tot['state_same']} of {tot['state']}, max {worst['state_ratio']:.3g} of the bound "
     f"(max {worst['state_ulp']} ulp, where beta m and (1-beta) g nearly cancel); absmax identical {tot['absmax_same']} of {tot['absmax']}, max rel diff {worst['absmax_rel']:.3g}")
info(f"resynced: params identical {tot['p_same']} of {tot['p']}, max |d p| {worst['p_abs']:.3g} "
     f"(= {worst['p_ratio']:.3g} of the bound 8 eps32 (|p| + |u|)); fp32-state segment m, v identical "
     f"{tot['f32_same']} of {tot['f32']}, max {worst['f32_ratio']:.3g} of the bound")
if hooked:
    report(tot["lut_miss"] == 0, "bnb's codes are exactly its 65536-entry table lookup of its own fp32 states",
           f"{tot['lut_miss']} codes differ from the emulation")
    report(tot["state_bad"] == 0, "bnb's fp32 moments before quantization within 4 eps32 (|beta m| + |(1-beta) g-term|) "
           "of kvcpt's", f"{tot['state_bad']} elements outside (max {worst['state_ulp']} ulp)")
    report(tot["arith_big"] == 0 and worst["arith_frac"] <= 0.002,
           "kvcpt's nearest-code rule on bnb's fp32 states gives kvcpt's codes, except one-code moves of at most 0.2 % "
           "per step", f"{tot['arith']} differ, {tot['arith_big']} by more than one code, worst step "
           f"{100 * worst['arith_frac']:.3f} %")
report(worst["absmax_rel"] <= 4 * EPS32, "absmax within 4 eps32 relative of kvcpt's",
       f"max relative difference {worst['absmax_rel']:.3g}")
report(tot["p_bad"] == 0, "parameters within 8 eps32 (|p| + |update|) of kvcpt's every step",
       f"{tot['p_bad']} of {tot['p']} outside, max {worst['p_ratio']:.3g} of the bound, max |d p| {worst['p_abs']:.3g}")
report(tot["f32_bad"] == 0, "fp32-state segment (under min_8bit_size): m and v within 4 eps32 of kvcpt's",
       f"{tot['f32_bad']} of {tot['f32']} outside, max {worst['f32_ratio']:.3g} of the bound")

# ------------------------------------------------------------- free running


def free_run(mode):
    """bnb stepping on its own from kvcpt's initial parameters; per step the
    share of identical codes and max |d p| against kvcpt."""
    quantizer[0] = mode
    fp = [torch.nn.Parameter(torch.from_numpy(seg_param(s, 0).copy())) for s in range(len(segs))]
    o = make_opt(fp)
    rows = []
    for t in range(1, S + 1):
        for s in range(len(segs)):
            fp[s].grad = torch.from_numpy(seg_grad(s, t).copy())
        o.step()
        same = tot_c = 0
        dmax = move = 0.0
        for s, sg in enumerate(segs):
            pb = fp[s].detach().numpy().astype(np.float64)
            dmax = max(dmax, float(np.abs(pb - seg_param(s, t)).max()))
            move = max(move, float(np.abs(seg_param(s, t).astype(np.float64) - seg_param(s, 0)).max()))
            if sg["quantized"]:
                st, now = o.state[fp[s]], seg_view(s, t)
                same += int((st["state1"].numpy() == now["mc"]).sum() + (st["state2"].numpy() == now["vc"]).sum())
                tot_c += 2 * sg["numel"]
        rows.append((t, same / tot_c, dmax, move))
    quantizer[0] = "bnb"
    return rows


def show(label, rows):
    for t, same, dmax, move in rows:
        if t in (1, 2, 5, 10, S):
            info(f"free run, {label}: step {t}: codes {100.0 * same:.2f} % identical, max |d p| {dmax:.3g} "
                 f"({100.0 * dmax / move:.2f} % of the largest movement {move:.3g})")


rows = free_run("bnb")
show("bnb as is", rows)
worst = max(dmax / (2 * hp["lr"] * t) for t, _, dmax, _ in rows)
report(worst <= 1.0, f"free run, bnb as is: max |d p| <= 2 lr t over {S} steps (its quantizer drops small second "
       "moments, so trajectories separate by up to the size of the updates)", f"worst {worst:.3g} of the bound")
if hooked:
    rows = free_run("nearest")
    show("bnb with kvcpt's nearest-code quantizer", rows)
    worst = max(dmax / move for t, _, dmax, move in rows)
    least = min(same for _, same, _, _ in rows)
    report(worst <= 0.001 and least >= 0.999, f"free run, bnb with kvcpt's nearest-code quantizer: codes >= 99.9 % "
           f"identical and max |d p| <= 0.1 % of the largest movement over {S} steps",
           f"worst {100 * worst:.3g} %, least identical {100 * least:.3f} %")
sys.exit(1 if failed else 0)
