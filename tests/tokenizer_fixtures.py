#!/usr/bin/env python3
"""Tokenizer files in the GPT-2 and Qwen2 styles, for the tokenizer oracle.

No GPT-2 or Qwen2 tokenizer.json ships with the project, so their
pre-tokenizers are put in front of SmolLM2's vocabulary and merges (any
byte-level BPE vocabulary exercises the split; the oracle runs Hugging Face
`tokenizers` on the same file). Reads SMOLLM2 (its tokenizer.json) and writes
into OUT_DIR:

  gpt2.json   pre_tokenizer ByteLevel(add_prefix_space false, use_regex true)
              alone: GPT-2's own pattern;
  qwen2.json  Sequence[Split(Qwen2's pattern, Isolated), ByteLevel(use_regex
              false)]: each digit alone, (?i:) contractions, newline runs.

Everything else (added tokens, post-processor, model) stays SmolLM2's.
"""
import argparse
import copy
import json
import os

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level(use_regex):
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("smollm2", help="SmolLM2's tokenizer.json")
    ap.add_argument("out_dir")
    args = ap.parse_args()
    with open(args.smollm2, encoding="utf-8") as f:
        base = json.load(f)
    styles = {
        "gpt2": byte_level(True),
        "qwen2": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level(False)]},
    }
    os.makedirs(args.out_dir, exist_ok=True)
    for name, pre in styles.items():
        tok = copy.copy(base)
        tok["pre_tokenizer"] = pre
        with open(os.path.join(args.out_dir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
