#!/usr/bin/env python3
"""Arithmetic, not measurement: FLOPs and bytes per training step of each
kernel of the CUDA bf16 engine (bf16 weights, fp32 activations between ops,
every matmul input rounded to bf16 by a cast kernel first, recompute), at
one model shape, and the time each would take at the H100 SXM's datasheet
rates (989 TFLOP/s dense bf16, 3.35 TB/s HBM3) if it ran at exactly one of
them: the larger of FLOPs / peak and bytes / bandwidth, and which one binds.

Counted as the engine does the work (model/llama_layer.c, model/llama_cuda.c):
per layer, forward: rmsnorm, cast, Q/K/V matmuls (the cast input read three
times), RoPE on q and k, attention, the output matmul, residual add, rmsnorm,
cast, gate and up matmuls, SwiGLU, cast, down matmul, residual add. Backward:
each matmul's two products (input gradient, weight gradient), each
elementwise op's backward, attention's backward (2.5 x its forward FLOPs, the
FlashAttention convention). Recompute runs every layer's forward again.
Attention's bytes are its inputs and outputs once (flash tiling keeps the
scores on chip; re-reads of K/V tiles hit L2 and are not counted).

Usage: python3 scripts/step_arithmetic.py [--seq 8242] [--L 8192] [--K 2048]
       [--markdown]
"""
import argparse

PEAK_FLOPS = 989e12  # H100 SXM dense bf16, datasheet
PEAK_BYTES = 3.35e12  # H100 SXM HBM3, datasheet


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=8242)
    ap.add_argument("--L", type=int, default=8192)
    ap.add_argument("--K", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    # Llama-3.1-8B
    layers, C, F, V, Hq, Hkv, D = 32, 4096, 14336, 128256, 32, 8, 128
    N = a.batch * a.seq
    L = a.L if 0 < a.L < a.seq else a.seq
    ks = min(a.K, L)
    pairs = L * (L + 1) / 2 + sum(ks + p - L + 1 for p in range(L, a.seq))
    f32, b16 = 4, 2

    rows = []  # (kernel, calls per step, FLOPs per call, bytes per call)

    casts = {"fwd": 0, "bwd": 0}  # bytes per layer of the fp32 -> bf16 casts before each matmul

    def mm(name, ic, oc, calls_fwd):
        # forward: read bf16 input and weight, write fp32 output
        rows.append((f"{name} fwd", calls_fwd, 2 * N * ic * oc, N * ic * b16 + ic * oc * b16 + N * oc * f32))
        # backward: dinp += dout W (read dout bf16, W, read+write dinp fp32);
        # dW += dout^T inp (read both bf16, read+write the fp32 gradient)
        rows.append((f"{name} bwd dinp", layers, 2 * N * ic * oc, N * oc * b16 + ic * oc * b16 + 2 * N * ic * f32))
        rows.append((f"{name} bwd dW", layers, 2 * N * ic * oc, N * oc * b16 + N * ic * b16 + 2 * ic * oc * f32))
        casts["fwd"] += N * ic * (f32 + b16)
        casts["bwd"] += N * (oc + ic) * (f32 + b16)

    fwd = 2 * layers  # forward, then recompute's forward in the backward
    mm("Q", C, Hq * D, fwd)
    mm("K", C, Hkv * D, fwd)
    mm("V", C, Hkv * D, fwd)
    mm("O", Hq * D, C, fwd)
    mm("gate", C, F, fwd)
    mm("up", C, F, fwd)
    mm("down", F, C, fwd)
    att_f = 4 * D * a.batch * Hq * pairs
    att_io = (2 * N * Hq * D + 2 * N * Hkv * D) * f32 + N * Hq * f32  # q, k, v in; out, lse out
    rows.append(("attention fwd", fwd, att_f, att_io))
    rows.append(("attention bwd", layers, 2.5 * att_f, 2 * att_io + 2 * N * Hq * D * f32))
    # elementwise (bytes only): reads + writes of fp32 (or bf16) tensors
    rows.append(("rmsnorm fwd", 2 * fwd, 0, 2 * N * C * f32))
    rows.append(("rmsnorm bwd", 2 * layers, 0, 4 * N * C * f32))
    rows.append(("casts to bf16 before fwd matmuls", fwd, 0, casts["fwd"]))
    rows.append(("casts to bf16 before bwd matmuls", layers, 0, casts["bwd"]))
    rows.append(("RoPE fwd (q, k)", fwd, 0, 2 * N * (Hq + Hkv) * D * f32))
    rows.append(("RoPE bwd", layers, 0, 2 * N * (Hq + Hkv) * D * f32))
    rows.append(("SwiGLU fwd", fwd, 0, 3 * N * F * f32))
    rows.append(("SwiGLU bwd", layers, 0, 5 * N * F * f32))
    rows.append(("residual add", 2 * fwd + 2 * layers, 0, 3 * N * C * f32))
    # the head: lm_head matmul over the vocabulary and cross-entropy
    rows.append(("lm_head fwd", 1, 2 * N * C * V, N * C * b16 + V * C * b16 + N * V * f32))
    rows.append(("lm_head bwd (dinp + dW)", 1, 4 * N * C * V, 2 * N * V * b16 + 2 * V * C * f32 + 2 * N * C * f32))
    rows.append(("cross-entropy fwd + bwd", 1, 0, 3 * N * V * f32))

    total_ms = 0.0
    out = []
    for name, calls, fl, by in rows:
        t_c, t_b = fl / PEAK_FLOPS, by / PEAK_BYTES
        ms = 1e3 * calls * max(t_c, t_b)
        total_ms += ms
        out.append((name, calls, calls * fl / 1e9, calls * by / 1e9, "compute" if t_c >= t_b else "bandwidth", ms))
    model_flops = 6 * (layers * (C * (Hq + 2 * Hkv) * D + Hq * D * C + 3 * C * F) + V * C) * N + 3 * att_f * layers
    if a.markdown:
        print("| kernel | calls/step | GFLOP/step | GB/step | bound | ms at peak |")
        print("|---|---|---|---|---|---|")
        for name, calls, gf, gb, bound, ms in out:
            print(f"| {name} | {calls} | {gf:,.0f} | {gb:,.1f} | {bound} | {ms:.1f} |")
    else:
        for name, calls, gf, gb, bound, ms in out:
            print(f"{name:28s} {calls:5d} calls {gf:12,.0f} GFLOP {gb:9,.1f} GB  {bound:9s} {ms:8.1f} ms")
    tokens = N
    print(f"\nsum at the datasheet rates: {total_ms:.0f} ms per step of {tokens} tokens = "
          f"{tokens / total_ms * 1e3:,.0f} tokens/s (arithmetic upper bound, not a measurement); model FLOPs per step "
          f"(6N + attention, recompute not counted) {model_flops / 1e12:.1f} TFLOP: at 45% MFU "
          f"{0.45 * PEAK_FLOPS / model_flops * tokens:,.0f} tokens/s")


if __name__ == "__main__":
    main()
