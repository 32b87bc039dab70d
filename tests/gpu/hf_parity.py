#!/usr/bin/env python3
"""kvcpt's CUDA engine against Hugging Face transformers' LlamaForCausalLM.

Reads a case written by `dump_model_case OUTDIR SEED TIED AGG cuda 24`
(the CUDA engine's logits, loss and gradients for a tiny random model, with
K = L so every key is kept: plain causal attention), loads the same
parameters into transformers' LlamaForCausalLM (fp32, eager attention, TF32
off) on the GPU, and compares:
  logits, loss: |d| <= 1e-4 + 1e-4 |ref|
  gradients:    |d| <= 1e-4 * max|ref of that tensor| + 1e-3 |ref|
The loss is the mean cross-entropy over the case's targets (-1 ignored),
as kvcpt defines it (transformers' own `labels` path shifts by one).
Prints "ok - ..." / "FAIL - ..." lines; exits 1 on any failure.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

failed = 0


def report(ok, name, why=""):
    global failed
    print(("ok - " if ok else "FAIL - ") + name + ("" if ok else ": " + why))
    failed += 0 if ok else 1


def close(got, ref, atol, rtol):
    d = (got - ref).abs()
    bad = int((d > atol + rtol * ref.abs()).sum().item())
    return bad, float(d.max().item()) if d.numel() else 0.0


def main(d):
    case = json.load(open(os.path.join(d, "case.json")))
    mask, B, T = case["mask"], case["B"], case["T"]
    tag = f"[hf transformers, {case.get('device', 'cpu')}, {'tied' if case['config']['tie_word_embeddings'] else 'untied'}]"
    if mask["K"] < mask["L"]:
        report(False, f"{tag} case", "K < L: transformers has no RefreshKV mask; dump the case with K = L")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cfg_d = {k: v for k, v in case["config"].items() if k != "torch_dtype"}  # fp32 here, whatever the export says
    cfg = LlamaConfig(**cfg_d)
    try:  # eager attention: the plain softmax(QK^T)V path, where the version allows choosing
        model = LlamaForCausalLM._from_config(cfg, attn_implementation="eager")
    except TypeError:
        model = LlamaForCausalLM(cfg)
    model = model.float().to(dev)
    params = np.fromfile(os.path.join(d, "params.f32"), dtype=np.float32)
    grads = np.fromfile(os.path.join(d, "grads.f32"), dtype=np.float32)
    sd = {}
    for t in case["tensors"]:
        shape = t["shape"][: t["ndim"]]
        n = int(np.prod(shape))
        sd[t["name"]] = torch.from_numpy(params[t["offset"] : t["offset"] + n].reshape(shape).copy())
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg.tie_word_embeddings)]
    report(not missing and not unexpected, f"{tag} every tensor loads by its Hugging Face name",
           f"missing {missing}, unexpected {unexpected}")
    tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), dtype=np.int32).astype(np.int64)).view(B, T).to(dev)
    targets = torch.from_numpy(np.fromfile(os.path.join(d, "targets.i32"), dtype=np.int32).astype(np.int64)).to(dev)
    logits = model(input_ids=tokens).logits.float()
    V = logits.shape[-1]
    ours = torch.from_numpy(np.fromfile(os.path.join(d, "logits.f32"), dtype=np.float32)).view(B, T, V).to(dev)
    bad, mx = close(ours, logits.detach(), 1e-4, 1e-4)
    report(bad == 0, f"{tag} logits", f"{bad} elements off, max |d| {mx:.3e}")
    loss = F.cross_entropy(logits.view(-1, V), targets, ignore_index=-1)
    d_loss = abs(case["loss"] - loss.item())
    report(d_loss <= 1e-4 + 1e-4 * abs(loss.item()), f"{tag} loss {case['loss']:.6f} vs {loss.item():.6f}", f"|d| {d_loss:.3e}")
    loss.backward()
    named = dict(model.named_parameters())
    worst = 0.0
    for t in case["tensors"]:
        ref = named[t["name"]].grad.detach().float().flatten()
        n = ref.numel()
        got = torch.from_numpy(grads[t["offset"] : t["offset"] + n].copy()).to(dev)
        scale = float(ref.abs().max().item())
        bad, mx = close(got, ref, 1e-4 * scale, 1e-3)
        worst = max(worst, mx / scale if scale > 0 else 0.0)
        report(bad == 0, f"{tag} grad {t['name']}", f"{bad} of {n} off, max |d| {mx:.3e}, max |ref| {scale:.3e}")
    print(f"# {tag} max |d logits| {close(ours, logits.detach(), 0, 0)[1]:.3e}, worst gradient error relative to tensor max {worst:.3e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
