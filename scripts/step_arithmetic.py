#!/usr/bin/env python3
"""Arithmetic, not measurement: FLOPs and bytes per training step of each
kernel of the CUDA bf16 engine (bf16 weights, bf16 activations between ops,
fp32 residual stream, recompute), at one model shape, and the time each
would take at the H100 SXM's datasheet rates (989 TFLOP/s dense bf16, 3.35
TB/s HBM3) if it ran at exactly one of them: the larger of FLOPs / peak and
bytes / bandwidth, and which one binds.

Counted as the engine does the work (model/llama_layer.c, model/llama_cuda.c):
per layer, forward: rmsnorm (fp32 in, bf16 out), the fused q|k|v matmul (bf16
out), RoPE splitting it into q, k, v, attention (bf16 in and out), the output
matmul (fp32 out), residual add, rmsnorm, the fused gate|up matmul, SwiGLU,
down matmul (fp32 out), residual add. Backward: each matmul's input gradient
(written, beta 0) and weight gradient (accumulated into fp32); the output and
down projections first round their fp32 output gradient to bf16 (a cast);
each elementwise op's backward; attention's backward (2.5 x its forward
FLOPs, the FlashAttention convention). Recompute runs every layer's forward
again. Attention's bytes are its inputs and outputs once (flash tiling keeps
the scores on chip; re-reads of K/V tiles hit L2 and are not counted). The
lm_head reads the fp32 final norm through a cast.

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
    fwd = 2 * layers  # forward, then recompute's forward in the backward

    def mm(name, ic, oc, out_bytes, dinp_bytes, dout_bytes):
        # forward: read the bf16 input and weight, write the output
        rows.append((f"{name} fwd", fwd, 2 * N * ic * oc, N * ic * b16 + ic * oc * b16 + N * oc * out_bytes))
        # backward: dinp = dout W (read dout bf16 and W, write dinp);
        # dW += dout^T inp (read both bf16, read + write the fp32 gradient)
        rows.append((f"{name} bwd dinp", layers, 2 * N * ic * oc, N * oc * b16 + ic * oc * b16 + N * ic * dinp_bytes))
        rows.append((f"{name} bwd dW", layers, 2 * N * ic * oc, N * oc * b16 + N * ic * b16 + 2 * ic * oc * f32))
        if dout_bytes == f32:  # the fp32 output gradient rounded to bf16 first
            rows.append((f"{name} bwd: cast of dout to bf16", layers, 0, N * oc * (f32 + b16)))

    QKV = (Hq + 2 * Hkv) * D
    mm("q|k|v", C, QKV, b16, f32, b16)
    mm("O", Hq * D, C, f32, b16, f32)
    mm("gate|up", C, 2 * F, b16, f32, b16)
    mm("down", F, C, f32, b16, f32)
    att_f = 4 * D * a.batch * Hq * pairs
    att_io = (2 * N * Hq * D + 2 * N * Hkv * D) * b16 + N * Hq * f32  # q, k, v in; out, lse out
    rows.append(("attention fwd", fwd, att_f, att_io))
    # backward: q, k, v, out, dout (bf16) and lse in; dq, dk, dv (fp32) out
    rows.append(("attention bwd", layers, 2.5 * att_f,
                 (3 * N * Hq * D + 2 * N * Hkv * D) * b16 + N * Hq * f32 + (N * Hq * D + 2 * N * Hkv * D) * f32))
    # elementwise (bytes only): reads + writes
    rows.append(("rmsnorm fwd (fp32 in, bf16 out)", 2 * fwd, 0, N * C * (f32 + b16)))
    rows.append(("rmsnorm bwd", 2 * layers, 0, 4 * N * C * f32))
    rows.append(("RoPE split fwd (q|k|v -> q, k, v)", fwd, 0, 2 * N * QKV * b16))
    rows.append(("RoPE join bwd (dq, dk, dv -> dq|dk|dv)", layers, 0, N * QKV * (f32 + b16)))
    rows.append(("SwiGLU fwd", fwd, 0, 3 * N * F * b16))
    rows.append(("SwiGLU bwd", layers, 0, 5 * N * F * b16))
    rows.append(("residual add", 2 * fwd + 2 * layers, 0, 3 * N * C * f32))
    # the head: the fp32 final norm cast, lm_head matmul over the vocabulary and cross-entropy
    rows.append(("lm_head casts (xf fwd, xf and dlogits bwd)", 1, 0, 2 * N * C * (f32 + b16) + N * V * (f32 + b16)))
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
    model_flops = 6 * (layers * (C * QKV + Hq * D * C + 3 * C * F) + V * C) * N + 3 * att_f * layers
    if a.markdown:
        print("| kernel | calls/step | GFLOP/step | GB/step | bound | ms at peak |")
        print("|---|---|---|---|---|---|")
        for name, calls, gf, gb, bound, ms in out:
            print(f"| {name} | {calls} | {gf:,.0f} | {gb:,.1f} | {bound} | {ms:.1f} |")
    else:
        for name, calls, gf, gb, bound, ms in out:
            print(f"{name:42s} {calls:5d} calls {gf:12,.0f} GFLOP {gb:9,.1f} GB  {bound:9s} {ms:8.1f} ms")
    tokens = N
    print(f"\nsum at the datasheet rates: {total_ms:.0f} ms per step of {tokens} tokens = "
          f"{tokens / total_ms * 1e3:,.0f} tokens/s (arithmetic upper bound, not a measurement); model FLOPs per step "
          f"(6N + attention, recompute not counted) {model_flops / 1e12:.1f} TFLOP: at 45% MFU "
          f"{0.45 * PEAK_FLOPS / model_flops * tokens:,.0f} tokens/s")


if __name__ == "__main__":
    main()
