#!/usr/bin/env python3
"""Arithmetic, not measurement: FLOPs and bytes per training step of each
kernel of the CUDA bf16 engine (bf16 weights, bf16 activations between ops,
fp32 residual stream), at one model shape, and the time each would take at
the H100 SXM's datasheet rates (989 TFLOP/s dense bf16 on tensor cores, 67
TFLOP/s fp32 on CUDA cores, 3.35 TB/s HBM3) if it ran at exactly one of
them: the larger of FLOPs / peak and bytes / bandwidth, and which one binds.

Counted as the engine executes the step (model/decoder_pass.c,
model/decoder_layer.c, model/decoder_cuda.c, kernels/attention_mma_*.cu):
- per layer, forward: rmsnorm (fp32 in, bf16 out), the fused q|k|v matmul
  (bf16 out), RoPE splitting it into q, k, v, the RefreshKV selection (with
  the mask: query L-1 of each head against keys 0..L-1), attention (bf16 in
  and out), the output matmul (fp32 out, the residual add in its epilogue:
  it reads the stream as cuBLASLt's C), rmsnorm, the fused gate|up matmul,
  SwiGLU, down matmul (fp32 out, the residual add in its epilogue);
- recompute (model/recompute.h) reruns part of each layer's forward before
  its backward. full: the whole layer up to SwiGLU (both norms, q|k|v,
  RoPE, attention, the output projection and its residual add, gate|up,
  SwiGLU): no down projection and no second residual add (the backward
  does not need them), no selection (the first forward's is kept). attn:
  the two norms (elementwise, from the kept residual streams), the gate|up
  product and SwiGLU only: q, k, v, the attention output, lse and the
  stream after attention are kept, so no attention, q|k|v, output
  projection or residual add runs twice. none: nothing;
- backward: each matmul's input gradient (written) and weight gradient
  (accumulated into fp32); the output and down projections round their fp32
  output gradient to bf16 first (a cast); each elementwise op's backward;
  the residual stream's gradient is accumulated by the rmsnorm backward
  (no separate add);
- attention on tensor cores for the causal rows [0, L): 64 x 64 tiles, the
  diagonal tiles computed whole, 2 products per tile forward (Q K^T, P V);
  the backward as --attn-bwd says (kernels/attention.h AttnBwdVariant;
  default two_pass, docs/cuda.md's table; the engine's default is
  one_pass, KVCPT_ATTN_BWD=two_pass its other): two_pass, 7 products per 64 x 64 tile
  (dQ pass: Q K^T, dO V^T, dS K; dK/dV pass: K Q^T, V dO^T, P^T dO, dS^T
  Q), 2 x 64 x 64 x D FLOPs each; one_pass, FlashAttention-2's 5 products
  (K Q^T, V dO^T, P^T dO, dS^T Q, dS K) per (128-key tile, 64-row query
  tile) pair from the diagonal, each pair also reading and writing the 64
  x D fp32 rows of its block's partial dQ (a group's first key tile only
  writes), then the G partials (G as kernels/attention_cuda_size.c's
  attention_mma_bwd_groups) and the query heads' dK, dV shares summed;
  one_pass64, the same with 64-key tiles (its first version, for
  comparison); the RefreshKV suffix rows
  [L, T) on CUDA cores in fp32: the forward by the row-tile kernel
  (kernels/attention.cu), whole 64 x 64 tiles (Q K^T and P V, 2 x 64 x 64
  x D FLOPs each) over each row tile's key list, one block per SM (its
  shared memory at D = 128); unsplit, one block per (row tile, head) walks
  the whole list, split (the engine: attention_suffix_chunk_keys in
  kernels/attention_cuda_size.c), the list is cut into chunks so that the blocks
  fill up to 132 SMs, then a combine reads the chunks' partials once. Its
  time is the busiest SM's tiles at one SM's share of the fp32 peak (a
  floor: a 256-thread block does not reach an SM's peak). The backward:
  per (row, key) pair 14 D FLOPs (their dQ: 3 dot products, their dK/dV:
  4) at the whole GPU's fp32 peak (a floor). Attention's bytes are its
  inputs and outputs once (re-reads of K/V tiles hit L2);
- the head: the logits in chunks of 2048 rows (model/decoder_cuda_size.h
  DECODER_CUDA_CE_CHUNK_ROWS), computed once, in the forward: per chunk the
  logits product, the loss and its gradient in one kernel, then the
  chunk's dX and dW products right there (the trainer's steps run
  decoder_cuda_set_head_grad_in_forward; the backward starts from the dX it
  left); each chunk's dW product reads and writes the whole fp32 lm_head
  gradient (V x C); the fp32 inputs are cast to bf16 in each call.
The suffix rows' backward and the selection are latency-bound on a GPU
(one warp per row or key): their time at the datasheet rates is a floor,
not a forecast.

The tensor-core attention is counted by default at FlashAttention-2
class rates, not at the datasheet's peak: an mma.sync kernel of its
design does not reach it (Dao 2023, "FlashAttention-2", arXiv:2307.08691:
50-73% of the A100's peak; Shah et al. 2024, "FlashAttention-3",
arXiv:2407.08608, abstract: FlashAttention-2 at 35% of the H100's, and its
figure "Attention forward speed, head dim 128 (H100 80GB SXM5)":
FlashAttention-2 370 TFLOP/s at 8k and 16k). Forward 370 TFLOP/s from
that figure; backward 320, an assumption below the 335 TFLOP/s that the
FlashAttention-2 paper reports for forward + backward together on H100.
Three items are not arithmetic but taken from measurements or estimates,
each its own row: the RefreshKV selection at its measured 1.9 ms per layer
at T = 16384 (docs/benchmarks.md, the 2026-11-23 H100), scaled by L /
16384 (query L-1 against L keys); the suffix rows at a latency estimate
(--suffix-ms, default 110 ms per step: one warp per row, far from any
peak) in place of their arithmetic floor; and the optimizer step at the
measured 8-bit AdamW rate on the device (29.8 ms per 2^30 parameters,
`kvcpt bench adamw --device cuda`, docs/benchmarks.md: about 0.22 s for
8B parameters).

--matmul-tflops, --attn-fwd-tflops, --attn-bwd-tflops and --gbps put other
rates in place of these (for example the ones measured on a card:
docs/cuda.md, "The 8B step by arithmetic"); --datasheet counts everything
at the datasheet's peaks, the three items above included at their
arithmetic floors (0 for the optimizer).

Usage: python3 scripts/step_arithmetic.py [--seq 8242] [--L 8192] [--K 2048]
       [--recompute none|attn|full] [--attn-bwd two_pass|one_pass|one_pass64]
       [--suffix split|unsplit] [--matmul-tflops R] [--attn-fwd-tflops R]
       [--attn-bwd-tflops R] [--gbps R] [--suffix-ms MS] [--datasheet] [--markdown]
"""
import argparse
import math

PEAK_FLOPS = 989e12  # H100 SXM dense bf16 on tensor cores, datasheet
PEAK_FP32 = 67e12  # H100 SXM fp32 on CUDA cores, datasheet
PEAK_BYTES = 3.35e12  # H100 SXM HBM3, datasheet
# FlashAttention-2 class attention on H100 (the module docstring cites them)
FA2_FWD = 370e12  # FlashAttention-3 paper, FA2 forward, head dim 128, H100 SXM5, 8k-16k
FA2_BWD = 320e12  # assumed: below FA2's 335 TFLOP/s forward + backward on H100 (FlashAttention-2 paper)
SELECT_MS_16K = 1.9  # measured per layer at T = 16384 (docs/benchmarks.md, 2026-11-23 H100)
SUFFIX_MS = 110.0  # per step, recompute full: the suffix rows' latency estimate (docs/cuda.md)
ADAMW_MS_PER_2_30 = 29.8  # measured, 8-bit AdamW on the device, per 2^30 parameters (docs/benchmarks.md)
TILE = 64  # kernels/attention_mma_tiles.cuh kMmaTile
CE_CHUNK = 2048  # model/decoder_cuda_size.h DECODER_CUDA_CE_CHUNK_ROWS
SMS = 132  # H100 SXM streaming multiprocessors
SUFFIX_WAVE_BLOCKS = 132  # kernels/attention_cuda_size.c: the blocks the split suffix forward aims to fill


def suffix_chunk_keys(n, row_tiles, heads, split):
    """kernels/attention_cuda_size.c attention_suffix_chunk_keys: entries per chunk of
    a suffix key list of n entries (the last row's)."""
    whole = -(-n // TILE) * TILE
    blocks = row_tiles * heads
    if not split or blocks >= SUFFIX_WAVE_BLOCKS // 2:
        return whole
    parts = SUFFIX_WAVE_BLOCKS // blocks
    return -(-(-(-n // parts)) // TILE) * TILE


def suffix_forward(T, L, ks, heads, D, split):
    """The suffix rows' forward per call: (blocks, executed FLOPs, seconds at
    one SM's share of the fp32 peak for the busiest SM, partial bytes)."""
    rows, row_tiles = T - L, -(-(T - L) // TILE)
    n = ks + rows  # the last row's list: sel ++ (L..T-1)
    ck = suffix_chunk_keys(n, row_tiles, heads, split)
    chunks = -(-n // ck)
    tile_flops = 2 * 2 * TILE * TILE * D
    # a row tile's list ends at its last row; a chunk past it is empty
    per_block, flops = [], 0
    for t in range(row_tiles):
        nt = ks + min(rows, (t + 1) * TILE)
        for c in range(chunks):
            tiles = max(0, -(-min(ck, nt - c * ck) // TILE)) if nt > c * ck else 0
            per_block += [tiles] * heads
            flops += tiles * tile_flops * heads
    # blocks taken in order by SMs, one at a time per SM (greedy): the busiest SM's tiles
    load = [0] * SMS
    for tiles in sorted(per_block, reverse=True):
        i = load.index(min(load))
        load[i] += tiles
    seconds = max(load) * tile_flops / (PEAK_FP32 / SMS)
    partial_bytes = heads * rows * chunks * (D + 2) * 4 if chunks > 1 else 0
    return len(per_block), flops, seconds, partial_bytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=8242)
    ap.add_argument("--L", type=int, default=8192)
    ap.add_argument("--K", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--recompute", choices=["none", "attn", "full", "0", "1"], default="full",
                    help="what the backward reruns (0 and 1: none and full, as the config key)")
    ap.add_argument("--attn-bwd", choices=["two_pass", "one_pass", "one_pass64"], default="two_pass",
                    help="the attention backward's variant (default two_pass, the engine's KVCPT_ATTN_BWD=two_pass)")
    ap.add_argument("--suffix", choices=["split", "unsplit"], default="split",
                    help="the suffix rows' forward: over key chunks (the engine) or one block per row tile and head")
    ap.add_argument("--matmul-tflops", type=float, default=PEAK_FLOPS / 1e12, help="the matmuls' rate")
    ap.add_argument("--attn-fwd-tflops", type=float, default=None,
                    help=f"tensor-core attention forward (default FlashAttention-2's {FA2_FWD / 1e12:g})")
    ap.add_argument("--attn-bwd-tflops", type=float, default=None,
                    help=f"tensor-core attention backward (default {FA2_BWD / 1e12:g}, FlashAttention-2 class)")
    ap.add_argument("--gbps", type=float, default=PEAK_BYTES / 1e9, help="device memory bandwidth")
    ap.add_argument("--suffix-ms", type=float, default=SUFFIX_MS,
                    help="the suffix rows' forward and backward per step (a latency estimate), in place of their floor")
    ap.add_argument("--datasheet", action="store_true",
                    help="every kernel at the datasheet's peaks, the selection and suffix rows at their floors, no optimizer")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    if a.attn_fwd_tflops is None:
        a.attn_fwd_tflops = (PEAK_FLOPS if a.datasheet else FA2_FWD) / 1e12
    if a.attn_bwd_tflops is None:
        a.attn_bwd_tflops = (PEAK_FLOPS if a.datasheet else FA2_BWD) / 1e12
    MM, AF, AB, FP32 = a.matmul_tflops * 1e12, a.attn_fwd_tflops * 1e12, a.attn_bwd_tflops * 1e12, PEAK_FP32
    BW = a.gbps * 1e9
    # Llama-3.1-8B
    layers, C, F, V, Hq, Hkv, D = 32, 4096, 14336, 128256, 32, 8, 128
    N = a.batch * a.seq
    T = a.seq
    L = a.L if 0 < a.L < T else T
    ks = min(a.K, L)
    suffix_pairs = sum(ks + p - L + 1 for p in range(L, T))  # each suffix row: the selected keys and the local ones
    exact_pairs = L * (L + 1) / 2 + suffix_pairs
    nt = math.ceil(L / TILE)
    tile_pairs = TILE * TILE * nt * (nt + 1) / 2  # the tiles at or below the diagonal, whole
    f32, b16 = 4, 2
    R = {"0": "none", "1": "full"}.get(a.recompute, a.recompute)

    rows = []  # (kernel, calls per step, FLOPs per call, bytes per call, FLOP rate)
    # the forward's calls, and the recompute's second ones: the attention
    # half (q|k|v, RoPE, attention, output projection) only under full, the
    # norms, gate|up and SwiGLU under attn and full
    fwd = layers * (2 if R == "full" else 1)
    mlp_fwd = layers * (1 if R == "none" else 2)

    def mm(name, ic, oc, out_bytes, dinp_bytes, dout_bytes, fwd_calls, adds=False):
        # forward: read the bf16 input and weight, write the output (and
        # read the residual stream the epilogue adds)
        add_bytes = N * oc * f32 if adds else 0
        rows.append((f"{name} fwd" + (" (+ residual add)" if adds else ""), fwd_calls, 2 * N * ic * oc,
                     N * ic * b16 + ic * oc * b16 + N * oc * out_bytes + add_bytes, MM))
        # backward: dinp = dout W (read dout bf16 and W, write dinp);
        # dW += dout^T inp (read both bf16, read + write the fp32 gradient)
        rows.append((f"{name} bwd dinp", layers, 2 * N * ic * oc, N * oc * b16 + ic * oc * b16 + N * ic * dinp_bytes, MM))
        rows.append((f"{name} bwd dW", layers, 2 * N * ic * oc, N * oc * b16 + N * ic * b16 + 2 * ic * oc * f32, MM))
        if dout_bytes == f32:  # the fp32 output gradient rounded to bf16 first
            rows.append((f"{name} bwd: cast of dout to bf16", layers, 0, N * oc * (f32 + b16), MM))

    QKV = (Hq + 2 * Hkv) * D
    mm("q|k|v", C, QKV, b16, f32, b16, fwd)
    mm("O", Hq * D, C, f32, b16, f32, fwd, adds=True)
    mm("gate|up", C, 2 * F, b16, f32, b16, mlp_fwd)
    mm("down", F, C, f32, b16, f32, layers, adds=True)  # not recomputed: the backward starts from its input gradient
    bh = a.batch * Hq
    if L < T:
        # the selection: query L-1 of each head against keys 0..L-1, once per layer
        rows.append(("RefreshKV selection (first forward only)", layers, 2 * D * bh * L,
                     a.batch * L * Hkv * D * b16 + bh * D * b16 + bh * L * f32, FP32))
    mma_f = 2 * 2 * D * bh * tile_pairs
    att_io = (2 * N * Hq * D + 2 * N * Hkv * D) * b16 + N * Hq * f32  # q, k, v in; out, lse out
    rows.append(("attention fwd, rows < L (tensor cores, 2 products/tile)", fwd, mma_f, att_io, AF))
    bwd_in = (3 * N * Hq * D + 2 * N * Hkv * D) * b16 + N * Hq * f32  # q, k, v, out, dout (bf16) and lse in
    if a.attn_bwd == "two_pass":
        # dq, dk, dv (fp32) out
        rows.append(("attention bwd, rows < L (tensor cores, two passes, 7 products/tile)", layers,
                     7 * 2 * D * bh * tile_pairs, bwd_in + (N * Hq * D + 2 * N * Hkv * D) * f32, AB))
    else:
        # one pass per key tile of KT keys over query tiles of 64 rows from
        # the key tile's first key on; the partial dQ read and written per
        # pair; dK, dV per query head (fp32) out, then the sums
        KT = 128 if a.attn_bwd == "one_pass" else 64
        nk = math.ceil(L / KT)
        q_tiles = [math.ceil((L - kt * KT) / TILE) for kt in range(nk)]  # per key tile, per head
        groups = max(1, min(8, SMS // bh, math.ceil(T / KT)))
        first_stores = sum(q_tiles[:groups])  # pairs of each group's first key tile: stored, not read
        dq_rmw = bh * TILE * D * f32 * (2 * sum(q_tiles) - first_stores)
        rows.append((f"attention bwd, rows < L (tensor cores, one pass, {KT}-key tiles, 5 products/pair, "
                     "partial dQ read and written per pair)", layers, 5 * 2 * D * bh * KT * TILE * sum(q_tiles),
                     bwd_in + dq_rmw + 2 * N * Hq * D * f32, AB))
        rows.append((f"attention bwd: {groups} dQ partials and the query heads' dK, dV summed", layers, 0,
                     (groups + 1) * N * Hq * D * f32 + 2 * N * Hq * D * f32 + 2 * N * Hkv * D * f32, MM))
    rows.append(("attention bwd: dsum = rowsum(dO * O)", layers, 0, 2 * N * Hq * D * b16 + N * Hq * f32, MM))
    if L < T:
        sfx_io = (T - L) * (2 * Hq * D) * b16 + suffix_pairs * 0  # their q in, out; keys counted with the tiles
        blocks, sf_flops, sf_s, sf_part = suffix_forward(T, L, ks, bh, D, a.suffix == "split")
        # its rate: the executed FLOPs over the busiest SM's time
        rows.append((f"attention fwd, suffix rows >= L (fp32, {a.suffix}, {blocks} blocks)", fwd, sf_flops,
                     sfx_io + 2 * sf_part, sf_flops / sf_s))
        rows.append(("attention bwd, suffix rows >= L (fp32, CUDA cores)", layers, 14 * D * bh * suffix_pairs, 2 * sfx_io, FP32))
    # elementwise (bytes only): reads + writes
    rows.append(("rmsnorm fwd (fp32 in, bf16 out)", 2 * mlp_fwd, 0, N * C * (f32 + b16), MM))
    rows.append(("rmsnorm bwd (accumulates the residual gradient)", 2 * layers, 0, 4 * N * C * f32, MM))
    rows.append(("RoPE split fwd (q|k|v -> q, k, v)", fwd, 0, 2 * N * QKV * b16, MM))
    rows.append(("RoPE join bwd (dq, dk, dv -> dq|dk|dv)", layers, 0, N * QKV * (f32 + b16), MM))
    rows.append(("SwiGLU fwd", mlp_fwd, 0, 3 * N * F * b16, MM))
    rows.append(("SwiGLU bwd", layers, 0, 5 * N * F * b16, MM))
    # the head, in chunks, all in the forward: the logits once, the casts of its fp32 inputs
    chunks = math.ceil(N / CE_CHUNK)
    rows.append(("lm_head fwd (the logits, once)", 1, 2 * N * C * V, N * C * (f32 + b16) + chunks * V * C * b16 + N * V * f32, MM))
    rows.append(("lm_head dinp + dW, in the forward (dW r+w per chunk)", 1, 4 * N * C * V,
                 N * V * (f32 + b16) + N * C * (f32 + b16) + 2 * N * V * b16 + chunks * (V * C * b16 + 2 * V * C * f32) + N * C * f32,
                 MM))
    rows.append(("cross-entropy fwd + bwd (one kernel)", 1, 0, 3 * N * V * f32, MM))

    total_ms = 0.0
    out = []
    suffix_floor_ms = 0.0
    for name, calls, fl, by, rate in rows:
        t_c, t_b = fl / rate, by / BW
        ms = 1e3 * calls * max(t_c, t_b)
        unit = "fp32 cores" if rate == FP32 or "(fp32" in name else "compute"
        bound = unit if t_c >= t_b else "bandwidth"
        if not a.datasheet and name.startswith("RefreshKV selection"):
            ms, bound = calls * SELECT_MS_16K * L / 16384, "measured (1.9 ms/layer at 16k, x L/16384)"
        elif not a.datasheet and name.startswith("attention") and "suffix rows" in name:
            suffix_floor_ms += ms
            ms, bound = 0.0, "in the latency row below"
        total_ms += ms
        out.append((name, calls, calls * fl / 1e9, calls * by / 1e9, bound, ms))
    params = layers * (C * QKV + Hq * D * C + 3 * C * F + 2 * C) + 2 * V * C + C
    if not a.datasheet:
        if L < T:
            sfx = max(a.suffix_ms, suffix_floor_ms)
            out.append((f"suffix rows >= L, forward + backward (latency estimate; floor {suffix_floor_ms:.1f} ms)",
                        1, 0, 0, "estimate", sfx))
            total_ms += sfx
        opt_ms = ADAMW_MS_PER_2_30 * params / 2**30
        out.append((f"optimizer step, 8-bit AdamW on the device ({params / 1e9:.2f}B parameters)", 1, 0, 0,
                    "measured (29.8 ms per 2^30)", opt_ms))
        total_ms += opt_ms
    att_model = 4 * D * a.batch * Hq * exact_pairs
    model_flops = 6 * (layers * (C * QKV + Hq * D * C + 3 * C * F) + V * C) * N + 3 * att_model * layers
    exec_flops = sum(calls * fl for _, calls, fl, _, _ in rows)
    if a.markdown:
        print("| kernel | calls/step | GFLOP/step | GB/step | bound | ms at peak |")
        print("|---|---|---|---|---|---|")
        for name, calls, gf, gb, bound, ms in out:
            print(f"| {name} | {calls} | {gf:,.0f} | {gb:,.1f} | {bound} | {ms:.1f} |")
    else:
        for name, calls, gf, gb, bound, ms in out:
            print(f"{name:58s} {calls:5d} calls {gf:12,.0f} GFLOP {gb:9,.1f} GB  {bound:10s} {ms:8.1f} ms")
    tokens = N
    rates = (f"matmuls {MM / 1e12:g}, attention {AF / 1e12:g}/{AB / 1e12:g} TFLOP/s, {BW / 1e9:g} GB/s"
             if (MM, AF, AB, BW) != (PEAK_FLOPS, PEAK_FLOPS, PEAK_FLOPS, PEAK_BYTES) else "the datasheet rates")
    if not a.datasheet:
        rates += ", the selection, the suffix rows and the optimizer as measured or estimated"
    print(f"\nrecompute {R}, attention backward {a.attn_bwd}: executed {exec_flops / 1e12:.1f} TFLOP per step; sum at {rates}: {total_ms:.0f} ms "
          f"per step of {tokens} tokens = {tokens / total_ms * 1e3:,.0f} tokens/s (arithmetic upper bound, not a "
          f"measurement); model FLOPs per step (6N + attention, recompute not counted) {model_flops / 1e12:.1f} TFLOP: "
          f"at 45% MFU {0.45 * PEAK_FLOPS / model_flops * tokens:,.0f} tokens/s")


if __name__ == "__main__":
    main()
