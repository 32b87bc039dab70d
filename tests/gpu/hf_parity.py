#!/usr/bin/env python3
"""kvcpt's CUDA engine against Hugging Face transformers' LlamaForCausalLM.

Reads a case written by `dump_model_case OUTDIR SEED TIED AGG cuda 24`
(the CUDA engine's logits, loss and gradients for a tiny random model, with
K = L so every key is kept: plain causal attention), loads the same
parameters into transformers' LlamaForCausalLM (fp32, eager attention, TF32
off) on the GPU, and compares them as tests/hf_compare.py says.
Prints "ok - ..." / "FAIL - ..." lines; exits 1 on any failure.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hf_compare import Report, compare_case, load_case, model_from_case  # noqa: E402


def main(d):
    report = Report()
    case = load_case(d)
    tag = f"[hf transformers, {case.get('device', 'cpu')}, {'tied' if case['config']['tie_word_embeddings'] else 'untied'}]"
    if case["mask"]["K"] < case["mask"]["L"]:
        report(False, f"{tag} case", "K < L: transformers has no RefreshKV mask; dump the case with K = L")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = model_from_case(d, case, dev, report, tag)
    compare_case(d, case, model, dev, report, tag)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
