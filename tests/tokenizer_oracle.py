#!/usr/bin/env python3
"""Reference tokenizers for kvcpt's: token ids, one document per line.

Reads JSONL documents ({"text": ...}) on standard input and writes each
document's ids, space-separated, one line per document (the format of
`kvcpt tokenize --jsonl`), from one of two reference implementations:

  --engine hf        Hugging Face `tokenizers` on the same tokenizer.json
                     kvcpt loads (--tokenizer PATH);
  --engine tiktoken  `tiktoken` with Meta's Llama 3 ranks and split pattern:
                     the Encoding that Meta's own llama_models.llama3
                     tokenizer builds from its tokenizer.model.

Special tokens are ordinary text unless --allow-special (hf only: Meta's
tokenizer names some special tokens differently from tokenizer.json).
--add-special (hf) is encode(text, add_special_tokens=True): the BOS of the
tokenizer's post-processor, if it has one, goes in front.
--roundtrip also checks decode(encode(x)) == x. --bench prints one JSON
line with the engine's single-thread encoding rate instead of ids.
--decode (hf) reads lines of ids instead and writes each line's
decode(ids, skip_special_tokens=False) as {"text": ...} (the format of
`kvcpt tokenize --decode --jsonl`).
"""
import argparse
import json
import sys
import time


def hf_encoder(path, allow_special, add_special):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.encode_special_tokens = not allow_special  # specials as plain text unless allowed
    # the decoded text leaves out the BOS that add_special_tokens put in front
    skip = 1 if add_special and tok.encode("", add_special_tokens=True).ids else 0
    return ((lambda text: tok.encode(text, add_special_tokens=add_special).ids),
            (lambda ids: tok.decode(ids[skip:], skip_special_tokens=False)))


def tiktoken_encoder(allow_special):
    if allow_special:
        sys.exit("tokenizer_oracle: --allow-special is for --engine hf only")
    from llama_models.llama3.tokenizer import Tokenizer

    enc = Tokenizer.get_instance().model  # tiktoken.Encoding, Meta's ranks and pattern
    return (lambda text: enc.encode(text, disallowed_special=())), enc.decode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=("hf", "tiktoken"), required=True)
    ap.add_argument("--tokenizer", help="tokenizer.json (hf)")
    ap.add_argument("--allow-special", action="store_true")
    ap.add_argument("--add-special", action="store_true")
    ap.add_argument("--roundtrip", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--decode", action="store_true")
    args = ap.parse_args()
    if args.decode:
        if args.engine != "hf" or not args.tokenizer:
            sys.exit("tokenizer_oracle: --decode is for --engine hf --tokenizer PATH")
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(args.tokenizer)
        for line in sys.stdin:
            ids = [int(x) for x in line.split()]
            sys.stdout.write(json.dumps({"text": tok.decode(ids, skip_special_tokens=False)}) + "\n")
        return 0
    if args.engine == "hf":
        if not args.tokenizer:
            sys.exit("tokenizer_oracle: --engine hf needs --tokenizer PATH")
        encode, decode = hf_encoder(args.tokenizer, args.allow_special, args.add_special)
    else:
        if args.add_special:
            sys.exit("tokenizer_oracle: --add-special is for --engine hf only")
        encode, decode = tiktoken_encoder(args.allow_special)
    texts = [json.loads(line)["text"] for line in sys.stdin if line.strip()]

    if args.bench:
        nbytes = sum(len(t.encode("utf-8")) for t in texts)
        t0 = time.perf_counter()
        tokens = sum(len(encode(t)) for t in texts)
        secs = time.perf_counter() - t0
        print(json.dumps({"engine": args.engine, "mb_per_s": nbytes / 1e6 / secs, "bytes": nbytes,
                          "seconds": secs, "tokens": tokens}))
        return 0

    bad = 0
    out = sys.stdout
    for i, text in enumerate(texts):
        ids = encode(text)
        if args.roundtrip and decode(ids) != text:
            print(f"tokenizer_oracle: document {i + 1}: decode(encode(x)) != x", file=sys.stderr)
            bad += 1
        out.write(" ".join(map(str, ids)) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
