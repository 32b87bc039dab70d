#!/usr/bin/env python3
"""Slot use of the causal tensor-core attention grids on an H100, by
arithmetic: each block's work is its number of 64 x 64 tile products
(query tile i of the forward and dQ: i + 1 key tiles; key tile j of dK/dV:
the query tiles from j on, times the GQA group), blocks start in launch
order (x fastest, then y) on the first free slot (132 SMs x blocks per SM),
and slot use = total work / (slots x the time the last slot ends). No
memory or latency model: a block's time is proportional to its products.

    python3 scripts/attention_tail.py [--T 8192] [--heads 32] [--kv-heads 8]

prints, per kernel, the slot use in the grid order before and after the
heaviest-first order (kernels/attention_mma_{fwd,bwd}.cu) at 2 and 3
blocks per SM."""
import argparse
import heapq


def makespan(costs, slots):
    free = [0.0] * slots
    heapq.heapify(free)
    end = 0.0
    for c in costs:
        t = heapq.heappop(free) + c
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def use(costs, slots):
    return sum(costs) / (slots * makespan(costs, slots))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=8192, help="causal rows (L)")
    ap.add_argument("--heads", type=int, default=32, help="B x Hq")
    ap.add_argument("--kv-heads", type=int, default=8, help="B x Hkv")
    ap.add_argument("--sms", type=int, default=132)
    a = ap.parse_args()
    n = (a.T + 63) // 64
    group = a.heads // a.kv_heads
    # before: x = tile ascending (lightest query tile first), y = head
    fwd_before = [i + 1 for h in range(a.heads) for i in range(n)]
    fwd_after = [i + 1 for i in reversed(range(n)) for h in range(a.heads)]
    kv_before = [group * (n - j) for h in range(a.kv_heads) for j in range(n)]
    kv_after = [group * (n - j) for j in range(n) for h in range(a.kv_heads)]
    print(f"T={a.T} heads={a.heads} kv_heads={a.kv_heads}: {n} tiles per head, {a.sms} SMs")
    print("kernel          blocks/SM  slot use before  after (heaviest first)")
    for name, before, after in (("forward, dQ", fwd_before, fwd_after), ("dK/dV", kv_before, kv_after)):
        for per_sm in (2, 3):
            s = a.sms * per_sm
            print(f"{name:15s} {per_sm:9d}  {use(before, s):15.3f}  {use(after, s):.3f}")


if __name__ == "__main__":
    main()
