#!/usr/bin/env python3
"""GGUF tokenizers of the SentencePiece and Qwen2 families through
`kvcpt convert --from FILE.gguf`, against Hugging Face.

Run by tests/data/test_tokenizer_families.sh on the files tests/tokenizer_families.py
trained (FAMILIES: sp_legacy.json, qwen2_nfc.json, heldout.jsonl). For each,
gguf.GGUFWriter writes a tiny llama GGUF carrying the tokenizer as
llama.cpp's converter lays it out, kvcpt converts it, and:

  llama (SentencePiece BPE): tokens, scores (-id: a piece made later by the
      trainer ranks lower, as SentencePiece's scores do), token types
      (<unk> unknown, <s> </s> control, <0xNN> byte), no merges. The
      tokenizer.json kvcpt writes gives, in kvcpt and in Hugging Face
      `tokenizers`, the ids of transformers' own GGUF tokenizer (its
      GGUFLlamaConverter builds the merges from the scores) on the held-out
      text, and decodes as it does;
  gpt2 + pre qwen2 (byte-level BPE, NFC): tokens, merges, token types; the
      converted file gives the ids of the trained qwen2_nfc.json itself in
      kvcpt and in `tokenizers`, and of transformers' GGUF tokenizer.

Prints "ok - ..." / "FAIL - ..." lines; exit status 1 when any failed.
Usage: gguf_tokenizer_oracle.py --kvcpt ./kvcpt --families DIR --workdir DIR
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

FAILED = []


def check(ok, name, why=""):
    print(("ok - %s" % name) if ok else ("FAIL - %s: %s" % (name, why)), flush=True)
    if not ok:
        FAILED.append(name)


def write_gguf(path, n_vocab, tokenizer_kv):
    """A tiny llama (hidden 16, one layer) with the tokenizer metadata given."""
    import gguf
    rng = np.random.default_rng(3)
    C, F, H, D = 16, 32, 2, 8
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(128)
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(H)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    tokenizer_kv(w)
    shapes = {"token_embd.weight": (n_vocab, C), "output_norm.weight": (C,), "output.weight": (n_vocab, C),
              "blk.0.attn_norm.weight": (C,), "blk.0.attn_q.weight": (H * D, C), "blk.0.attn_k.weight": (H * D, C),
              "blk.0.attn_v.weight": (H * D, C), "blk.0.attn_output.weight": (C, H * D), "blk.0.ffn_norm.weight": (C,),
              "blk.0.ffn_gate.weight": (F, C), "blk.0.ffn_up.weight": (F, C), "blk.0.ffn_down.weight": (C, F)}
    for name, shape in shapes.items():
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tokens_of(tok_json):
    vocab = tok_json["model"]["vocab"]
    for a in tok_json["added_tokens"]:
        vocab.setdefault(a["content"], a["id"])
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert None not in tokens, "ids are not dense"
    return tokens


def gguf_converted(args, name, n_vocab, tokenizer_kv):
    """Writes NAME.gguf and converts it: (its path, the tokenizer.json written or None)."""
    g = os.path.join(args.workdir, name + ".gguf")
    write_gguf(g, n_vocab, tokenizer_kv)
    return g, convert(args, name, g)


def convert(args, name, gguf_path):
    out = os.path.join(args.workdir, name)
    r = subprocess.run([args.kvcpt, "convert", "--from", gguf_path, "--to", out], capture_output=True, text=True)
    check(r.returncode == 0 and os.path.exists(os.path.join(out, "tokenizer.json")),
          "%s GGUF: kvcpt convert writes tokenizer.json" % name, (r.stdout + r.stderr)[-600:])
    return os.path.join(out, "tokenizer.json") if r.returncode == 0 else None


def kvcpt_ids(args, tok_path, texts):
    inp = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    # special tokens parsed, as encode() parses them
    r = subprocess.run([args.kvcpt, "tokenize", "--tokenizer", tok_path, "--jsonl", "--allow-special"], input=inp,
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr[-600:]
    return [[int(x) for x in line.split()] for line in r.stdout.splitlines()], ""


def kvcpt_decode(args, tok_path, seqs):
    inp = "".join(" ".join(map(str, s)) + "\n" for s in seqs)
    r = subprocess.run([args.kvcpt, "tokenize", "--tokenizer", tok_path, "--decode", "--jsonl"], input=inp,
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return [json.loads(line)["text"] for line in r.stdout.splitlines()]


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "text %d: %s vs %s" % (i, x[:12], y[:12])
    return "lengths %d vs %d" % (len(a), len(b))


def compare(args, label, tok_path, texts, want):
    """kvcpt and `tokenizers` on the converted file both give `want`."""
    from tokenizers import Tokenizer
    ours, err = kvcpt_ids(args, tok_path, texts)
    check(ours == want, "%s: kvcpt's ids on the converted tokenizer.json (%d texts)" % (label, len(texts)),
          err or first_diff(ours, want))
    hf = Tokenizer.from_file(tok_path)
    theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    check(theirs == want, "%s: HF tokenizers' ids on the converted tokenizer.json" % label, first_diff(theirs, want))


def transformers_tokenizer(gguf_path, family):
    """transformers' conversion of the GGUF's tokenizer, a `tokenizers`
    Tokenizer (its AutoTokenizer wraps the same in a class whose __init__
    does not take this tiny file's keys)."""
    from transformers.integrations.ggml import convert_gguf_tokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    parsed = load_gguf_checkpoint(gguf_path, return_tensors=False)
    fast, _ = convert_gguf_tokenizer(family, dict(parsed["tokenizer"]))
    return fast


def sentencepiece(args, texts):
    src = json.load(open(os.path.join(args.families, "sp_legacy.json"), encoding="utf-8"))
    tokens = tokens_of(src)
    special = {"<unk>": 2, "<s>": 3, "</s>": 3}
    types = [special.get(t, 6 if len(t) == 6 and t.startswith("<0x") else 1) for t in tokens]

    def kv(w):
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([-float(i) for i in range(len(tokens))])
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_space_prefix(True)

    g, path = gguf_converted(args, "sp", len(tokens), kv)
    if not path:
        return
    ht = transformers_tokenizer(g, "llama")
    want = [e.ids for e in ht.encode_batch(texts, add_special_tokens=False)]
    compare(args, "llama (SentencePiece) GGUF vs transformers' GGUF tokenizer", path, texts, want)
    from tokenizers import Tokenizer
    bos = Tokenizer.from_file(path).encode("x").ids[:1]
    check(bos == [1], "llama GGUF: the converted tokenizer.json puts <s> (add_bos_token) in front", "got %s" % bos)
    theirs = [ht.decode(ids, skip_special_tokens=False) for ids in want]
    ours = kvcpt_decode(args, path, want)
    check(ours == theirs, "llama GGUF: kvcpt decodes the held-out ids as transformers' GGUF tokenizer",
          first_diff(ours or [], theirs))


def qwen2(args, texts):
    src_path = os.path.join(args.families, "qwen2_nfc.json")
    src = json.load(open(src_path, encoding="utf-8"))
    tokens = tokens_of(src)
    added = {a["content"] for a in src["added_tokens"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in src["model"]["merges"]]

    def kv(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types([3 if t in added else 1 for t in tokens])
        w.add_token_merges(merges)
        w.add_eos_token_id(tokens.index("<|endoftext|>"))
        w.add_add_bos_token(False)

    g, path = gguf_converted(args, "qwen2", len(tokens), kv)
    if not path:
        return
    from tokenizers import Tokenizer
    ref = Tokenizer.from_file(src_path)
    want = [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]
    compare(args, "gpt2 + qwen2 GGUF vs the trained qwen2_nfc.json", path, texts, want)
    # the tensors are a llama's (kvcpt refuses qwen2's biases); the tokenizer is Qwen2's
    ht = transformers_tokenizer(g, "qwen2")
    theirs = [e.ids for e in ht.encode_batch(texts, add_special_tokens=False)]
    check(theirs == want, "gpt2 + qwen2 GGUF: transformers' GGUF tokenizer agrees", first_diff(theirs, want))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvcpt", required=True)
    ap.add_argument("--families", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    texts = [json.loads(line)["text"] for line in open(os.path.join(args.families, "heldout.jsonl"), encoding="utf-8")]
    sentencepiece(args, texts)
    qwen2(args, texts)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
