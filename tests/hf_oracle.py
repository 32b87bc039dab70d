#!/usr/bin/env python3
"""Hugging Face transformers as the model oracle, on the CPU.

    hf_oracle.py --kvcpt ./kvcpt --dump build/tests/tools/dump_model_case \
                 --dump-emu build/emu/tools/dump_model_case --workdir DIR

1. transformers -> kvcpt. A small random LlamaForCausalLM (GQA 4:2, llama3
   rope scaling, tied and untied; every weight, the norms' too, drawn at
   random so that no gradient is trivially zero) is saved with
   save_pretrained and converted by `kvcpt convert`. kvcpt's CPU model and
   its CUDA engine run by the emulator of the CUDA runtime load the converted
   directory; their parameters equal transformers' bit for bit, and their
   logits, loss and every parameter gradient agree with transformers' within
   the fp32 tolerances of tests/hf_compare.py.
2. kvcpt -> transformers. A model trained by `kvcpt train` is exported with
   `kvcpt convert` (fp32, and bf16 with --to-dtype bf16); both load with
   LlamaForCausalLM.from_pretrained unchanged (no missing, unexpected or
   mismatched tensor), the bf16 weights equal torch's rounding of the fp32
   ones, and transformers' logits agree with kvcpt's on the same tokens.
3. Mistral through the same architecture table (model/arch.c): a small
   random MistralForCausalLM (sliding_window null) is converted, kvcpt's CPU
   model's logits, loss and gradients agree with transformers', a few
   steps of `kvcpt train` continue it, and both it and the trained model
   export as MistralForCausalLM (config.json: model_type mistral) with
   logits equal to kvcpt's.
4. Qwen2 the same way (and its q/k/v biases): a small random
   Qwen2ForCausalLM, biases drawn non-zero (transformers initialises them
   to zero), tied and untied, is converted; the CPU model's and the
   emulated CUDA engine's logits, loss and every gradient (the biases'
   included) agree with transformers'; the CPU model trains a few steps,
   and both export as Qwen2ForCausalLM (model_type qwen2) with logits equal
   to kvcpt's.
Prints "ok - ..." / "FAIL - ..." lines; exits 1 on any failure.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_compare import Report, close, compare_case, load_case  # noqa: E402

report = Report()
L_KEEP_ALL = "24"  # dump_model_case's L: K = L keeps every key (plain causal attention)


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr, file=sys.stderr)
    report(r.returncode == 0, what, f"exit status {r.returncode}: {' '.join(cmd)}")
    return r.returncode == 0


def oracle_config(tied):
    # head_dim 8 with theta 1e4 against llama3's band edges: every one of its
    # three frequency rules is used (as in kvcpt's tiny preset)
    return LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tied, bos_token_id=1,
                       eos_token_id=2, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64})


def hf_to_kvcpt(args, tied):
    name = "tied" if tied else "untied"
    torch.manual_seed(10 + tied)
    model = LlamaForCausalLM._from_config(oracle_config(tied), attn_implementation="eager").float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if n.endswith("norm.weight") else 0.25 * torch.randn_like(p))
    hf_dir = os.path.join(args.workdir, f"hf_{name}")
    nat_dir = hf_dir + "_native"
    model.save_pretrained(hf_dir, safe_serialization=True)
    if not run([args.kvcpt, "convert", "--from", hf_dir, "--to", nat_dir], f"{name}: kvcpt converts the save_pretrained directory"):
        return
    for dev, tool in (("cpu", args.dump), ("cuda", args.dump_emu)):
        engine = "CPU model" if dev == "cpu" else "CUDA engine (emulated)"
        tag = f"[transformers -> kvcpt, {engine}, {name}]"
        case_dir = os.path.join(args.workdir, f"case_{name}_{dev}")
        if not run([tool, case_dir, str(20 + tied), str(int(tied)), "max", dev, L_KEEP_ALL, nat_dir],
                   f"{tag} dump_model_case runs on the converted directory"):
            continue
        case = load_case(case_dir)
        sd = model.state_dict()
        params = np.fromfile(os.path.join(case_dir, "params.f32"), dtype=np.float32)
        same = True
        for t in case["tensors"]:
            n = int(np.prod(t["shape"][: t["ndim"]]))
            ref = sd[t["name"]].flatten().numpy()
            same &= np.array_equal(params[t["offset"] : t["offset"] + n].view(np.uint32), ref.view(np.uint32))
        report(same and len(case["tensors"]) == len(sd) - (1 if tied else 0),
               f"{tag} parameters equal transformers' bit for bit ({len(case['tensors'])} tensors)")
        compare_case(case_dir, case, model, "cpu", report, tag)


def train_tiny(args, model="tiny", init="random", name="run"):
    """A few steps of kvcpt train on synthetic data: the model to export."""
    data = os.path.join(args.workdir, "data")
    run_dir = os.path.join(args.workdir, name)
    if not os.path.exists(data) and not run(
            [args.kvcpt, "prepare", "--synthetic", "recall", "--vocab", "64", "--doc-tokens", "57", "--query-tail",
             "9", "--docs", "60", "--out", data], "kvcpt prepare (synthetic) for the training run"):
        return None
    cfg = {"model": model, "init": init, "data": data, "L": 48, "S": 8, "K": 6, "mask": 1, "global_batch": 4,
           "micro_batch": 2, "steps": 12, "warmup_steps": 2, "lr": 3e-3, "optim": "adamw8bit",
           "eval_interval": 1000, "ckpt_interval": 1000, "keep_last": 1, "out": run_dir}
    cfg_path = os.path.join(args.workdir, f"{name}.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    if not run([args.kvcpt, "train", "--config", cfg_path], f"kvcpt train runs 12 steps ({name}, init {init})"):
        return None
    return os.path.join(run_dir, "model")


def kvcpt_to_hf(args):
    trained = train_tiny(args)
    if trained is None:
        return
    exports = {}
    for dtype in ("f32", "bf16"):
        out = os.path.join(args.workdir, f"export_{dtype}")
        cmd = [args.kvcpt, "convert", "--from", trained, "--to", out, "--to-format", "hf"]
        if dtype == "bf16":
            cmd += ["--to-dtype", "bf16"]
        if run(cmd, f"kvcpt convert exports the trained model as Hugging Face ({dtype})"):
            exports[dtype] = out
    loaded = {}
    for dtype, out in exports.items():
        model, info = LlamaForCausalLM.from_pretrained(out, output_loading_info=True)
        problems = {k: v for k, v in info.items() if v}  # missing, unexpected, mismatched keys, errors
        want = torch.float32 if dtype == "f32" else torch.bfloat16
        report(not problems and model.dtype == want,
               f"[kvcpt -> transformers, {dtype}] from_pretrained loads the export unchanged ({model.dtype})",
               f"loading info {problems}, dtype {model.dtype}")
        loaded[dtype] = model.eval()
    if "f32" in loaded and "bf16" in loaded:
        sd32, sd16 = loaded["f32"].state_dict(), loaded["bf16"].state_dict()
        bad = [k for k in sd32 if not torch.equal(sd32[k].to(torch.bfloat16), sd16[k])]
        report(not bad, "[kvcpt -> transformers, bf16] weights equal torch's bf16 rounding of the fp32 export",
               f"differ: {bad}")
    for dtype, model in loaded.items():
        tag = f"[kvcpt -> transformers, {dtype}]"
        case_dir = os.path.join(args.workdir, f"case_export_{dtype}")
        # kvcpt's own logits from the exported directory (a bf16 export is
        # widened to fp32 exactly), against transformers' in fp32 on the same weights
        if not run([args.dump, case_dir, "31", "0", "max", "cpu", L_KEEP_ALL, exports[dtype]],
                   f"{tag} kvcpt reads its export back"):
            continue
        case = load_case(case_dir)
        B, T = case["B"], case["T"]
        tokens = torch.from_numpy(np.fromfile(os.path.join(case_dir, "tokens.i32"), dtype=np.int32).astype(np.int64))
        with torch.no_grad():
            logits = model.float()(input_ids=tokens.view(B, T)).logits
        ours = torch.from_numpy(np.fromfile(os.path.join(case_dir, "logits.f32"), dtype=np.float32)).view_as(logits)
        bad, mx = close(ours, logits, 1e-4, 1e-4)
        report(bad == 0, f"{tag} transformers' logits equal kvcpt's (max |d| {mx:.2e})", f"{bad} elements off")


def export_reloads(args, src, tag, cls, model_type):
    """kvcpt's HF export of `src` loads as `cls` unchanged, its config.json
    names the family, and transformers' logits equal kvcpt's on it."""
    out = src + "_hf"
    if not run([args.kvcpt, "convert", "--from", src, "--to", out, "--to-format", "hf"], f"{tag} kvcpt exports it"):
        return
    with open(os.path.join(out, "config.json")) as f:
        cj = json.load(f)
    report(cj.get("model_type") == model_type and cj.get("architectures") == [cls.__name__],
           f"{tag} the export's config.json says model_type {model_type}, architectures [{cls.__name__}]",
           f"model_type {cj.get('model_type')}, architectures {cj.get('architectures')}")
    model, info = cls.from_pretrained(out, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    report(not problems and type(model) is cls, f"{tag} {cls.__name__}.from_pretrained loads the export unchanged",
           f"loading info {problems}, class {type(model).__name__}")
    case_dir = out + "_case"
    if not run([args.dump, case_dir, "33", "0", "max", "cpu", L_KEEP_ALL, out], f"{tag} kvcpt reads its export back"):
        return
    case = load_case(case_dir)
    B, T = case["B"], case["T"]
    tokens = torch.from_numpy(np.fromfile(os.path.join(case_dir, "tokens.i32"), dtype=np.int32).astype(np.int64))
    with torch.no_grad():
        logits = model.float().eval()(input_ids=tokens.view(B, T)).logits
    ours = torch.from_numpy(np.fromfile(os.path.join(case_dir, "logits.f32"), dtype=np.float32)).view_as(logits)
    bad, mx = close(ours, logits, 1e-4, 1e-4)
    report(bad == 0, f"{tag} transformers' logits equal kvcpt's (max |d| {mx:.2e})", f"{bad} elements off")


def family(args, name, cls, cfg, seed, engines=("cpu",)):
    """A family through the same table (model/arch.c): a small random `cls`
    of `cfg` (every weight, norms and biases too, drawn at random) is read
    by `kvcpt convert`, run by each engine against transformers, trained a
    few steps on the CPU, and exported (before and after) as `cls`."""
    torch.manual_seed(seed)
    model = cls._from_config(cfg, attn_implementation="eager").float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if n.endswith("norm.weight") else 0.25 * torch.randn_like(p))
    hf_dir = os.path.join(args.workdir, f"hf_{name}")
    nat_dir = hf_dir + "_native"
    model.save_pretrained(hf_dir, safe_serialization=True)
    if not run([args.kvcpt, "convert", "--from", hf_dir, "--to", nat_dir],
               f"[{name}, transformers -> kvcpt] kvcpt converts {cls.__name__}"):
        return
    for dev in engines:
        tag = f"[{name}, transformers -> kvcpt, {'CPU model' if dev == 'cpu' else 'CUDA engine (emulated)'}]"
        case_dir = os.path.join(args.workdir, f"case_{name}_{dev}")
        tool = args.dump if dev == "cpu" else args.dump_emu
        if run([tool, case_dir, str(seed + 1), "0", "max", dev, L_KEEP_ALL, nat_dir], f"{tag} dump_model_case runs"):
            case = load_case(case_dir)
            n_model = len(model.state_dict()) - (1 if cfg.tie_word_embeddings else 0)
            report(len(case["tensors"]) == n_model, f"{tag} kvcpt holds every tensor ({len(case['tensors'])})",
                   f"{len(case['tensors'])} tensors, transformers has {n_model}")
            compare_case(case_dir, case, model, "cpu", report, tag)
    export_reloads(args, nat_dir, f"[{name}, kvcpt -> transformers]", cls, cfg.model_type)
    trained = train_tiny(args, model=nat_dir, init="pretrained", name=f"run_{name}")
    if trained is not None:
        export_reloads(args, trained, f"[{name}, kvcpt-trained -> transformers]", cls, cfg.model_type)


def mistral(args):
    """Mistral, a second family: read, run, trained, exported."""
    cfg = MistralConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                        rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=None, tie_word_embeddings=False,
                        bos_token_id=1, eos_token_id=2)
    family(args, "mistral", MistralForCausalLM, cfg, 40)


def qwen2(args):
    """Qwen2, whose q, k and v projections carry biases, untied and tied,
    on both engines."""
    for tied in (False, True):
        cfg = Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tied, bos_token_id=1,
                          eos_token_id=2)
        family(args, "qwen2_tied" if tied else "qwen2", Qwen2ForCausalLM, cfg, 50 + 10 * tied, ("cpu", "cuda"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvcpt", default="./kvcpt")
    ap.add_argument("--dump", default="build/tests/tools/dump_model_case")
    ap.add_argument("--dump-emu", default="build/emu/tools/dump_model_case")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(1)
    for tied in (False, True):
        hf_to_kvcpt(args, tied)
    kvcpt_to_hf(args)
    mistral(args)
    qwen2(args)
    print(f"# {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
