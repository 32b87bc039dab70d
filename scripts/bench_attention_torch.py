#!/usr/bin/env python3
"""The attention peer on a GPU: torch.nn.functional.scaled_dot_product_attention
at the shapes kvcpt times its kernels on (`kvcpt bench attention` runs this
script as its peer; by default the Llama-3.1-8B layer: B 1, 32 query heads
over 8 KV heads, head_dim 128, causal), forward and forward+backward, in
bf16 (FlashAttention path) and in fp32.

Times with CUDA events, median of --reps after --warmup calls; prints one
line per case and, with --json, one JSON object per line. In bf16 it also
says which SDPA backend the default call dispatched to (sdpa_backend:
torch's own choice for these inputs), and times the call again under
sdpa_kernel with each of FLASH_ATTENTION, EFFICIENT_ATTENTION and
CUDNN_ATTENTION alone (sdpa_backends: its times, or why it refused the
inputs), so a figure names the kernel behind it. TFLOP/s counts
the (query, key) pairs a causal mask visits, T (T + 1) / 2 per head, at
2 * 2 * D FLOPs each forward (Q K^T and P V), and the backward as 2.5 x
the forward (the FlashAttention papers' convention), as kvcpt does.
Without a CUDA device it says so on stderr and exits with status 1.

Usage: python3 scripts/bench_attention_torch.py [--seq 16384 32768] [--dtype bf16] [--json]
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


# the backends timed one by one (torch.nn.attention.SDPBackend)
PROBED = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]


def default_backend(q, k, v):
    """The backend the default (unrestricted) call picks for these inputs:
    torch's dispatcher asked directly (torch._fused_sdp_choice, an internal
    entry point; its integer is an SDPBackend value), else the profiler's
    kernel names."""
    try:
        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, True, scale=None, enable_gqa=True)
        return SDPBackend(choice).name
    except (AttributeError, TypeError, RuntimeError, ValueError):
        pass
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        torch.cuda.synchronize()
    names = " ".join(e.name.lower() for e in prof.events())
    for key, name in (("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION"), ("fmha", "EFFICIENT_ATTENTION"),
                      ("efficient", "EFFICIENT_ATTENTION")):
        if key in names:
            return name + " (profiler)"
    return "unknown"


def case(T, dtype, args):
    B, Hq, Hkv, D = args.batch, args.heads, args.kv_heads, args.head_dim
    g = torch.Generator(device="cuda").manual_seed(T)
    q = torch.randn(B, Hq, T, D, device="cuda", dtype=dtype, generator=g, requires_grad=True)
    k = torch.randn(B, Hkv, T, D, device="cuda", dtype=dtype, generator=g, requires_grad=True)
    v = torch.randn(B, Hkv, T, D, device="cuda", dtype=dtype, generator=g, requires_grad=True)
    dout = torch.randn(B, Hq, T, D, device="cuda", dtype=dtype, generator=g)

    # bf16: FlashAttention, GQA native. fp32 has no flash kernel and the math
    # fallback builds T x T scores, so fp32 uses the memory-efficient kernel
    # on K/V expanded to the query heads (the expansion is timed too).
    def fwd():
        if dtype == torch.float32:
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
                r = Hq // Hkv
                return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1),
                                                      is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def fwd_bwd():
        out = fwd()
        out.backward(dout)

    with torch.no_grad():
        f_ms = time_ms(fwd, args.warmup, args.reps)
    fb_ms = time_ms(fwd_bwd, args.warmup, args.reps)
    flops_fwd = 2 * 2 * B * Hq * D * T * (T + 1) / 2
    backends = {}
    if dtype != torch.float32:
        for b in PROBED:
            def one(fn=fwd_bwd, b=b):
                with sdpa_kernel([b]):
                    return fn()
            try:
                with torch.no_grad():
                    bf = time_ms(lambda: one(fwd), args.warmup, args.reps)
                bfb = time_ms(one, args.warmup, args.reps)
                backends[b.name] = {"forward_ms": round(bf, 3), "backward_ms": round(bfb - bf, 3)}
            except RuntimeError as e:  # the backend does not take these inputs (or this GPU)
                backends[b.name] = {"error": " ".join(str(e).split())[:300]}
            q.grad = k.grad = v.grad = None
    row = {
        "bench": "attention_torch", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "dtype": str(dtype).replace("torch.", ""), "B": B, "T": T, "Hq": Hq, "Hkv": Hkv, "D": D,
        "forward_ms": round(f_ms, 3), "backward_ms": round(fb_ms - f_ms, 3),
        "forward_tflops": round(flops_fwd / f_ms / 1e9, 1),
        "backward_tflops": round(2.5 * flops_fwd / max(fb_ms - f_ms, 1e-6) / 1e9, 1),
    }
    if dtype != torch.float32:
        row["sdpa_backend"] = default_backend(q, k, v)
        row["sdpa_backends"] = backends
    del q, k, v, dout
    torch.cuda.empty_cache()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[16384, 32768])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--dtype", choices=["bf16", "fp32", "both"], default="both")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit(f"torch {torch.__version__}: no CUDA device (SDPA's GPU kernels cannot run here)")
    torch.backends.cuda.matmul.allow_tf32 = False
    dtypes = {"bf16": [torch.bfloat16], "fp32": [torch.float32], "both": [torch.bfloat16, torch.float32]}[args.dtype]
    for T in args.seq:
        for dtype in dtypes:
            r = case(T, dtype, args)
            if args.json:
                print(json.dumps(r), flush=True)
            else:
                print(f"torch sdpa {r['dtype']:8s} T={T}: forward {r['forward_ms']:.2f} ms "
                      f"({r['forward_tflops']} TFLOP/s), backward {r['backward_ms']:.2f} ms "
                      f"({r['backward_tflops']} TFLOP/s)"
                      + (f", default backend {r['sdpa_backend']}" if "sdpa_backend" in r else ""), flush=True)
                for name, b in r.get("sdpa_backends", {}).items():
                    print(f"    {name}: " + (f"forward {b['forward_ms']:.2f} ms, backward {b['backward_ms']:.2f} ms"
                                             if "error" not in b else f"refused: {b['error']}"), flush=True)


if __name__ == "__main__":
    main()
