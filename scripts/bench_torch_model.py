#!/usr/bin/env python3
"""The CPU speed peer of `kvcpt bench model`: the same config's forward and
backward in PyTorch, eager mode (no torch.compile), fp32, on the CPU, with
the thread count kvcpt used.

The model is the Hugging Face transformers class of the config.json kvcpt
passes (its model_type: LlamaForCausalLM, MistralForCausalLM; what a user
would train with), attention "sdpa"
(transformers' default: torch's fused CPU attention) or "eager" (its
matmul-softmax-matmul path). One step is what kvcpt's bench times: the
forward with the cross-entropy loss over the targets (the next token; the
last position of each sequence has none), zero_grad, backward. No optimizer
step.

With --mask-L the attention is RefreshKV's training mask, registered as an
attention function for that class: the prefix (rows < L) is causal; each
suffix row sees its causal suffix keys and, of the prefix, the K keys per KV
head that the last prefix row selects (its softmax over the prefix,
aggregated over the query heads of the group, max-pooled, top K; under
no_grad, as kvcpt does). The mask is dense boolean and goes to
scaled_dot_product_attention, the way one would write it in PyTorch; it
follows tests/torch_ref.py's refresh_visibility, which the test suite checks
against kvcpt.

Prints one JSON line on stdout (tokens_per_s, forward_ms, backward_ms,
loss, threads, class, ...); progress goes to stderr.

Usage: bench_torch_model.py --config config.json --batch B --seq T
       --steps N --warmup N --threads N [--attn sdpa|eager]
       [--mask-L L --mask-K K --pool P --agg max|mean|first]
"""
import argparse
import json
import math
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="HF config.json")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    p.add_argument("--mask-L", type=int, default=0)
    p.add_argument("--mask-K", type=int, default=0)
    p.add_argument("--pool", type=int, default=7)
    p.add_argument("--agg", choices=["max", "mean", "first"], default="max")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def refreshkv_attention(mask):
    """An attention function for transformers' AttentionInterface computing
    the RefreshKV training mask (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    L, K, k, agg = mask["L"], mask["K"], mask["pool"], mask["agg"]

    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        B, Hq, T, D = query.shape
        Hkv = key.shape[1]
        g = Hq // Hkv
        key = key.repeat_interleave(g, dim=1)
        value = value.repeat_interleave(g, dim=1)
        scale = scaling if scaling is not None else 1.0 / math.sqrt(D)
        vis = torch.ones(T, T, dtype=torch.bool, device=query.device).tril()
        if T > L:
            with torch.no_grad():
                last = torch.softmax(torch.einsum("bhd,bhld->bhl", query[:, :, L - 1], key[:, :, :L]) * scale, dim=-1)
                grouped = last.view(B, Hkv, g, L)
                a = {"max": lambda x: x.max(dim=2).values, "mean": lambda x: x.mean(dim=2),
                     "first": lambda x: x[:, :, 0]}[agg](grouped)
                pooled = F.max_pool1d(a, kernel_size=k, stride=1, padding=k // 2)
                sel = torch.sort(pooled, dim=-1, descending=True, stable=True).indices[..., :K]  # ties: lower index
                rows = torch.zeros(B, Hkv, L, dtype=torch.bool, device=query.device)
                rows.scatter_(2, sel, True)
                vis = vis.expand(B, Hkv, T, T).clone()
                vis[:, :, L:, :L] = rows[:, :, None, :]
                vis = vis.repeat_interleave(g, dim=1)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=vis, scale=scale)
        return out.transpose(1, 2).contiguous(), None

    return attend


def main():
    a = parse_args()
    import torch
    import torch.nn.functional as F
    from transformers import AttentionInterface, AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    torch.set_num_threads(a.threads)
    torch.set_default_dtype(torch.float32)
    torch.manual_seed(a.seed)
    with open(a.config) as f:
        cfg_dict = json.load(f)
    cfg_dict.pop("torch_dtype", None)
    cfg_dict.pop("dtype", None)
    attn = a.attn
    if a.mask_L > 0:
        K = a.mask_K if a.mask_K > 0 else max(a.mask_L // 8, 1)
        AttentionInterface.register("kvcpt_refreshkv",
                                    refreshkv_attention({"L": a.mask_L, "K": K, "pool": a.pool, "agg": a.agg}))
        attn = "kvcpt_refreshkv"
    cfg = AutoConfig.for_model(cfg_dict.pop("model_type", "llama"), **cfg_dict)
    cfg._attn_implementation = attn
    model = MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)](cfg).float().train()
    n_params = sum(p.numel() for p in model.parameters())
    V = cfg.vocab_size
    tok = torch.randint(0, V, (a.batch, a.seq))
    tgt = torch.cat([tok[:, 1:], torch.full((a.batch, 1), -1)], dim=1)

    def step():
        t0 = time.perf_counter()
        logits = model(input_ids=tok).logits
        loss = F.cross_entropy(logits.view(-1, V), tgt.reshape(-1), ignore_index=-1)
        t1 = time.perf_counter()
        model.zero_grad()
        loss.backward()
        return loss.item(), t1 - t0, time.perf_counter() - t1

    for s in range(a.warmup):
        _, f, b = step()
        print(f"bench_torch_model: warm-up step {s + 1}/{a.warmup}, {f + b:.1f} s", file=sys.stderr)
    fwd = bwd = 0.0
    loss = 0.0
    for s in range(a.steps):
        loss, f, b = step()
        fwd += f
        bwd += b
        print(f"bench_torch_model: step {s + 1}/{a.steps}, {fwd + bwd:.1f} s so far", file=sys.stderr)
    tokens = a.batch * a.seq * a.steps
    print(json.dumps({
        "tokens_per_s": tokens / (fwd + bwd), "forward_ms": 1e3 * fwd / a.steps, "backward_ms": 1e3 * bwd / a.steps,
        "loss": loss, "params": n_params, "threads": torch.get_num_threads(), "attn": "sdpa, RefreshKV mask" if a.mask_L > 0 else a.attn,
        "mask_L": a.mask_L, "torch": torch.__version__, "class": type(model).__name__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
