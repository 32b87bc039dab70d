#!/usr/bin/env python3
"""RoPE scaling against transformers: every rope_type kvcpt reads (linear,
dynamic, yarn, llama3, and none), past the context the model was trained to.

    rope_oracle.py --kvcpt ./kvcpt --dump build/tests/tools/dump_model_case \
                   --dump-rope build/tests/tools/dump_rope --workdir DIR

1. Tables. For each type (yarn also with every optional field), kvcpt's
   inverse frequencies equal LlamaRotaryEmbedding's (bit for bit where torch
   computes its pow one element at a time, head_dim 8, or its vectorised
   pow agrees with libm's for the unscaled table; within one float32 ulp
   otherwise), and its cos and sin
   tables (yarn's scaled by its attention factor) within 4e-7, for a
   sequence 3x max_position_embeddings (dynamic: also a shorter one).
   `--rope-scaling yarn:4` on a config without scaling gives the tables
   transformers computes once that config's rope_scaling says the same.
2. The model. A random LlamaForCausalLM per type (max_position_embeddings
   32), saved with save_pretrained: kvcpt's CPU model forward and backward
   (dump_model_case, 2 x 96 tokens) against transformers': logits, loss and
   every gradient (tests/hf_compare.py's tolerances); the config kvcpt writes
   back (kvcpt convert, native -> Hugging Face) gives transformers the same
   rope_parameters.
3. Eval. `kvcpt eval --policies full` at L = 80, S = 16 (3x the trained
   context) on synthetic documents: every document's PPL equals transformers'
   on the same L + S ids within 2e-5 relative, for each type and for
   --rope-scaling yarn:4 on the model without scaling against transformers
   with that rope_scaling in its config.json; eval.json records the scaling.
   Without scaling the context is refused (naming --rope-scaling and
   --allow-beyond-context); with --allow-beyond-context it runs, tagged
   BEYOND in the table and eval.json, and still equals transformers.
Prints "ok - ..." / "FAIL - ..." lines; exits 1 on any failure.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_compare import Report, compare_case, load_case  # noqa: E402
from kvpress_peer import eligible, read_docs  # noqa: E402

report = Report()
MAX_POS, L, S, DOCS = 32, 80, 16, 2
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0},
    "yarn, every option": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 24,
                           "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.8, "mscale_all_dim": 1.3,
                           "truncate": False},
    "yarn, attention_factor": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.25},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16},
}


def run(cmd, what, expect_ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if (r.returncode == 0) != expect_ok:
        print(r.stdout + r.stderr, file=sys.stderr)
        report(False, what, f"exit status {r.returncode}: {' '.join(cmd)}")
    return r


def slug(name):
    return name.replace(", ", "-").replace(" ", "_")


def config_dict(rope, D, theta, max_pos):
    return dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=D, max_position_embeddings=max_pos, rms_norm_eps=1e-5,
                rope_theta=theta, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                rope_scaling=dict(rope) if rope else None)


def hf_tables(cfg, T):
    emb = LlamaRotaryEmbedding(LlamaConfig(**cfg))
    cos, sin = emb(torch.zeros(1), torch.arange(T)[None])  # one forward of T positions, as dynamic needs
    h = cfg["head_dim"] // 2
    return emb.inv_freq.numpy(), cos[0, :, :h].numpy(), sin[0, :, :h].numpy()


def check_tables(args, name, rope, D, theta, T, spec=None, exact=False):
    """kvcpt's tables (dump_rope) against LlamaRotaryEmbedding's for rope;
    with spec, kvcpt's config has no scaling and gets spec as --rope-scaling.
    inv_freq bit for bit when exact or head_dim <= 8, else within one ulp.
    Returns whether inv_freq is equal bit for bit."""
    d = os.path.join(args.workdir, f"tables_{slug(name)}_{D}_{int(theta)}_{T}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_dict(None if spec else rope, D, theta, 64), f)
    tag = f"[tables, {name}, head_dim {D}, theta {theta:g}, T {T}{', --rope-scaling ' + spec if spec else ''}]"
    r = run([args.dump_rope, d, str(T), os.path.join(d, "t.f32")] + ([spec] if spec else []), f"{tag} dump_rope")
    if r.returncode != 0:
        return False
    h = D // 2
    t = np.fromfile(os.path.join(d, "t.f32"), dtype=np.float32)
    inv, cos, sin = t[:h], t[h:h + T * h].reshape(T, h), t[h + T * h:].reshape(T, h)
    hinv, hcos, hsin = hf_tables(config_dict(rope, D, theta, 64), T)
    same = np.array_equal(inv.view(np.uint32), hinv.view(np.uint32))
    if exact or D <= 8:
        report(same, f"{tag} inv_freq bit for bit", f"kvcpt {inv.tolist()} transformers {hinv.tolist()}")
    else:
        ulps = np.abs(inv.view(np.int32).astype(np.int64) - hinv.view(np.int32).astype(np.int64)).max()
        report(ulps <= 1, f"{tag} inv_freq within one ulp ({int((inv != hinv).sum())} of {h} differ by one)",
               f"{ulps} ulps apart")
    dc, ds = float(np.abs(cos - hcos).max()), float(np.abs(sin - hsin).max())
    report(max(dc, ds) <= 4e-7, f"{tag} cos, sin tables (max |d| {max(dc, ds):.1e})", f"cos {dc:.3e} sin {ds:.3e}")
    return same


def tables(args):
    # torch raises the base to 2i/D one element at a time for head_dim 8, and
    # with its vectorised pow (Sleef) for head_dim 64, which can differ from
    # libm's powf by one ulp: where the unscaled table is equal bit for bit,
    # the types built on the same powers must be too (dynamic has a base of
    # its own)
    for D, theta in ((8, 10000.0), (64, 100000.0), (64, 500000.0)):
        exact = check_tables(args, "none", None, D, theta, 200)
        for name, rope in SCALINGS.items():
            check_tables(args, name, rope, D, theta, 200, exact=exact and name != "dynamic")
    # llama3's band edges where its wavelengths round close to them
    llama3 = dict(SCALINGS["llama3"], original_max_position_embeddings=64)
    check_tables(args, "llama3 over 64", llama3, 64, 100000.0, 200,
                 exact=check_tables(args, "none", None, 64, 100000.0, 200))
    # dynamic below its max_position_embeddings: the initial base, Python's doubles
    check_tables(args, "dynamic", SCALINGS["dynamic"], 64, 100000.0, 48)
    check_tables(args, "yarn", {"rope_type": "yarn", "factor": 4.0}, 64, 100000.0, 200, spec="yarn:4")
    check_tables(args, "linear", {"rope_type": "linear", "factor": 2.0}, 8, 10000.0, 200, spec="linear:2")
    check_tables(args, "dynamic", {"rope_type": "dynamic", "factor": 2.0}, 64, 100000.0, 200, spec="dynamic:2")


def save_model(args, name, rope, seed):
    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(LlamaConfig(**config_dict(rope, 16, 500.0, MAX_POS)),
                                          attn_implementation="eager").float()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if n.endswith("norm.weight") else 0.25 * torch.randn_like(p))
    d = os.path.join(args.workdir, "hf_" + slug(name))
    model.save_pretrained(d, safe_serialization=True)
    return model, d


def load_hf(d):
    # a fresh module per use: transformers' dynamic RoPE keeps the grown
    # frequencies of the longest forward it has seen
    return LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


def model_case(args, name, model, hf_dir, tokens):
    tag = f"[model, {name}]"
    case_dir = os.path.join(args.workdir, "case_" + slug(name))
    r = run([args.dump, case_dir, "5", "-", "max", "cpu", str(L), hf_dir, "0", "0", tokens, str(L), str(S)],
            f"{tag} dump_model_case on the save_pretrained directory")
    if r.returncode == 0:
        compare_case(case_dir, load_case(case_dir), model, "cpu", report, f"{tag} T = {L + S} (trained {MAX_POS})")


def round_trip(args, name, hf_dir):
    tag = f"[config round trip, {name}]"
    nat, back = hf_dir + "_native", hf_dir + "_export"
    if run([args.kvcpt, "convert", "--from", hf_dir, "--to", nat], f"{tag} convert to native").returncode or \
       run([args.kvcpt, "convert", "--from", nat, "--to", back, "--to-format", "hf"],
           f"{tag} export as Hugging Face").returncode:
        return
    a, b = LlamaConfig.from_pretrained(hf_dir).rope_parameters, LlamaConfig.from_pretrained(back).rope_parameters
    report(a == b, f"{tag} transformers reads the same rope_parameters from kvcpt's export", f"{a} vs {b}")


def hf_doc_ppl(hf_dir, docs):
    model = load_hf(hf_dir)
    out = []
    with torch.no_grad():
        for _, d in docs:
            ids = torch.tensor(d[:L + S], dtype=torch.long)[None]
            lp = model(ids).logits[0, L - 1:L + S - 1].double().log_softmax(-1)
            out.append(math.exp(float(-lp[torch.arange(S), ids[0, L:L + S]].mean())))
    return out


def eval_case(args, tag, hf_dir, ref_dir, docs, extra=(), want_rope=None):
    out = os.path.join(args.workdir, "eval_" + slug(tag))
    r = run([args.kvcpt, "eval", "--model", hf_dir, "--data", args.data, "--split", "train", "--L", str(L), "--S",
             str(S), "--K", "10", "--policies", "full", "--max-docs", str(DOCS), "--bootstrap", "10", "--quiet",
             "--out", out] + list(extra), f"[eval, {tag}] kvcpt eval runs")
    if r.returncode != 0:
        return None
    cell = json.load(open(os.path.join(out, "eval.json")))["results"][0]
    ours, ref = cell["ppl_per_document"], hf_doc_ppl(ref_dir, docs)
    rel = max(abs(a - b) / b for a, b in zip(ours, ref))
    report(len(ours) == len(ref) and rel <= 2e-5,
           f"[eval, {tag}] full-attention PPL of each document equals transformers' ({rel:.1e} relative)",
           f"kvcpt {ours} transformers {ref}")
    if want_rope is not None:
        got = {k: cell.get("rope", {}).get(k) for k in want_rope}
        report(got == want_rope, f"[eval, {tag}] eval.json records the RoPE: {json.dumps(want_rope)}",
               f"got {got}")
    return r


def evals(args, dirs):
    docs = eligible(read_docs(args.data, "train"), L, S, DOCS)
    if len(docs) != DOCS:
        report(False, "eval documents", f"only {len(docs)} eligible")
        return
    for name, rope in SCALINGS.items():
        want = {"from": "config.json", "extension_used": True, "beyond_covered_context": False}
        eval_case(args, name, dirs[name], dirs[name], docs, want_rope=want)
    plain = dirs["none"]
    # --rope-scaling yarn:4 on the model without scaling, against transformers
    # reading the same field from its config.json
    ref = plain + "_yarn4"
    shutil.copytree(plain, ref, dirs_exist_ok=True)
    cfg_path = os.path.join(ref, "config.json")
    cfg = json.load(open(cfg_path))
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"], cfg["rope_scaling"] = 500.0, {"rope_type": "yarn", "factor": 4.0}
    json.dump(cfg, open(cfg_path, "w"))
    eval_case(args, "--rope-scaling yarn:4", plain, ref, docs, ["--rope-scaling", "yarn:4"],
              {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": MAX_POS},
               "from": "--rope-scaling", "trained_context": MAX_POS, "covered_context": 4 * MAX_POS,
               "extension_used": True, "beyond_covered_context": False})
    # no scaling, past the trained context: refused, or run and labelled
    out = os.path.join(args.workdir, "eval_refused")
    r = run([args.kvcpt, "eval", "--model", plain, "--data", args.data, "--split", "train", "--L", str(L), "--S",
             str(S), "--K", "10", "--policies", "full", "--max-docs", "1", "--quiet", "--out", out],
            "[eval, no scaling] a context past the trained one is refused", expect_ok=False)
    report(r.returncode != 0 and "--rope-scaling" in r.stderr and "--allow-beyond-context" in r.stderr
           and not os.path.exists(os.path.join(out, "eval.json")),
           "[eval, no scaling] L + S past max_position_embeddings refused, naming --rope-scaling and "
           "--allow-beyond-context", r.stderr.strip()[-300:])
    r = eval_case(args, "no scaling, --allow-beyond-context", plain, plain, docs, ["--allow-beyond-context"],
                  {"rope_scaling": None, "from": "config.json", "extension_used": False,
                   "beyond_covered_context": True})
    if r is not None:
        report("BEYOND" in r.stdout and "not a headline result" in r.stdout,
               "[eval, no scaling, --allow-beyond-context] the table tags the context BEYOND", r.stdout[-400:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvcpt", default="./kvcpt")
    ap.add_argument("--dump", default="build/tests/tools/dump_model_case")
    ap.add_argument("--dump-rope", default="build/tests/tools/dump_rope")
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    torch.set_num_threads(1)
    tables(args)
    args.data = os.path.join(args.workdir, "data")
    r = run([args.kvcpt, "prepare", "--synthetic", "recall", "--vocab", "64", "--doc-tokens", "120", "--query-tail",
             "9", "--docs", "24", "--out", args.data], "kvcpt prepare (synthetic documents)")
    if r.returncode != 0:
        return 1
    rng = np.random.default_rng(7)
    tokens = os.path.join(args.workdir, "tokens.i32")
    rng.integers(0, 96, size=2 * (L + S), dtype=np.int32).astype("<i4").tofile(tokens)
    dirs = {}
    for i, (name, rope) in enumerate([("none", None)] + list(SCALINGS.items())):
        model, dirs[name] = save_model(args, name, rope, 30 + i)
        if rope is not None:
            model_case(args, name, model, dirs[name], tokens)
            round_trip(args, name, dirs[name])
    evals(args, dirs)
    print(f"# {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
