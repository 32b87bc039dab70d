#!/usr/bin/env python3
"""Independent PyTorch oracle for kvcpt's CPU model.

Reads a case written by tests/tools/dump_model_case, rebuilds the model in
float64 with torch autograd following Hugging Face's LlamaForCausalLM
definitions (RMSNorm, llama3 RoPE computed in float32 as transformers does,
rotate_half, repeat_kv GQA, SwiGLU), applies the RefreshKV training mask as
a dense boolean mask (selection under no_grad, from this script's own
attention probabilities), and compares logits, loss, every parameter
gradient and the selected key sets with kvcpt's. With the mask's evict or
restride set, the visibility comes from replaying the eval's partial cache
row by row (cache_visibility: kept set, evictions, full rows that
re-select), written here from the cache's rules, not from kvcpt's code;
kvcpt's per-row key lists are compared with it.

Tolerances (kvcpt runs fp32, this runs fp64):
  logits, loss: |d| <= 1e-4 + 1e-4 |ref|
  gradients:    |d| <= 1e-4 * max|ref of that tensor| + 1e-3 |ref|
Prints "ok - ..." / "FAIL - ..." lines and exits 1 on any failure.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
failed = 0


def report(ok, name, why=""):
    global failed
    print(("ok - " if ok else "FAIL - ") + name + ("" if ok else ": " + why))
    failed += 0 if ok else 1


def load(d, name, dtype):
    return np.fromfile(os.path.join(d, name), dtype=dtype)


def llama3_inv_freq(cfg):
    # float32 arithmetic, as transformers' rope init does
    D, theta = cfg["head_dim"], cfg["rope_theta"]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(torch.float32) / D))
    rs = cfg.get("rope_scaling")
    if not rs or rs.get("rope_type") != "llama3":
        return inv
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    return torch.where(medium, blended, scaled)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def pooled_scores(probs, cfg, mask):
    """(B, Hq, n) attention of one query row -> (B, Hkv, n) group-aggregated, max-pooled scores."""
    B, Hq, n = probs.shape
    Hkv, k = cfg["num_key_value_heads"], mask["pool_kernel"]
    grouped = probs.view(B, Hkv, Hq // Hkv, n)
    agg = {"max": lambda g: g.max(dim=2).values, "mean": lambda g: g.mean(dim=2),
           "first": lambda g: g[:, :, 0]}[mask["agg"]](grouped)
    return F.max_pool1d(agg, kernel_size=k, stride=1, padding=k // 2)  # pads with -inf: clipped window


def refresh_visibility(probs_last, cfg, mask, T):
    """Boolean (B, Hkv, T, T) visibility with the RefreshKV rows, plus the selection."""
    B, Hq, L = probs_last.shape
    Hkv, K = cfg["num_key_value_heads"], mask["K"]
    pooled = pooled_scores(probs_last, cfg, mask)
    order = torch.sort(pooled, dim=-1, descending=True, stable=True).indices  # ties -> lower index
    sel = torch.sort(order[..., :K], dim=-1).values
    vis = torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(B, Hkv, T, T).clone()
    vis[:, :, L:, :L] = False
    rows = torch.zeros(B, Hkv, L, dtype=torch.bool)
    rows.scatter_(2, sel, True)
    vis[:, :, L:, :L] = rows[:, :, None, :]
    return vis, sel


def cache_visibility(scores, cfg, mask, T):
    """Boolean (B, Hkv, T, T) visibility of the eval's partial cache replayed
    row by row (eval/partial_cache.c, eval/policy_refreshkv.c): each (batch
    row, KV head) keeps the top-K of query L-1's pooled scores; a later row p
    sees the kept keys, the new keys since the last selection and itself.
    With evict, while kept + new keys exceed K the kept key of lowest score
    goes (the lower position first), and past K new keys only the K latest
    stay. With restride r, rows with (p - L + 1) % r == 0 see every key and
    re-select the kept set from their own attention over 0..p."""
    B = scores.shape[0]
    Hkv, L, K = cfg["num_key_value_heads"], mask["L"], mask["K"]
    evict, r = mask.get("evict", 0), mask.get("restride", 0)

    def select(row):  # {position: score} per (b, g)
        pooled = pooled_scores(torch.softmax(scores[:, :, row, :row + 1], dim=-1), cfg, mask)
        top = torch.sort(pooled, dim=-1, descending=True, stable=True).indices[..., :K]  # ties -> lower index
        return [[{int(j): float(pooled[b, g, j]) for j in top[b, g]} for g in range(Hkv)] for b in range(B)]

    vis = torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(B, Hkv, T, T).clone()
    kept, since = select(L - 1), L
    for p in range(L, T):
        if r and (p - L + 1) % r == 0:
            kept, since = select(p), p + 1  # a full row: causal, then a new selection
            continue
        first = since
        if evict and p - since > K:
            first = p - K
        for b in range(B):
            for g in range(Hkv):
                ks = kept[b][g]
                while evict and ks and len(ks) + (p - since) > K:
                    del ks[min(ks, key=lambda j: (ks[j], j))]
                row = torch.zeros(T, dtype=torch.bool)
                if ks:
                    row[list(ks)] = True
                row[first:p + 1] = True
                vis[b, g, p] = row
    return vis


def records_visibility(rec, B, Hkv, L, T, width):
    """kvcpt's per-row records (B, Hkv, T - L, 1 + width) as (B, Hkv, T - L, T) booleans."""
    rec = rec.reshape(B, Hkv, T - L, 1 + width)
    out = np.zeros((B, Hkv, T - L, T), dtype=bool)
    for b in range(B):
        for g in range(Hkv):
            for i in range(T - L):
                n = rec[b, g, i, 0]
                if n == 0:
                    out[b, g, i, :L + i + 1] = True
                else:
                    out[b, g, i, rec[b, g, i, 1:1 + n]] = True
    return out


def forward(P, tokens, targets, cfg, mask, T):
    B = tokens.shape[0]
    C, D = cfg["hidden_size"], cfg["head_dim"]
    Hq, Hkv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    inv = llama3_inv_freq(cfg)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos().to(torch.float64), emb.sin().to(torch.float64)
    x = P["model.embed_tokens.weight"][tokens]
    sels = []
    for l in range(cfg["num_hidden_layers"]):
        p = lambda n: P[f"model.layers.{l}.{n}.weight"]
        h = rms_norm(x, p("input_layernorm"), eps)
        q = (h @ p("self_attn.q_proj").T).view(B, T, Hq, D).transpose(1, 2)
        k = (h @ p("self_attn.k_proj").T).view(B, T, Hkv, D).transpose(1, 2)
        v = (h @ p("self_attn.v_proj").T).view(B, T, Hkv, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(Hq // Hkv, dim=1)
        v = v.repeat_interleave(Hq // Hkv, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        vis = torch.tril(torch.ones(T, T, dtype=torch.bool)).expand(B, Hkv, T, T)
        if mask and T > mask["L"] and (mask.get("evict", 0) or mask.get("restride", 0)):
            with torch.no_grad():
                vis = cache_visibility(scores, cfg, mask, T)
            sels.append(vis[:, :, mask["L"]:, :])
        elif mask and T > mask["L"]:
            L = mask["L"]
            with torch.no_grad():
                probs_last = torch.softmax(scores[:, :, L - 1, :L], dim=-1)
                vis, sel = refresh_visibility(probs_last, cfg, mask, T)
            sels.append(sel)
        vis = vis.repeat_interleave(Hq // Hkv, dim=1)
        att = torch.softmax(scores.masked_fill(~vis, float("-inf")), dim=-1) @ v
        x = x + att.transpose(1, 2).reshape(B, T, Hq * D) @ p("self_attn.o_proj").T
        h = rms_norm(x, p("post_attention_layernorm"), eps)
        x = x + (F.silu(h @ p("mlp.gate_proj").T) * (h @ p("mlp.up_proj").T)) @ p("mlp.down_proj").T
    h = rms_norm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]
    logits = h @ head.T
    valid = targets >= 0
    loss = F.cross_entropy(logits[valid], targets[valid])
    return logits, loss, sels


def close(got, ref, atol, rtol):
    d = np.abs(got - ref)
    lim = atol + rtol * np.abs(ref)
    bad = ~(d <= lim)
    return int(bad.sum()), float(d.max()) if d.size else 0.0


def main(d):
    case = json.load(open(os.path.join(d, "case.json")))
    cfg, mask, B, T = case["config"], case["mask"], case["B"], case["T"]
    V = cfg["vocab_size"]
    flat = load(d, "params.f32", np.float32)
    grads = load(d, "grads.f32", np.float32)
    P = {}
    for t in case["tensors"]:
        n = t["shape"][0] * (t["shape"][1] if t["ndim"] == 2 else 1)
        arr = flat[t["offset"]:t["offset"] + n].astype(np.float64)
        shape = tuple(t["shape"]) if t["ndim"] == 2 else (t["shape"][0],)
        P[t["name"]] = torch.tensor(arr.reshape(shape), requires_grad=True)
    tokens = torch.tensor(load(d, "tokens.i32", np.int32).astype(np.int64).reshape(B, T))
    targets = torch.tensor(load(d, "targets.i32", np.int32).astype(np.int64).reshape(B, T))
    logits, loss, sels = forward(P, tokens, targets, cfg, mask, T)
    loss.backward()
    tag = f"[{case.get('device', 'cpu')}, {'tied' if cfg['tie_word_embeddings'] else 'untied'}, agg {mask['agg']}, K {mask['K']}"
    if mask.get("evict", 0) or mask.get("restride", 0):
        tag += f", evict {mask['evict']}, restride {mask['restride']}"
    tag += "]"

    for l, sel in enumerate(sels):
        if sel.dtype == torch.bool:  # per-row visibility of rows >= L
            ours = records_visibility(load(d, f"sel{l}.i32", np.int32), B, cfg["num_key_value_heads"], mask["L"], T,
                                      mask["width"])
            diff = np.argwhere(ours != sel.numpy())
            report(diff.size == 0, f"torch parity {tag}: layer {l} visible keys of every row >= L",
                   f"{len(diff)} (b, g, row, key) entries differ, first {diff[0].tolist() if diff.size else None}")
            continue
        ours = load(d, f"sel{l}.i32", np.int32).reshape(sel.shape)
        same = np.array_equal(ours, sel.numpy())
        report(same, f"torch parity {tag}: layer {l} selected keys", f"kvcpt {ours.tolist()} torch {sel.tolist()}")
    ref_logits = logits.detach().numpy().reshape(-1)
    bad, mx = close(load(d, "logits.f32", np.float32).astype(np.float64), ref_logits, 1e-4, 1e-4)
    report(bad == 0, f"torch parity {tag}: logits", f"{bad} elements off, max |d| {mx:.3e}")
    bad, mx = close(np.array([case["loss"]]), np.array([loss.item()]), 1e-4, 1e-4)
    report(bad == 0, f"torch parity {tag}: loss {case['loss']:.6f} vs {loss.item():.6f}", f"|d| {mx:.3e}")
    worst = 0.0
    for t in case["tensors"]:
        n = t["shape"][0] * (t["shape"][1] if t["ndim"] == 2 else 1)
        ours = grads[t["offset"]:t["offset"] + n].astype(np.float64)
        ref = P[t["name"]].grad.numpy().reshape(-1)
        scale = float(np.abs(ref).max())
        bad, mx = close(ours, ref, 1e-4 * scale, 1e-3)
        worst = max(worst, mx / max(scale, 1e-30))
        report(bad == 0, f"torch parity {tag}: grad {t['name']}", f"{bad} of {n} off, max |d| {mx:.3e}, max |ref| {scale:.3e}")
    print(f"# worst gradient error relative to tensor max: {worst:.2e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
