#ifndef KVCPT_BENCH_ATTENTION_DEVICE_H
#define KVCPT_BENCH_ATTENTION_DEVICE_H
/* The device half of `kvcpt bench attention` (bench/bench_attention.c):
 * the timed kernels, an accelerator backend's bench hook
 * (bench/bench_backend.h); the CUDA backend's is bench/bench_attention_cuda.c. */
#include <stdint.h>

#include "../model/attn_impl.h"

/* One layer's attention shape, the mask and what to run. */
typedef struct {
    int64_t batch, seq, heads, kv_heads, head_dim; /* B, T, Hq, Hkv, D */
    int64_t L, K, pool, evict, restride;           /* the RefreshKV mask; L = 0: causal */
    int64_t reps;                                  /* timed calls per kernel, after one warm-up */
    int json, no_peers;
    DecoderAttnImpl attn; /* the bf16 engine's attention kernels, resolved: mma, cuda-core or cudnn */
    const char *python; /* the PyTorch peer's interpreter */
} BenchAttn;

/* What the kernels reached, for the comparison with the peer. */
typedef struct {
    double engine_forward_tflops, engine_backward_tflops; /* the bf16 engine's kernels (BenchAttn.attn) */
} BenchAttnTimes;

typedef struct {
    /* Times the selection and every kernel family's forward and backward on
     * the visible device; prints the figures (the JSON object left open for
     * the peer's fields) and fills *times. */
    void (*kernels)(const BenchAttn *a, BenchAttnTimes *times);
} BenchAttentionDevice;

#endif
