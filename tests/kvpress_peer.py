#!/usr/bin/env python3
"""NVIDIA kvpress (with transformers) as the peer of `kvcpt eval`.

Two modes:

  --check --kvcpt ./kvcpt --workdir DIR
      builds a tiny random Llama (GQA 4/2, 2 layers, fp32, eager attention),
      saves it with save_pretrained, converts it with `kvcpt convert`, makes
      documents with `kvcpt prepare --synthetic copy`, and compares, for every
      policy both implement, the keys kept after the prefill (per layer and KV
      head, exact set equality) and the S per-token NLLs
      (|d| <= 1e-4 + 1e-4 |ref|) of `kvcpt eval --dump` (under the flags that
      reproduce kvpress's choices, KVPRESS_FLAGS) with kvpress's.
      Prints ok/FAIL lines; exits 1 on a failure.
      With --model HF_DIR --data DIR, the same comparison runs on that model
      (a real pretrained one, or another family's: kvcpt reads the HF
      directory itself, transformers loads it as the class its config.json
      names) and the documents of the prepared split instead of the random
      model and the synthetic copy task.

  --bench --model HF_DIR --data DIR --context L --last S --budget K ...
      runs kvpress alone over the documents `kvcpt eval` would score, then
      one transformers forward (sdpa, no cache, last logits) of each
      document's L tokens, and prints one JSON line: {"seconds": kvpress's
      compute time, "forward_seconds": the forwards', "forward_cpu_seconds":
      their CPU time over all threads, "load_seconds": ...}
      (what `kvcpt bench eval --peer kvpress` reads).

Policy pairs (docs/eval.md, "kvpress as the peer"):
  full       no press
  streaming  StreamingLLMPress(n_sink = --sinks)
  snapkv     SnapKVPress(window_size = --snapkv-window, kernel_size = --snapkv-kernel)
  tova       TOVAPress
  h2o        ObservedAttentionPress
compression_ratio = 1 - (K + 0.5) / L, so that kvpress keeps exactly K keys.
Check mode also compares streaming and tova step by step: kvcpt without
--compress-once against kvpress's PrefillDecodingPress with a
DecodingPress(compression_interval=1, target_size=K) of the same press, its
kept rows put back in cache order after each compression (patch_compress).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

POLICIES = ["full", "streaming", "snapkv", "tova", "h2o"]


def kvpress_flags(window, kernel):
    """The kvcpt eval options that reproduce kvpress's choices (one per
    difference, plus the defaults kvpress relies on, spelled out)."""
    return ["--compress-once", "--agg", "mean", "--pool", "avg", "--snapkv-kernel", str(kernel),
            "--snapkv-window", str(window), "--snapkv-keep-window", "on", "--tova-keep-last", "--tova-window", "1",
            "--head-sets", "shared", "--h2o-recent", "0", "--h2o-score", "mean"]


def default_flags(window, kernel):
    """Only the options that still differ from kvpress for snapkv and tova
    with kvcpt's defaults (which keep SnapKV's window and rank TOVA's one
    set per layer by the head mean of the last query, as the references do):
    kvpress's zero-padded avg pooling, group mean, window and kernel; its
    compression once; TOVAPress never evicting the last position."""
    return ["--compress-once", "--agg", "mean", "--pool", "avg", "--snapkv-kernel", str(kernel),
            "--snapkv-window", str(window), "--tova-keep-last"]


def read_docs(data_dir, split):
    """Every document of a prepared split, as int64 arrays (data/shard.h)."""
    man = json.load(open(os.path.join(data_dir, "manifest.json")))
    docs = []
    for sh in man["splits"][split]["shards"]:
        raw = open(os.path.join(data_dir, sh["file"]), "rb").read()
        n_docs, n_tok, index_off = np.frombuffer(raw, dtype="<u8", count=3, offset=16)
        tok = np.frombuffer(raw, dtype="<u4", count=int(n_tok), offset=64)
        off = np.frombuffer(raw, dtype="<u8", count=int(n_docs) + 1, offset=int(index_off))
        docs += [tok[off[i]:off[i + 1]].astype(np.int64) for i in range(int(n_docs))]
    return docs


def make_press(policy, L, K, a, per_step=False):
    import kvpress
    if policy == "full":
        return None
    ratio = 1.0 - (K + 0.5) / L  # compute_n_kept(L, ratio) = int(K + 0.5) = K
    make = {
        "streaming": lambda r: kvpress.StreamingLLMPress(compression_ratio=r, n_sink=a.sinks),
        "snapkv": lambda r: kvpress.SnapKVPress(compression_ratio=r, window_size=a.snapkv_window,
                                                kernel_size=a.snapkv_kernel),
        "tova": lambda r: kvpress.TOVAPress(compression_ratio=r),
        "h2o": lambda r: kvpress.ObservedAttentionPress(compression_ratio=r),
    }[policy]
    if not per_step:
        return make(ratio)
    return kvpress.PrefillDecodingPress(prefilling_press=make(ratio), decoding_press=kvpress.DecodingPress(
        base_press=make(0.0), compression_interval=1, target_size=K, hidden_states_buffer_size=0))


def positions_of(kept_keys, keys):
    """The prefill-cache row of each kept key, (Hkv, kept): RoPE makes every
    position's key distinct, so each kept row matches exactly one."""
    eq = (kept_keys[0][:, :, None, :] == keys[0][:, None, :, :]).all(-1)  # (Hkv, kept, n)
    assert bool((eq.sum(-1) == 1).all()), "a kept key matches no cached key, or several"
    return eq.int().argmax(-1)


def patch_compress(inner, kept, in_order):
    """Records, per layer, the positions the first compression kept (the
    prefill's). With in_order, the kept rows are put back in cache order:
    kvpress gathers them in topk order, which breaks presses that score by
    cache slot (StreamingLLMPress) when they compress again while decoding."""
    orig = inner.compress

    def compress(module, hidden_states, keys, values, attentions, kwargs):
        k2, v2 = orig(module, hidden_states, keys, values, attentions, kwargs)
        if k2.shape[2] == keys.shape[2]:
            return k2, v2
        pos = positions_of(k2, keys)
        if kept is not None and module.layer_idx not in kept:
            kept[module.layer_idx] = [sorted(r.tolist()) for r in pos]
        if in_order:
            idx = pos.sort(-1).values[None, :, :, None].expand(-1, -1, -1, keys.shape[-1])
            k2, v2 = keys.gather(2, idx).contiguous(), values.gather(2, idx).contiguous()
        return k2, v2

    inner.compress = compress


def kvpress_doc(model, tok, L, S, K, policy, a, per_step=False, head_rows=None):
    """kvpress's kept keys after the prefill ([layer][kv head] -> positions) and
    the S NLLs. head_rows=1: the prefill computes only its last position's
    logits, as kvpress's own pipeline does (the bench); None: every row."""
    import contextlib
    import torch
    from transformers import DynamicCache
    ids = torch.tensor(tok[:L + S], dtype=torch.long)[None]
    press = make_press(policy, L, K, a, per_step)
    kept = {}
    if press is not None and per_step:
        patch_compress(press.prefilling_press, kept, True)
        patch_compress(press.decoding_press.base_press, None, True)
    elif press is not None:
        patch_compress(press, kept, False)
    cache = DynamicCache()
    with torch.no_grad(), (press(model) if press is not None else contextlib.nullcontext()):
        extra = {} if head_rows is None else {"logits_to_keep": head_rows}
        logits = [model(ids[:, :L], past_key_values=cache, use_cache=True, **extra).logits[0, -1:]]
        if per_step:  # one token at a time: the decoding press compresses after each
            for i in range(S - 1):
                pos = torch.tensor([[L + i]])
                logits.append(model(ids[:, L + i:L + i + 1], past_key_values=cache, position_ids=pos).logits[0])
    if not per_step and S > 1:  # outside the press: the cache only grows
        with torch.no_grad():
            pos = torch.arange(L, L + S - 1)[None]
            logits.append(model(ids[:, L:L + S - 1], past_key_values=cache, position_ids=pos).logits[0])
    lp = torch.cat(logits).double().log_softmax(-1)
    nll = (-lp[torch.arange(S), ids[0, L:L + S]]).tolist()
    n_layers, hkv = model.config.num_hidden_layers, model.config.num_key_value_heads
    keys = [kept.get(l, [list(range(L))] * hkv) for l in range(n_layers)]
    return keys, nll


def load_hf(model_dir, attn="eager"):
    """The directory as the class its config.json names (LlamaForCausalLM,
    MistralForCausalLM, ...): the peer runs the family kvcpt reads."""
    import torch
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=attn).eval()


def eligible(docs, L, S, max_docs):
    out = [(i, d) for i, d in enumerate(docs) if len(d) >= L + S + 1]
    return out[:max_docs] if max_docs > 0 else out


# ---------------------------------------------------------------- bench mode

def bench(a):
    import torch
    torch.set_num_threads(a.threads)
    # Each press runs on the attention a kvpress user would pick for it:
    # ObservedAttentionPress (H2O) reads the attention weights and so needs
    # eager attention; streaming, SnapKV and TOVA compute what they need
    # themselves and run on sdpa, whose prefill does not build L x L weights.
    t0 = time.perf_counter()
    models = {"eager": load_hf(a.model),
              "sdpa": load_hf(a.model, "sdpa")}
    load = time.perf_counter() - t0
    docs = eligible(read_docs(a.data, a.split), a.context, a.last, a.max_docs)
    t0 = time.perf_counter()
    per_policy = {}
    # --policies none: only the forward below (the yardstick alone)
    for policy in [p for p in a.policies.split(",") if p and p != "none"]:
        t1 = time.perf_counter()
        for _, d in docs:
            kvpress_doc(models["eager" if policy == "h2o" else "sdpa"], d, a.context, a.last, a.budget, policy, a,
                        head_rows=1)
        per_policy[policy] = time.perf_counter() - t1
    seconds = time.perf_counter() - t0
    sdpa = models["sdpa"]
    del models
    # the yardstick: one plain transformers forward (sdpa attention, no
    # cache, logits of the last position only, as a prefill needs) of the L
    # tokens of each document
    with torch.no_grad():  # torch's one-off first-call costs stay out of the timed forwards
        sdpa(torch.tensor(docs[0][1][:16], dtype=torch.long)[None], use_cache=False, logits_to_keep=1)
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for _, d in docs:
            sdpa(torch.tensor(d[:a.context], dtype=torch.long)[None], use_cache=False, logits_to_keep=1)
    forward, forward_cpu = time.perf_counter() - t0, time.process_time() - c0
    # forward_cpu_seconds: the forward's CPU time over all its threads (on a
    # shared machine, what the wall time would be without the others' load)
    print(json.dumps({"seconds": seconds, "load_seconds": load, "forward_seconds": forward,
                      "forward_cpu_seconds": forward_cpu, "policy_seconds": per_policy,
                      "documents": len(docs),
                      "threads": torch.get_num_threads()}))
    return 0


# ---------------------------------------------------------------- check mode

FAILED = []


def check(ok, name, why=""):
    print(("ok - %s" % name) if ok else ("FAIL - %s: %s" % (name, why)), flush=True)
    if not ok:
        FAILED.append(name)


def build_model(hf_dir):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                      rope_theta=10000.0, initializer_range=0.2, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg).float().eval()
    model.save_pretrained(hf_dir, safe_serialization=True)
    return load_hf(hf_dir)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(" ".join(cmd) + "\n" + r.stdout + r.stderr, file=sys.stderr)
    return r.returncode == 0


def kvcpt_dump(a, nat, data, extra, name):
    """kvcpt eval --dump: {(policy, doc): (keys, nll)}."""
    dump = os.path.join(a.workdir, name + ".jsonl")
    cmd = [a.kvcpt, "eval", "--model", nat, "--data", data, "--split", a.split, "--context", str(a.context), "--last", str(a.last),
           "--budget", str(a.budget), "--policies", ",".join(POLICIES), "--max-docs", str(a.max_docs),
           "--device", "cpu", "--bootstrap", "10", "--sinks", str(a.sinks), "--out", os.path.join(a.workdir, name),
           "--dump", dump] + extra
    if not run(cmd):
        return None
    out = {}
    for line in open(dump):
        r = json.loads(line)
        out[(r["policy"], r["doc"])] = (r["keys"], r["nll"])
    return out


def compare(ours, docs, ref, label, a, policies, sets=True):
    tol = lambda x, y: abs(x - y) <= 1e-4 + 1e-4 * abs(y)
    for policy in policies:
        bad_sets, bad_nll, worst = [], [], 0.0
        for i, _ in docs:
            keys, nll = ours[(policy, i)]
            rkeys, rnll = ref[(policy, i)]
            for l, (hs, rhs) in enumerate(zip(keys, rkeys)):
                for g, (h, rh) in enumerate(zip(hs, rhs)):
                    if h != rh:
                        bad_sets.append("doc %d layer %d head %d: kvcpt only %s, kvpress only %s" % (
                            i, l, g, sorted(set(h) - set(rh)), sorted(set(rh) - set(h))))
            for t, (x, y) in enumerate(zip(nll, rnll)):
                worst = max(worst, abs(x - y))
                if not tol(x, y):
                    bad_nll.append("doc %d token %d: %.7f vs %.7f" % (i, t, x, y))
        n_sets = len(docs) * len(keys) * len(keys[0])
        if sets:
            check(not bad_sets, "%s %s: kept keys after prefill equal kvpress's (%d layer/head sets)" % (
                label, policy, n_sets), "; ".join(bad_sets[:3]))
        check(not bad_nll and len(nll) == a.last, "%s %s: %d NLLs per document match kvpress (worst |d| %.2e)" % (
            label, policy, a.last, worst), "; ".join(bad_nll[:3]))


def check_mode(a):
    import torch
    torch.set_num_threads(a.threads)
    os.makedirs(a.workdir, exist_ok=True)
    if a.model:  # a given model and prepared data: kvcpt eval reads the HF directory as it is
        nat, data = a.model, a.data
        model = load_hf(a.model)
        with open(os.path.join(a.model, "config.json")) as f:
            want = json.load(f).get("architectures", ["LlamaForCausalLM"])[0]
        check(type(model).__name__ == want, "transformers runs the model as the class its config.json names (%s)" % want,
              "loaded as %s" % type(model).__name__)
    else:
        hf, nat, data = (os.path.join(a.workdir, s) for s in ("hf", "native", "data"))
        model = build_model(hf)
        check(run([a.kvcpt, "convert", "--from", hf, "--to", nat]), "kvcpt converts the transformers checkpoint")
        check(run([a.kvcpt, "prepare", "--synthetic", "copy", "--vocab", "128", "--doc-tokens",
                   str(a.context + a.last + 1), "--docs", "60", "--out", data]), "kvcpt prepare makes the documents")
    if FAILED:
        return 1
    docs = eligible(read_docs(data, a.split), a.context, a.last, a.max_docs)
    check(len(docs) >= 2, "%d documents of %d tokens" % (len(docs), a.context + a.last + 1), "too few")
    ref = {(p, i): kvpress_doc(model, d, a.context, a.last, a.budget, p, a) for p in POLICIES for i, d in docs}
    ours = kvcpt_dump(a, nat, data, kvpress_flags(a.snapkv_window, a.snapkv_kernel), "compat")
    check(ours is not None, "kvcpt eval --dump with the kvpress flags runs")
    if ours is not None:
        compare(ours, docs, ref, "prefill-only", a, POLICIES)
    # the NLL comparison has teeth only if dropping keys moves the NLLs
    moved = {p: max(abs(x - y) for i, _ in docs for x, y in zip(ref[(p, i)][1], ref[("full", i)][1]))
             for p in POLICIES[1:]}
    check(min(moved.values()) > 1e-3, "every press moves the NLLs away from full attention (least: %.3g)" % min(
        moved.values()), str(moved))
    # kvcpt's defaults for snapkv (window kept) and tova (one set per layer, head mean, prompt reduced once)
    # are the references': only the options that remain different are given
    ours = kvcpt_dump(a, nat, data, default_flags(a.snapkv_window, a.snapkv_kernel), "defaults")
    check(ours is not None, "kvcpt eval --dump with the snapkv/tova defaults runs")
    if ours is not None:
        compare(ours, docs, ref, "defaults", a, ["snapkv", "tova"])
    # with no flags at all, snapkv (pooling, window) and h2o keep other sets: the flags are what makes them agree
    dflt = kvcpt_dump(a, nat, data, [], "default")
    if dflt is not None:
        differ = [p for p in ("snapkv", "h2o")
                  if any(dflt[(p, i)][0] != ref[(p, i)][0] for i, _ in docs)]
        check(differ == ["snapkv", "h2o"], "without the flags kvcpt's snapkv and h2o keep other sets "
              "than kvpress (deliberate differences)", "only %s differ" % differ)
    # step by step: kvcpt's per-step eviction against kvpress's decoding press
    step = {(p, i): kvpress_doc(model, d, a.context, a.last, a.budget, p, a, per_step=True)
            for p in ("streaming", "tova") for i, d in docs}
    flags = [f for f in kvpress_flags(a.snapkv_window, a.snapkv_kernel) if f != "--compress-once"]
    ours = kvcpt_dump(a, nat, data, flags, "per_step")
    if ours is not None:
        compare(ours, docs, step, "per-step", a, ["streaming", "tova"])
    return 1 if FAILED else 0


def main():
    from transformers.utils import logging
    logging.disable_progress_bar()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--kvcpt", default="./kvcpt")
    ap.add_argument("--workdir", default="/tmp/kvcpt_kvpress")
    ap.add_argument("--model", help="the HF model directory (check: instead of a random model)")
    ap.add_argument("--data", help="the prepared data directory (check: with --model)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--last", type=int, default=8)
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--policies", default=",".join(POLICIES[1:]))
    ap.add_argument("--max-docs", type=int, default=4)
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--snapkv-window", type=int, default=4)
    ap.add_argument("--snapkv-kernel", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.bench:
        return bench(a)
    return check_mode(a)


if __name__ == "__main__":
    sys.exit(main())
