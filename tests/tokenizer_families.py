#!/usr/bin/env python3
"""Tokenizer files of the SentencePiece and Qwen2 families, trained here.

No Llama 2, Mistral, TinyLlama or Qwen2 tokenizer.json ships with the
project, so Hugging Face `tokenizers` trains small ones (a few seconds) on
the first characters of the corpus documents, laid out as those models'
files are. Writes into OUT_DIR:

  sp_legacy.json  Llama 2 / TinyLlama (transformers' legacy layout):
                  normalizer Sequence[Prepend("▁"), Replace(" " -> "▁")],
                  no pre-tokenizer, BPE with byte_fallback (<0x00>..<0xFF>
                  at ids 3..258 after <unk> <s> </s>), unk_token <unk>,
                  fuse_unk, decoder Sequence[Replace("▁" -> " "),
                  ByteFallback, Fuse, Strip(" ", 1, 0)], <s> in front;
  sp_first.json   the same vocabulary, Mistral / Llama 2 non-legacy:
                  pre_tokenizer Metaspace(prepend_scheme first, split
                  false), no normalizer, the same decoder;
  sp_always.json  Metaspace(always, split true) and the Metaspace decoder
                  (transformers' SentencePiece converter);
  sp_never.json   Metaspace(never, split true), Metaspace decoder;
  sp_holes.json   sp_first.json without the byte tokens <0xA9> and <0x81>
                  (so some characters become <unk>);
  qwen2_nfc.json  byte-level BPE as Qwen2's file: normalizer NFC,
                  Sequence[Split(Qwen2's pattern, Isolated), ByteLevel(use_regex
                  false)], <|endoftext|> <|im_start|> <|im_end|> added;
  heldout.jsonl   text for the comparison: later parts of the documents
                  than those trained on, and cases at the fringes (NFD
                  input, combining marks, emoji, CJK, control bytes,
                  characters only byte fallback covers, runs of spaces and
                  digits, added tokens spelled out);
  train.txt       what was trained on.

The corpus documents (JSON Lines, {"text": ...}) come on standard input.

Usage: zstdcat CORPUS/*.jsonl.zst | tokenizer_families.py OUT_DIR
"""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
TRAIN_CHARS, HELD_CHARS = 3000, 3000

FRINGES = [
    "caf\u00e9 cafe\u0301 Cafe\u0301s", "\u0041\u030a\u0073\u0074\u0072\u00f6\u006d \u212b", "e\u0301\u0301 a\u0323\u0307",
    "\u1e9b\u0323 \u0071\u0307\u0323", "\ud55c\uad6d\uc5b4 \u1112\u1161\u11ab", "\u4e2d\u6587\u5b57\u7b26 \u65e5\u672c\u8a9e",
    "\u00e9\u4e2d \u00e9\u00e9x e\u0301\u4e2d\u00e9 \u00e9\U0001f999",
    "emoji \U0001f999\U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f", "ctrl \x00\x01\x07\x1b[0m\x7f end",
    "  two leading spaces", " one leading space", "trailing spaces   ", " " * 300 + "x", "1234567890" * 40,
    "tabs\tand\nnew\r\nlines\n\n\n", "\u0663\u0664 \u0967\u0968 \uff11\uff12 \U0001d7d9", "<s> spelled <s>x</s>",
    "<|endoftext|> and <|im_start|>user\n<|im_end|>", "<0x41> is not a byte token", "\u2581 already \u2581\u2581 meta",
    "\U00010348\U0001f600\U000e0041 astral", "mixed \u00a0nbsp\u2003em\u3000ideo", "",
    "\u0915\u094d\u0937 \u0e01\u0e33 \u05e9\u05b8\u05c1", "Zalgo z\u0351\u0357\u0303a\u0325\u0322",
]


def sentencepiece_files(train, out_dir):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    # few letters in the alphabet, so that rarer characters need the byte fallback
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=2, limit_alphabet=150, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(train, trainer)
    trained = json.loads(tok.to_str())
    # Llama 2's layout: <unk> <s> </s>, the 256 byte tokens, then the pieces
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(trained["model"]["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    model = dict(trained["model"], vocab=vocab, unk_token="<unk>", fuse_unk=True, byte_fallback=True,
                 ignore_merges=False, dropout=None, continuing_subword_prefix=None, end_of_word_suffix=None)
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    post = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                     {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    spm_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}

    def metaspace(scheme, split):
        return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}

    legacy_norm = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                       {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    layouts = {
        "sp_legacy": (legacy_norm, None, spm_decoder),
        "sp_first": (None, metaspace("first", False), spm_decoder),
        "sp_always": (None, metaspace("always", True), metaspace("always", True)),
        "sp_never": (None, metaspace("never", True), metaspace("never", True)),
    }
    for name, (norm, pre, dec) in layouts.items():
        j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": norm,
             "pre_tokenizer": pre, "post_processor": post, "decoder": dec, "model": model}
        write(out_dir, name, j)
    # two byte tokens renamed away: a character needing one of them becomes
    # <unk> (fused with its neighbours), and byte tokens of a later character
    # land before that pending <unk>, as Hugging Face orders them
    holes = {"<0xA9>": "<unused-A9>", "<0x81>": "<unused-81>"}
    model_holes = dict(model, vocab={holes.get(k, k): v for k, v in vocab.items()})
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
         "pre_tokenizer": metaspace("first", False), "post_processor": post, "decoder": spm_decoder,
         "model": model_holes}
    write(out_dir, "sp_holes", j)


def qwen2_file(train, out_dir):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.train_from_iterator(train, trainer)
    j = json.loads(tok.to_str())
    j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    write(out_dir, "qwen2_nfc", j)


def write(out_dir, name, j):
    path = os.path.join(out_dir, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    Tokenizer.from_file(path)  # Hugging Face must load what the comparison hands it


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    docs = [json.loads(line)["text"] for line in sys.stdin if line.strip()]
    if not docs:
        sys.exit("tokenizer_families: no documents on standard input")
    train = [d[:TRAIN_CHARS] for d in docs]
    held = [d[TRAIN_CHARS:TRAIN_CHARS + HELD_CHARS] for d in docs if len(d) > TRAIN_CHARS][::3]
    with open(os.path.join(out_dir, "train.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(train))
    sentencepiece_files(train, out_dir)
    qwen2_file(train, out_dir)
    with open(os.path.join(out_dir, "heldout.jsonl"), "w", encoding="utf-8") as f:
        for text in FRINGES + held:
            f.write(json.dumps({"text": text}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
