#!/usr/bin/env python3
"""Interop of kvcpt checkpoints with the Python Hugging Face stack.

Run by `make test` (tests/model/test_hf_transformers.sh) with the locked venv of
scripts/setup.sh; by hand:

    third_party/venv/bin/python tests/hf_interop.py --kvcpt ./kvcpt [--workdir /tmp/kvcpt_interop] [--vllm]

Checks, each printed as "ok - ..." or "FAIL - ...":
  1. a tiny Llama saved by transformers (sharded, bf16) -> kvcpt convert to
     native -> back to HF -> loads with LlamaForCausalLM, identical tensors
     and logits;
  2. every kvcpt-written shard opens with safetensors.safe_open, carries
     metadata format=pt and matches the original tensors bit for bit;
  3. a file written by safetensors.torch.save_file is read by kvcpt;
  4. fp32 -> bf16 export by kvcpt equals torch's .to(torch.bfloat16) bitwise;
  5. a tied-embedding model (no lm_head.weight on disk) round trips;
  6. optionally (--vllm), vLLM loads the exported directory.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

FAILED = []


def check(ok, name, why=""):
    print(("ok - %s" % name) if ok else ("FAIL - %s: %s" % (name, why)), flush=True)
    if not ok:
        FAILED.append(name)


def tiny_config(tied):
    return LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                       rope_theta=500000.0, tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2,
                       rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64})


def kvcpt(args, *cmd):
    r = subprocess.run([args.kvcpt, "convert", *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr, file=sys.stderr)
    return r.returncode == 0


def load_dir_tensors(d):
    out, meta = {}, []
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), framework="pt") as sf:
                meta.append(sf.metadata())
                for k in sf.keys():
                    out[k] = sf.get_tensor(k)
    return out, meta


def same_tensors(a, b):
    if set(a) != set(b):
        return False, "names differ: %s" % sorted(set(a) ^ set(b))
    for k in a:
        if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or not torch.equal(a[k], b[k]):
            return False, "tensor %s differs" % k
    return True, ""


def roundtrip(args, name, tied, dtype):
    torch.manual_seed(0)
    ref_dir, nat_dir, out_dir = (os.path.join(args.workdir, name, s) for s in ("ref", "native", "out"))
    model = LlamaForCausalLM(tiny_config(tied)).to(dtype).eval()
    model.save_pretrained(ref_dir, safe_serialization=True, max_shard_size="40KB")
    check(kvcpt(args, "--from", ref_dir, "--to", nat_dir), "%s: kvcpt converts the transformers checkpoint" % name)
    check(kvcpt(args, "--from", nat_dir, "--to", out_dir, "--shard-size", "60KB"), "%s: kvcpt exports HF" % name)
    loaded = LlamaForCausalLM.from_pretrained(out_dir, dtype=dtype).eval()
    ok, why = same_tensors(model.state_dict(), loaded.state_dict())
    check(ok, "%s: transformers loads the kvcpt export with identical weights" % name, why)
    # the reference is the original directory loaded the same way: a model
    # cast with .to(bfloat16) also casts its RoPE inv_freq buffer, which
    # from_pretrained keeps in fp32, so its logits differ for that reason alone
    original = LlamaForCausalLM.from_pretrained(ref_dir, dtype=dtype).eval()
    ids = torch.randint(0, 128, (2, 17))
    with torch.no_grad():
        same = torch.equal(original(ids).logits, loaded(ids).logits)
    check(same, "%s: identical logits after the round trip" % name)
    ref_t, _ = load_dir_tensors(ref_dir)
    out_t, meta = load_dir_tensors(out_dir)
    ok, why = same_tensors(ref_t, out_t)
    check(ok, "%s: safetensors.safe_open reads every kvcpt shard, tensors bit-identical" % name, why)
    check(all(m and m.get("format") == "pt" for m in meta), "%s: kvcpt shards carry metadata format=pt" % name)
    return out_dir


def written_by_python(args):
    d = os.path.join(args.workdir, "pywritten")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(1)
    model = LlamaForCausalLM(tiny_config(False)).to(torch.bfloat16)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(d)
    nat, back = d + "_native", d + "_back"
    check(kvcpt(args, "--from", d, "--to", nat) and kvcpt(args, "--from", nat, "--to", back),
          "a file written by safetensors.torch.save_file is read by kvcpt")
    out, _ = load_dir_tensors(back)
    ok, why = same_tensors(sd, out)
    check(ok, "save_file -> kvcpt -> HF keeps every tensor", why)


def bf16_rounding(args):
    torch.manual_seed(2)
    model = LlamaForCausalLM(tiny_config(False)).float()
    d = os.path.join(args.workdir, "f32")
    model.save_pretrained(d, safe_serialization=True)
    out = d + "_bf16"
    check(kvcpt(args, "--from", d, "--to", out + "_nat", "--to-dtype", "bf16") and
          kvcpt(args, "--from", out + "_nat", "--to", out), "kvcpt converts fp32 -> bf16")
    got, _ = load_dir_tensors(out)
    want = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    ok, why = same_tensors(want, got)
    check(ok, "kvcpt fp32 -> bf16 equals torch .to(bfloat16) (round to nearest even)", why)
    with open(os.path.join(out, "config.json")) as f:
        check(json.load(f).get("torch_dtype") == "bfloat16", "config.json torch_dtype follows --to-dtype")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvcpt", default="./kvcpt")
    ap.add_argument("--workdir", default="/tmp/kvcpt_interop")
    ap.add_argument("--vllm", action="store_true", help="also load the export with vLLM")
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    out = roundtrip(args, "untied_bf16", False, torch.bfloat16)
    roundtrip(args, "tied_bf16", True, torch.bfloat16)
    roundtrip(args, "untied_f32", False, torch.float32)
    written_by_python(args)
    bf16_rounding(args)
    if args.vllm:
        from vllm import LLM, SamplingParams
        # the tiny model has no tokenizer: feed token ids directly
        llm = LLM(model=out, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=128, enforce_eager=True)
        res = llm.generate([{"prompt_token_ids": [1, 5, 9, 13]}], SamplingParams(max_tokens=4, temperature=0))
        check(len(res[0].outputs[0].token_ids) == 4, "vLLM loads the kvcpt export and generates")
    print("%d failed" % len(FAILED))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
