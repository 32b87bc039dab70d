"""kvcpt's numbers for one case against Hugging Face transformers.

A case is the directory written by `dump_model_case` (tests/tools/): kvcpt's
parameters, tokens, targets, logits, loss and gradients for B x T tokens with
K = L (every key kept, so plain causal attention: what transformers runs).
`compare_case` runs the same tokens through a LlamaForCausalLM (fp32, eager
attention) and checks, printing "ok - ..." / "FAIL - ..." lines:
  logits, loss: |d| <= 1e-4 + 1e-4 |ref|
  gradients:    |d| <= 1e-4 * max|ref of that tensor| + 1e-3 |ref|
The loss is the mean cross-entropy over the case's targets (-1 ignored), as
kvcpt defines it (transformers' own `labels` path shifts by one).
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM


class Report:
    def __init__(self):
        self.failed = 0

    def __call__(self, ok, name, why=""):
        print(("ok - " if ok else "FAIL - ") + name + ("" if ok else ": " + why), flush=True)
        self.failed += 0 if ok else 1


def close(got, ref, atol, rtol):
    d = (got - ref).abs()
    bad = int((d > atol + rtol * ref.abs()).sum().item())
    return bad, float(d.max().item()) if d.numel() else 0.0


def load_case(d):
    with open(os.path.join(d, "case.json")) as f:
        return json.load(f)


def case_params(d, case):
    """kvcpt's parameters of the case, by Hugging Face tensor name."""
    params = np.fromfile(os.path.join(d, "params.f32"), dtype=np.float32)
    sd = {}
    for t in case["tensors"]:
        shape = t["shape"][: t["ndim"]]
        n = int(np.prod(shape))
        sd[t["name"]] = torch.from_numpy(params[t["offset"] : t["offset"] + n].reshape(shape).copy())
    return sd


def model_from_case(d, case, device, report, tag):
    """A LlamaForCausalLM with the case's config and kvcpt's parameters."""
    cfg_d = {k: v for k, v in case["config"].items() if k != "torch_dtype"}  # fp32 here, whatever the export says
    cfg = LlamaConfig(**cfg_d)
    try:  # eager attention (the plain softmax(QK^T)V path), where the version lets one choose
        model = LlamaForCausalLM._from_config(cfg, attn_implementation="eager")
    except TypeError:
        model = LlamaForCausalLM(cfg)
    model = model.float().to(device)
    missing, unexpected = model.load_state_dict(case_params(d, case), strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg.tie_word_embeddings)]
    report(not missing and not unexpected, f"{tag} every tensor loads by its Hugging Face name",
           f"missing {missing}, unexpected {unexpected}")
    return model


def compare_case(d, case, model, device, report, tag, logits_atol=1e-4, grad_atol_frac=1e-4):
    """Logits, loss and every parameter gradient of `model` vs the case's
    (logits within logits_atol + 1e-4 |ref|, gradients within grad_atol_frac
    of the tensor's max |ref| + 1e-3 |ref|: a deep model sums more rounding
    than the tiny test models)."""
    B, T = case["B"], case["T"]
    model.zero_grad(set_to_none=True)
    tokens = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), dtype=np.int32).astype(np.int64))
    targets = torch.from_numpy(np.fromfile(os.path.join(d, "targets.i32"), dtype=np.int32).astype(np.int64))
    tokens, targets = tokens.view(B, T).to(device), targets.to(device)
    logits = model(input_ids=tokens).logits.float()
    V = logits.shape[-1]
    ours = torch.from_numpy(np.fromfile(os.path.join(d, "logits.f32"), dtype=np.float32)).view(B, T, V).to(device)
    bad, mx = close(ours, logits.detach(), logits_atol, 1e-4)
    report(bad == 0, f"{tag} logits", f"{bad} elements off, max |d| {mx:.3e}")
    loss = F.cross_entropy(logits.view(-1, V), targets, ignore_index=-1)
    d_loss = abs(case["loss"] - loss.item())
    report(d_loss <= 1e-4 + 1e-4 * abs(loss.item()), f"{tag} loss {case['loss']:.6f} vs {loss.item():.6f}",
           f"|d| {d_loss:.3e}")
    loss.backward()
    grads = np.fromfile(os.path.join(d, "grads.f32"), dtype=np.float32)
    named = dict(model.named_parameters())
    worst = 0.0
    for t in case["tensors"]:
        ref = named[t["name"]].grad.detach().float().flatten()
        n = ref.numel()
        got = torch.from_numpy(grads[t["offset"] : t["offset"] + n].copy()).to(device)
        scale = float(ref.abs().max().item())
        bad, mx = close(got, ref, grad_atol_frac * scale, 1e-3)
        worst = max(worst, mx / scale if scale > 0 else 0.0)
        report(bad == 0, f"{tag} grad {t['name']}", f"{bad} of {n} off, max |d| {mx:.3e}, max |ref| {scale:.3e}")
    print(f"# {tag} max |d logits| {close(ours, logits.detach(), 0, 0)[1]:.3e}, "
          f"worst gradient error relative to tensor max {worst:.3e}")


def compare_case_logits(d, model, report, name, atol=5e-4):
    """`model`'s logits (no gradients) on the case's tokens against kvcpt's
    logits of the case, within atol + 1e-4 |ref|; one report line, `name`
    with the largest difference."""
    case = load_case(d)
    B, T = case["B"], case["T"]
    tok = torch.from_numpy(np.fromfile(os.path.join(d, "tokens.i32"), dtype=np.int32).astype(np.int64)).view(B, T)
    with torch.no_grad():
        logits = model.eval()(input_ids=tok).logits.float()
    ours = torch.from_numpy(np.fromfile(os.path.join(d, "logits.f32"), dtype=np.float32)).view_as(logits)
    bad, mx = close(ours, logits, atol, 1e-4)
    report(bad == 0, f"{name} (max |d| {mx:.2e})", f"{bad} elements off")
