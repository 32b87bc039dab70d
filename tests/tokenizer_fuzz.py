#!/usr/bin/env python3
"""Seeded random short strings for the tokenizer oracle, as JSON Lines.

Each string strings together 1..30 pieces drawn from the fringes where the
split patterns and engines differ: case-folded contractions (with U+017F
and U+212A), whitespace in and out of Unicode's White_Space (U+0085,
U+FEFF, U+200B), digits of several scripts, combining marks, astral
characters, bytes without a SmolLM2 token, and special tokens of Llama 3
and SmolLM2 spelled out. Same seed, same strings: usage N SEED.
"""
import json
import random
import sys

POOL = list("aAsStTkKlLdDreEvVmM'\u2019 1234567890.,!?-_\t\n\r") + [
    "\u017f", "\u212a", "\u0085", "\ufeff", "\u00a0", "\u2003", "\u3000", "\u2028", "\u200b", "\u0663", "\u0967",
    "\u2460", "\u216b", "\u00bd", "\uff11", "\U0001d7d9", "\u4e2d", "\u00e9", "e\u0301", "\U0001f999", "\u0004",
    "\u001c", "\x0b", "\x0c", "  ", "\n\n", "'s", "'LL", "'Re", "<|im_start|>", "<|endoftext|>", "<repo_name>",
    "<|eot_id|>", "<|begin_of_text|>"]


def main():
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    for _ in range(n):
        print(json.dumps({"text": "".join(rng.choice(POOL) for _ in range(rng.randint(1, 30)))}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
