#!/usr/bin/env python3
"""llama.cpp's gguf package and transformers' GGUF loader as the oracles of
`kvcpt convert --from FILE.gguf`.

Run by tests/model/test_gguf_oracle.sh; by hand:

    third_party/venv/bin/python tests/gguf_oracle.py --kvcpt ./kvcpt --workdir /tmp/g [--real FILE.gguf]

Checks, each printed as "ok - ...", "FAIL - ..." or "skip - ...":
  a. tiny llama GGUF files written by gguf.GGUFWriter, one per tensor type
     (F32, F16, BF16, Q8_0, Q4_0, Q4_1; random values quantized by
     gguf.quants.quantize): kvcpt's fp32 output equals gguf.quants.dequantize
     bit for bit (q/k rows un-permuted by transformers' own function);
  b. the real SmolLM2-135M-Instruct GGUF: kvcpt's model.safetensors equals
     the state dict of AutoModelForCausalLM.from_pretrained(gguf_file=...)
     exactly, its config.json agrees with transformers' config, and its
     tokenizer.json loads in tokenizers and splits digits one by one;
  c. planted bugs are caught by the comparison of (b): the q/k permutation
     left in, and Q4_1's min added twice;
  d. a tiny qwen2 GGUF (a random Qwen2ForCausalLM's tensors, q/k/v biases
     included, under llama.cpp's names and in Hugging Face's row order, as
     its qwen2 converter writes them; F32 and Q8_0): kvcpt's output equals
     the state dict of transformers' GGUF loader bit for bit, and its
     config.json says Qwen2ForCausalLM with the file's theta, eps and tying.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

FAILED = []


def check(ok, name, why=""):
    print(("ok - %s" % name) if ok else ("FAIL - %s: %s" % (name, why)), flush=True)
    if not ok:
        FAILED.append(name)


def kvcpt_convert(args, src, dst, *extra):
    r = subprocess.run([args.kvcpt, "convert", "--from", src, "--to", dst, *extra], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def reverse_permute(w, n_head):
    """transformers' LlamaTensorProcessor._reverse_permute_weights, the function itself."""
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor
    return LlamaTensorProcessor(config={})._reverse_permute_weights(w, n_head, n_head)


def permute(w, n_head):
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute: what kvcpt must undo."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bits_equal(a, b):
    return a.shape == b.shape and np.array_equal(np.ascontiguousarray(a, np.float32).view(np.uint32),
                                                 np.ascontiguousarray(b, np.float32).view(np.uint32))


TINY = dict(vocab=96, hidden=64, ffn=128, layers=2, heads=4, kv_heads=2, head_dim=16)


def tiny_tensors(rng):
    """HF-layout fp32 tensors of a tiny llama, under their GGUF names (untied)."""
    t, C, F = TINY, TINY["hidden"], TINY["ffn"]
    # untied (output.weight present): SmolLM2 below covers the tied case
    out = {"token_embd.weight": rng.standard_normal((t["vocab"], C)), "output_norm.weight": rng.standard_normal(C),
           "output.weight": rng.standard_normal((t["vocab"], C))}
    for i in range(t["layers"]):
        out.update({
            f"blk.{i}.attn_norm.weight": rng.standard_normal(C),
            f"blk.{i}.attn_q.weight": rng.standard_normal((t["heads"] * t["head_dim"], C)),
            f"blk.{i}.attn_k.weight": rng.standard_normal((t["kv_heads"] * t["head_dim"], C)),
            f"blk.{i}.attn_v.weight": rng.standard_normal((t["kv_heads"] * t["head_dim"], C)),
            f"blk.{i}.attn_output.weight": rng.standard_normal((C, t["heads"] * t["head_dim"])),
            f"blk.{i}.ffn_norm.weight": rng.standard_normal(C),
            f"blk.{i}.ffn_gate.weight": rng.standard_normal((F, C)),
            f"blk.{i}.ffn_up.weight": rng.standard_normal((F, C)),
            f"blk.{i}.ffn_down.weight": rng.standard_normal((C, F))})
    out = {k: v.astype(np.float32) for k, v in out.items()}
    # a few values near zero: F16 subnormals, tiny Q8_0/Q4 block scales
    out["blk.0.attn_norm.weight"][:32] *= 1e-6
    return out


HF_NAME = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
           "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def hf_name(g):
    parts = g.split(".")
    if parts[0] == "blk":
        return "model.layers.%s.%s.%s" % (parts[1], HF_NAME[parts[2]], parts[3])
    return HF_NAME[parts[0]] + ".weight"


def tiny_writer(path, arch, theta, eps):
    """A gguf.GGUFWriter of a TINY-shaped `arch` model, its metadata added."""
    import gguf
    t = TINY
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(t["layers"])
    w.add_context_length(256)
    w.add_embedding_length(t["hidden"])
    w.add_feed_forward_length(t["ffn"])
    w.add_head_count(t["heads"])
    w.add_head_count_kv(t["kv_heads"])
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(eps)
    return w


def write_convert(args, w, path, out, label):
    """Writes w's file, converts it with kvcpt into out; its tensors, or
    None (reported) when the conversion fails."""
    from safetensors.numpy import load_file
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    rc, log = kvcpt_convert(args, path, out)
    if rc != 0:
        check(False, "%s: kvcpt convert" % label, log)
        return None
    return load_file(os.path.join(out, "model.safetensors"))


def tiny_dtypes(args):
    import gguf
    rng = np.random.default_rng(7)
    for qname in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"]:
        qtype = gguf.GGMLQuantizationType[qname]
        path = os.path.join(args.workdir, "tiny_%s.gguf" % qname)
        w = tiny_writer(path, "llama", 10000.0, 1e-5)
        t = TINY
        expect = {}
        for name, x in tiny_tensors(rng).items():
            if name.endswith((".attn_q.weight", ".attn_k.weight")):
                x = permute(x, t["heads"] if ".attn_q." in name else t["kv_heads"])
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, q, raw_dtype=qtype)
            deq = gguf.quants.dequantize(q, qtype).reshape(x.shape)
            if name.endswith((".attn_q.weight", ".attn_k.weight")):
                deq = reverse_permute(deq, t["heads"] if ".attn_q." in name else t["kv_heads"])
            expect[hf_name(name)] = deq
        got = write_convert(args, w, path, os.path.join(args.workdir, "tiny_%s" % qname), "tiny llama %s" % qname)
        if got is None:
            continue
        bad = [k for k in expect if k not in got or not bits_equal(got[k], expect[k])]
        extra = sorted(set(got) - set(expect))
        check(not bad and not extra, "tiny llama, every tensor %s: kvcpt equals gguf.quants.dequantize bit for bit "
              "(%d tensors)" % (qname, len(expect)), "differ: %s; unexpected: %s" % (bad[:4], extra[:4]))


def gguf_name(k):
    """llama.cpp's name of a Hugging Face tensor name (HF_NAME reversed)."""
    to_gguf = {v: g for g, v in HF_NAME.items()}
    base, kind = k.rsplit(".", 1)
    if base.startswith("model.layers."):
        _, _, i, rest = base.split(".", 3)
        return "blk.%s.%s.%s" % (i, to_gguf[rest], kind)
    return "%s.%s" % (to_gguf[base], kind)


def tiny_qwen2(args):
    import gguf
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(5)
    t = TINY
    cfg = Qwen2Config(vocab_size=t["vocab"], hidden_size=t["hidden"], intermediate_size=t["ffn"],
                      num_hidden_layers=t["layers"], num_attention_heads=t["heads"],
                      num_key_value_heads=t["kv_heads"], max_position_embeddings=256, rms_norm_eps=1e-6,
                      rope_theta=1e6, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():  # biases too: transformers starts them at zero
        for _, p in model.named_parameters():
            p.copy_(torch.randn_like(p))
    sd = {k: v.numpy() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    for qname in ["F32", "Q8_0"]:
        d = os.path.join(args.workdir, "qwen2_%s" % qname)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tiny.gguf")
        w = tiny_writer(path, "qwen2", 1e6, 1e-6)
        w.add_vocab_size(t["vocab"])  # transformers' loader takes it from here without a tokenizer
        for k, x in sd.items():
            # llama.cpp quantizes the matrices; norms and biases stay F32
            qtype = gguf.GGMLQuantizationType[qname if x.ndim == 2 else "F32"]
            w.add_tensor(gguf_name(k), gguf.quants.quantize(x.astype(np.float32), qtype), raw_dtype=qtype)
        out = os.path.join(args.workdir, "qwen2_%s_out" % qname)
        got = write_convert(args, w, path, out, "tiny qwen2 %s" % qname)
        if got is None:
            continue
        ref_model = AutoModelForCausalLM.from_pretrained(d, gguf_file="tiny.gguf", dtype=torch.float32)
        ref = {k: v.detach().numpy() for k, v in ref_model.state_dict().items() if k != "lm_head.weight"}
        bad = [k for k in ref if k not in got or not bits_equal(got[k], ref[k])] + sorted(set(got) - set(ref))
        check(type(ref_model).__name__ == "Qwen2ForCausalLM" and not bad and len(ref) == len(sd),
              "tiny qwen2 %s: all %d tensors (q/k/v biases included) equal transformers' GGUF loader bit for bit"
              % (qname, len(ref)), "%s; differ or missing: %s" % (type(ref_model).__name__, bad[:6]))
        c = json.load(open(os.path.join(out, "config.json")))
        want = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "rope_theta": 1e6,
                "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "use_sliding_window": False}
        wrong = {k: c.get(k) for k in want if c.get(k) != want[k]}
        check(not wrong, "tiny qwen2 %s: config.json names Qwen2ForCausalLM with the file's theta, eps, tying"
              % qname, "ours: %s" % wrong)


def real_model(args):
    t0 = time.time()
    stage = lambda what: print("# %s: %.1f s" % (what, time.time() - t0), flush=True)
    import torch
    import tokenizers
    from safetensors.numpy import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    out = os.path.join(args.workdir, "smollm2")
    rc, log = kvcpt_convert(args, args.real, out)
    check(rc == 0, "SmolLM2 GGUF: kvcpt convert", log)
    if rc != 0:
        return
    stage("kvcpt convert")
    ours = load_file(os.path.join(out, "model.safetensors"))
    d, f = os.path.split(os.path.abspath(args.real))
    ref_model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    ref = {k: v.detach().numpy() for k, v in ref_model.state_dict().items()}
    stage("transformers loaded the GGUF")
    if ref_model.config.tie_word_embeddings:
        ref.pop("lm_head.weight", None)

    def compare(mine):
        bad = [k for k in ref if k not in mine or not bits_equal(mine[k], ref[k])]
        return bad + sorted(set(mine) - set(ref))

    bad = compare(ours)
    check(not bad, "SmolLM2: all %d tensors equal transformers' GGUF loader bit for bit" % len(ref),
          "differ or missing: %s" % bad[:6])

    cfg = json.load(open(os.path.join(out, "config.json")))
    rc_ = AutoConfig.from_pretrained(out)
    hc = ref_model.config
    fields = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings", "bos_token_id",
              "eos_token_id"]
    wrong = [(k, cfg.get(k), getattr(hc, k, None)) for k in fields if cfg.get(k) != getattr(hc, k, None)]
    theta_ref = (hc.rope_parameters or {}).get("rope_theta") if hasattr(hc, "rope_parameters") else hc.rope_theta
    theta_ours = (rc_.rope_parameters or {}).get("rope_theta") if hasattr(rc_, "rope_parameters") else rc_.rope_theta
    for k, a, b in [("rms_norm_eps", cfg["rms_norm_eps"], hc.rms_norm_eps), ("rope_theta", theta_ours, theta_ref)]:
        if a is None or b is None or abs(a - b) > 1e-6 * abs(b):
            wrong.append((k, a, b))
    check(not wrong, "SmolLM2: config.json agrees with transformers' config from the GGUF (%d fields)" % (len(fields) + 2),
          "ours vs transformers: %s" % wrong)

    tok = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    enc = tok.encode("abc 12345 def")
    digits = [t for t in enc.tokens if any(ch.isdigit() for ch in t)]
    check(digits == list("12345"), "SmolLM2 tokenizer.json loads; digits split one by one",
          "tokens %s" % enc.tokens)
    # transformers' own conversion of the GGUF tokenizer, as a second opinion on the ids
    try:
        from transformers import AutoTokenizer
        ht = AutoTokenizer.from_pretrained(d, gguf_file=f)
        texts = ["Hello, world! 2024-11-26", "  leading spaces\nand\ttabs", "<|im_start|>user\nhi<|im_end|>",
                 "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001F600", "x = 3.14159 * r**2"]
        # without special tokens: transformers' GGUF conversion prepends BOS
        # although the file says add_bos_token = false
        ours_ids = lambda s: tok.encode(s, add_special_tokens=False).ids
        diff = [(s, ours_ids(s), ht(s, add_special_tokens=False)["input_ids"]) for s in texts
                if ours_ids(s) != ht(s, add_special_tokens=False)["input_ids"]]
        check(not diff, "SmolLM2 tokenizer: ids equal transformers' GGUF tokenizer on %d texts" % len(texts),
              "differ: %s" % diff[:2])
    except Exception as e:  # the second opinion is optional; the digits check above is the contract
        print("skip - SmolLM2 tokenizer vs transformers' GGUF tokenizer: %s" % str(e).splitlines()[0])

    stage("tokenizer checks")
    # planted bugs: each perturbed copy must be caught by compare()
    n_head, n_kv = hc.num_attention_heads, hc.num_key_value_heads
    planted = dict(ours)
    for k in planted:
        if k.endswith("q_proj.weight"):
            planted[k] = permute(planted[k], n_head)
        elif k.endswith("k_proj.weight"):
            planted[k] = permute(planted[k], n_kv)
    bad = compare(planted)
    check(len(bad) == 2 * hc.num_hidden_layers, "planted bug caught: q/k rows left in llama.cpp's permuted order",
          "%d tensors flagged, expected %d" % (len(bad), 2 * hc.num_hidden_layers))

    import gguf
    reader = gguf.GGUFReader(args.real)
    t = next(t for t in reader.tensors if t.tensor_type == gguf.GGMLQuantizationType.Q4_1)
    raw = np.asarray(t.data).reshape(-1, 20)
    m = raw[:, 2:4].copy().view(np.float16).astype(np.float32)  # each block's min
    name = hf_name(t.name)
    planted = dict(ours)
    x = planted[name].reshape(-1, 32) if not name.endswith(("q_proj.weight", "k_proj.weight")) else None
    if x is None:  # un-permute is a row shuffle; redo it on the GGUF order to add the min per block
        heads = n_head if "q_proj" in name else n_kv
        x = permute(planted[name], heads).reshape(-1, 32) + m
        planted[name] = reverse_permute(x.reshape(planted[name].shape), heads)
    else:
        planted[name] = (x + m).reshape(planted[name].shape)
    bad = compare(planted)
    check(bad == [name], "planted bug caught: Q4_1 min added twice in %s" % name, "flagged %s" % bad[:4])
    stage("planted bugs")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvcpt", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--real", help="the SmolLM2-135M-Instruct GGUF; absent: part (b) and (c) skip")
    ap.add_argument("--only", choices=["tiny", "real"])
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.only != "real":
        tiny_dtypes(args)
        tiny_qwen2(args)
    if args.only != "tiny":
        if args.real and os.path.exists(args.real):
            real_model(args)
        else:
            print("skip - SmolLM2 GGUF checks: the model file is missing (%s); run 'make setup'" % args.real)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
