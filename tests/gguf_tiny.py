#!/usr/bin/env python3
"""Writes a tiny llama GGUF file with the standard library only (no numpy,
no gguf package), for the command-line tests of `kvcpt convert --from
FILE.gguf` that run without the venv.

    python3 tests/gguf_tiny.py OUT.gguf [--pre smollm] [--model gpt2] [--add-bos]
                               [--q4k TENSOR] [--no-tokenizer] [--untied] [--first TENSOR=VALUE]
                               [--set KEY=TYPE:VALUE]... [--drop KEY]... [--merge "A B"]...
                               [--token-type INDEX=VALUE]... [--all-bytes]

Shape: vocab 40, hidden 32, FFN 64, 2 layers, 4 heads over 2 KV heads
(head size 8); weights F32 with values i * 1e-3 (deterministic). --all-bytes
gives the tokenizer a token for each of the 256 bytes (GPT-2's byte map),
so any text encodes and kvcpt's tokenizer loads it: vocab 264. --q4k
stores one tensor as Q4_K (zero bytes of the right size), which kvcpt must
refuse by name. --first sets element 0 of one F32 tensor (an out-of-range
value for the --to-dtype checks). The tokenizer: 3 control tokens, the
characters a-j, 0-9 and "\u0120" (GPT-2's space), "ab", "\u0120a" and "n",
merges "a b" and "\u0120 a".

Metadata edits, for the refusal tests: --set adds or replaces KEY with a
value of TYPE f32, f64, u32, i32, str, or strs / ints (a JSON list: an array
of strings / int32); VALUE may be inf, -inf or nan for the floats. --drop
removes KEY. --merge appends a merge; --token-type sets one token's type.
"""
import argparse
import json
import struct

V, C, F, L, H, KV, D = 40, 32, 64, 2, 4, 2, 8
ALIGN = 32


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def u32(key, v):
    return kv(key, 4, struct.pack("<I", v))


def f32(key, v):
    return kv(key, 6, struct.pack("<f", v))


def boolean(key, v):
    return kv(key, 7, struct.pack("<B", 1 if v else 0))


def string(key, v):
    return kv(key, 8, s(v))


def str_array(key, items):
    return kv(key, 9, struct.pack("<IQ", 8, len(items)) + b"".join(s(i) for i in items))


def int_array(key, items):
    return kv(key, 9, struct.pack("<IQ", 5, len(items)) + b"".join(struct.pack("<i", i) for i in items))


def typed(key, spec):
    """KEY and "TYPE:VALUE" (--set) as one metadata entry."""
    vtype, value = spec.split(":", 1)
    if vtype in ("f32", "f64"):
        return kv(key, 6, struct.pack("<f", float(value))) if vtype == "f32" else kv(key, 12, struct.pack("<d", float(value)))
    if vtype in ("u32", "i32"):
        return kv(key, 4 if vtype == "u32" else 5, struct.pack("<I" if vtype == "u32" else "<i", int(value)))
    if vtype == "str":
        return string(key, value)
    if vtype in ("strs", "ints"):
        return (str_array if vtype == "strs" else int_array)(key, json.loads(value))
    if vtype == "f32s":  # JSON, NaN and Infinity allowed
        items = json.loads(value)
        return kv(key, 9, struct.pack("<IQ", 6, len(items)) + b"".join(struct.pack("<f", x) for x in items))
    raise SystemExit("gguf_tiny.py: --set type %r is not one of f32, f64, u32, i32, str, strs, ints, f32s" % vtype)


def byte_chars():
    """GPT-2's printable spelling of each byte (its bytes_to_unicode)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return [out[b] for b in range(256)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="llama")  # general.architecture, and the model keys' prefix
    ap.add_argument("--pre", default="smollm")
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--add-bos", action="store_true")
    ap.add_argument("--q4k")
    ap.add_argument("--no-tokenizer", action="store_true")
    ap.add_argument("--untied", action="store_true")
    ap.add_argument("--first", default="=")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--merge", action="append", default=[])
    ap.add_argument("--token-type", action="append", default=[])
    ap.add_argument("--all-bytes", action="store_true")
    a = ap.parse_args()
    vocab = 264 if a.all_bytes else V

    k = a.arch + "."
    meta = [string("general.architecture", a.arch), u32(k + "block_count", L), u32(k + "context_length", 128),
            u32(k + "embedding_length", C), u32(k + "feed_forward_length", F),
            u32(k + "attention.head_count", H), u32(k + "attention.head_count_kv", KV),
            f32(k + "rope.freq_base", 10000.0), f32(k + "attention.layer_norm_rms_epsilon", 1e-5)]
    if not a.no_tokenizer:
        # control tokens first, then single characters (as GPT-2's byte map
        # spells them: "Ġ" is the space), then merged ones
        special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        chars = byte_chars() if a.all_bytes else list("abcdefghij0123456789") + ["\u0120"]
        tokens = special + chars
        merges = ["a b", "\u0120 a"] + a.merge
        tokens += ["ab", "\u0120a"] + ([] if a.all_bytes else ["n"])  # "n" is a byte's token already
        tokens = tokens[:vocab]
        types = [3] * len(special) + [1] * (len(tokens) - len(special))
        for t in a.token_type:
            i, v = t.split("=")
            types[int(i)] = int(v)
        meta += [string("tokenizer.ggml.model", a.model), string("tokenizer.ggml.pre", a.pre),
                 str_array("tokenizer.ggml.tokens", tokens), int_array("tokenizer.ggml.token_type", types),
                 str_array("tokenizer.ggml.merges", merges), u32("tokenizer.ggml.bos_token_id", 1),
                 u32("tokenizer.ggml.eos_token_id", 2), boolean("tokenizer.ggml.add_bos_token", a.add_bos),
                 string("tokenizer.chat_template", "{{ messages }}")]

    # each entry starts with its key, as s(key) wrote it
    key_of = lambda m: m[8:8 + struct.unpack("<Q", m[:8])[0]].decode()
    for key, spec in (x.split("=", 1) for x in a.set):
        meta = [m for m in meta if key_of(m) != key] + [typed(key, spec)]
    meta = [m for m in meta if key_of(m) not in a.drop]

    tensors = [("token_embd.weight", [C, vocab])]
    for i in range(L):
        tensors += [(f"blk.{i}.attn_norm.weight", [C]), (f"blk.{i}.attn_q.weight", [C, H * D]),
                    (f"blk.{i}.attn_k.weight", [C, KV * D]), (f"blk.{i}.attn_v.weight", [C, KV * D]),
                    (f"blk.{i}.attn_output.weight", [H * D, C]), (f"blk.{i}.ffn_norm.weight", [C]),
                    (f"blk.{i}.ffn_gate.weight", [C, F]), (f"blk.{i}.ffn_up.weight", [C, F]),
                    (f"blk.{i}.ffn_down.weight", [F, C])]
    tensors.append(("output_norm.weight", [C]))
    if a.untied:
        tensors.append(("output.weight", [C, vocab]))

    infos, blobs, off = b"", [], 0
    for name, ne in tensors:
        n = 1
        for d in ne:
            n *= d
        if name == a.q4k:
            ne = [256 * ((ne[0] + 255) // 256)] + ne[1:]  # Q4_K rows are whole 256-blocks
            n = 1
            for d in ne:
                n *= d
            ttype, data = 12, bytes(n // 256 * 144)
        else:
            ttype, data = 0, b"".join(struct.pack("<f", ((j % 97) - 48) * 1e-3) for j in range(n))
            first_name, first_value = a.first.split("=", 1)
            if name == first_name:
                data = struct.pack("<f", float(first_value)) + data[4:]
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", ttype, off)
        pad = (-len(data)) % ALIGN
        blobs.append(data + bytes(pad))
        off += len(data) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta) + infos
    head += bytes((-len(head)) % ALIGN)
    with open(a.out, "wb") as f:
        f.write(head + b"".join(blobs))


if __name__ == "__main__":
    main()
