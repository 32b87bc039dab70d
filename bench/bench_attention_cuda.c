/* The CUDA half of `kvcpt bench attention` (bench/bench_attention_device.h):
 * linked only in builds with the CUDA backend. */
#include "bench_cuda.h"

#include <stdio.h>
#include <stdlib.h>

#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/attention.h"
#include "../kernels/attention_cudnn.h"
#include "../kernels/attention_cuda_size.h"
#include "../kernels/attention_mma.h"
#include "../kernels/bf16.h"
#include "../kernels/cuda_device.h"

/* The kernel families timed, each with its forward and backward on device
 * buffers it allocates from the fp32 inputs (Bufs). */
typedef struct {
    float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv; /* fp32: [B, T, H*, D], lse [B, Hq, T] */
    bf16 *qb, *kb, *vb, *doutb, *outb;                 /* the same rounded to bf16 (the bf16 engine's activations) */
    int32_t *sel;
} Bufs;

static void fp32_forward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_forward_cuda(b->out, b->lse, b->q, b->k, b->v, b->sel, B, T, Hq, Hkv, D, m);
}
static void fp32_backward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_backward_cuda(b->dq, b->dk, b->dv, b->dout, b->q, b->k, b->v, b->out, b->lse, b->sel, B, T, Hq, Hkv, D,
                            m);
}
/* the tensor-core instantiation the bf16 engine runs (model/decoder_cuda.c,
 * attn mma): bf16 q, k, v, out and dout, fp32 lse and gradients */
static void mma_forward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_forward_mma_bf16_cuda(b->outb, b->lse, b->qb, b->kb, b->vb, b->sel, B, T, Hq, Hkv, D, m);
}
static void mma_backward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_backward_mma_bf16_cuda(b->dq, b->dk, b->dv, b->doutb, b->qb, b->kb, b->vb, b->outb, b->lse, b->sel, B, T,
                                     Hq, Hkv, D, m);
}
/* the bf16 engine's other choice (attn cuda-core): the fp32 engine's
 * kernels reading the same bf16 tensors */
static void core_forward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_forward_bf16_cuda(b->outb, b->lse, b->qb, b->kb, b->vb, b->sel, B, T, Hq, Hkv, D, m);
}
static void core_backward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_backward_bf16_cuda(b->dq, b->dk, b->dv, b->doutb, b->qb, b->kb, b->vb, b->outb, b->lse, b->sel, B, T, Hq,
                                 Hkv, D, m);
}
/* cuDNN's fused attention on the same bf16 tensors (kernels/attention_cudnn.h):
 * the peer the bf16 engine runs with attn cudnn */
static void cudnn_forward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_forward_cudnn_bf16_cuda(b->outb, b->lse, b->qb, b->kb, b->vb, b->sel, B, T, Hq, Hkv, D, m);
}
static void cudnn_backward(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    attention_backward_cudnn_bf16_cuda(b->dq, b->dk, b->dv, b->doutb, b->qb, b->kb, b->vb, b->outb, b->lse, b->sel, B,
                                       T, Hq, Hkv, D, m);
}
/* the backward variants by name (kernels/attention.h AttnBwdVariant), so a
 * GPU run times the one the engine does not run beside it */
static void bf16_backward_two_pass(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                   const RefreshMask *m) {
    attention_backward_mma_bf16_variant_cuda(b->dq, b->dk, b->dv, b->doutb, b->qb, b->kb, b->vb, b->outb, b->lse,
                                             b->sel, B, T, Hq, Hkv, D, m, ATTN_BWD_TWO_PASS);
}
static void bf16_backward_one_pass(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                   const RefreshMask *m) {
    attention_backward_mma_bf16_variant_cuda(b->dq, b->dk, b->dv, b->doutb, b->qb, b->kb, b->vb, b->outb, b->lse,
                                             b->sel, B, T, Hq, Hkv, D, m, ATTN_BWD_ONE_PASS);
}

typedef void (*AttnCall)(Bufs *b, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
typedef struct {
    const char *name; /* JSON key */
    const char *what; /* how it computes */
    int engine;       /* 1: the "bf16" row, the kernels of BenchAttn.attn; 0: run as they are */
    int variant; /* a tensor-core backward variant alone (no forward), skipped when it is the engine's; -1: none */
    int cudnn; /* 1: cuDNN's, timed where it runs and when it is not the engine's row */
    AttnCall forward, backward;
} AttnKernels;

/* the bf16 engine's attention, as KVCPT_ATTN or --attn chose it */
static const AttnKernels engine_mma = {
    "bf16",      "the bf16 engine's, attn mma: bf16 in, mma.sync on tensor cores, fp32 sums", 1, -1, 0, mma_forward,
    mma_backward};
static const AttnKernels engine_core = {
    "bf16", "the bf16 engine's, attn cuda-core: bf16 in, FMA on CUDA cores", 1, -1, 0, core_forward, core_backward};
static const AttnKernels engine_cudnn = {
    "bf16", "the bf16 engine's, attn cudnn: cuDNN's fused SDPA, bf16 in", 1, -1, 1, cudnn_forward, cudnn_backward};
static const AttnKernels kernel_families[] = {
    {"fp32", "the fp32 engine's: fp32 in, FMA on CUDA cores", 0, -1, 0, fp32_forward, fp32_backward},
    {"bf16", NULL, 1, -1, 0, NULL, NULL}, /* engine_mma, engine_core or engine_cudnn */
    {"bf16_two_pass", "the bf16 backward in two passes, 7 products per tile", 0, ATTN_BWD_TWO_PASS, 0, NULL,
     bf16_backward_two_pass},
    {"bf16_one_pass", "the bf16 backward in one pass, 5 products per tile, partial dQ", 0, ATTN_BWD_ONE_PASS, 0, NULL,
     bf16_backward_one_pass},
    {"cudnn", "cuDNN's fused SDPA (attn cudnn), bf16 in; the suffix rows over the gathered key list", 0, -1, 1,
     cudnn_forward, cudnn_backward},
};
#define N_FAMILIES (int)(sizeof kernel_families / sizeof kernel_families[0])

/* The mask the options describe (L = 0: causal). */
static RefreshMask bench_mask(const BenchAttn *a) {
    return (RefreshMask){.enabled = a->L > 0,
                         .L = a->L,
                         .K = a->K,
                         .pool_kernel = a->pool,
                         .agg = GROUP_AGG_MAX,
                         .evict = (int)a->evict,
                         .restride = a->restride};
}

/* (query, key) pairs the mask lets one (batch row, query head) visit: the
 * causal rows see 1..L keys, the suffix rows min(K, L) selected plus the
 * local ones. */
static double visited_pairs(const BenchAttn *a) {
    RefreshMask m = bench_mask(a);
    double pairs = 0;
    for (int64_t p = 0; p < a->seq; p++)
        pairs += (double)(refresh_active(&m, a->seq) ? refresh_row_count(&m, p) : p + 1);
    return pairs;
}

/* Forward FLOPs: Q K^T and P V, 2 D multiply-adds per visited pair. */
static double forward_flops(const BenchAttn *a, double pairs) {
    return 4.0 * (double)a->head_dim * (double)(a->batch * a->heads) * pairs;
}

/* n elements of size es, in bytes; dies on overflow. */
static size_t checked_bytes(size_t es, int64_t n) {
    KV_CHECK(n >= 0 && (uint64_t)n <= SIZE_MAX / es, "bench attention: %lld elements of %zu bytes overflow",
             (long long)n, es);
    return es * (size_t)n;
}

/* Device buffer of n standard normal floats. */
static float *normal_device(int64_t n, Rng *r) {
    const size_t bytes = checked_bytes(sizeof(float), n);
    float *h = xmalloc(bytes);
    for (int64_t i = 0; i < n; i++) h[i] = rng_normal(r);
    float *d = cuda_malloc(bytes);
    cuda_memcpy_h2d(d, h, bytes);
    free(h);
    return d;
}

/* A bf16 copy of the n device floats x (the bf16 engine's inputs). */
static bf16 *bf16_device(const float *x, int64_t n) {
    bf16 *d = cuda_malloc(checked_bytes(sizeof(bf16), n));
    cast_bf16_cuda(d, x, n);
    return d;
}

/* Mean milliseconds of `reps` calls after one warm-up call. */
#define TIME_MS(reps, ms, call)                                                                                        \
    do {                                                                                                               \
        call;                                                                                                          \
        cuda_synchronize();                                                                                            \
        double t0_ = now_seconds();                                                                                    \
        for (int64_t rep_ = 0; rep_ < (reps); rep_++) call;                                                            \
        cuda_synchronize();                                                                                            \
        (ms) = 1e3 * (now_seconds() - t0_) / (double)(reps);                                                           \
    } while (0)

static void bench_kernels(const BenchAttn *a, BenchAttnTimes *times) {
    const int64_t B = a->batch, T = a->seq, Hq = a->heads, Hkv = a->kv_heads, D = a->head_dim;
    RefreshMask m = bench_mask(a);
    refresh_mask_validate(&m, "bench attention");
    const int active = refresh_active(&m, T);
    const int64_t nq = B * T * Hq * D, nkv = B * T * Hkv * D;
    Rng r;
    rng_seed(&r, 1);
    KV_CHECK(a->attn == DECODER_ATTN_MMA || a->attn == DECODER_ATTN_CUDA_CORE || a->attn == DECODER_ATTN_CUDNN,
             "bench attention: attention unresolved");
    const int tc = a->attn == DECODER_ATTN_MMA;
    /* cuDNN's row runs where this build, the head dim, the mask and the
     * card's cuDNN allow it (its plans are built here, before any figure is
     * printed, so a refusal skips the row instead of stopping the bench) */
    const char *no_cudnn = attention_cudnn_probe(B, T, Hq, Hkv, D, &m);
    if (no_cudnn && a->attn == DECODER_ATTN_CUDNN) die("bench attention --attn cudnn: %s", no_cudnn);
    Bufs b = {0};
    b.q = normal_device(nq, &r), b.k = normal_device(nkv, &r), b.v = normal_device(nkv, &r);
    b.dout = normal_device(nq, &r);
    b.out = cuda_malloc(checked_bytes(sizeof(float), nq)),
    b.lse = cuda_malloc(checked_bytes(sizeof(float), B * Hq * T));
    b.dq = cuda_malloc(checked_bytes(sizeof(float), nq)), b.dk = cuda_malloc(checked_bytes(sizeof(float), nkv));
    b.dv = cuda_malloc(checked_bytes(sizeof(float), nkv));
    b.qb = bf16_device(b.q, nq), b.kb = bf16_device(b.k, nkv), b.vb = bf16_device(b.v, nkv);
    b.doutb = bf16_device(b.dout, nq), b.outb = cuda_malloc(checked_bytes(sizeof(bf16), nq));
    b.sel = active ? cuda_malloc(checked_bytes(sizeof(int32_t), B * Hkv * refresh_sel_len(&m, T))) : NULL;
    /* the selection the bf16 engine runs (either attention): on bf16 q and k */
    double select_ms = 0;
    if (active)
        TIME_MS(a->reps, select_ms, attention_refresh_select_bf16_cuda(b.sel, b.qb, b.kb, B, T, Hq, Hkv, D, &m));
    const double pairs = visited_pairs(a), ff = forward_flops(a, pairs);
    char dev[256];
    cuda_device_describe(dev, sizeof dev);
    if (a->json)
        printf(
            "{\"bench\":\"attention\",\"device\":\"%s\",\"batch\":%lld,\"seq\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
            "\"head_dim\":%lld,\"mask_L\":%lld,\"mask_K\":%lld,\"mask_evict\":%d,\"mask_restride\":%lld,"
            "\"reps\":%lld,\"forward_flops\":%.6e,\"select_ms\":%.4f,\"bf16_attn\":\"%s\"",
            dev, (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)D,
            (long long)(active ? a->L : 0), (long long)(active ? a->K : 0), active ? m.evict : 0,
            (long long)(active ? m.restride : 0), (long long)a->reps, ff, select_ms, decoder_attn_impl_name(a->attn));
    if (a->json && tc) printf(",\"bf16_attn_forward_rows\":%d", attention_mma_fwd_rows());
    else if (a->json) printf(",\"bf16_attn_forward_rows\":null");
    if (!a->json) {
        printf("bench attention: %s; B %lld, T %lld, %lld query heads over %lld KV heads, head dim %lld, %s\n", dev,
               (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)D,
               active ? "RefreshKV mask" : "causal");
        printf("  forward %.4g GFLOP, backward 2.5x (FlashAttention convention)%s", ff / 1e9, active ? "" : "\n");
        if (active)
            printf("; selection (L %lld, K %lld, evict %d, restride %lld) %.3f ms\n", (long long)a->L, (long long)a->K,
                   m.evict, (long long)m.restride, select_ms);
        if (tc)
            printf("  the bf16 row runs attn mma: forward %d-row query tiles (%d warps), backward %s\n",
                   attention_mma_fwd_rows(), attention_mma_fwd_rows() / 16,
                   attention_bwd_variant_name(attention_bwd_variant_default()));
        else printf("  the bf16 row runs attn cuda-core: the fp32 engine's kernels reading bf16\n");
    }
    for (int f = 0; f < N_FAMILIES; f++) {
        const AttnKernels *kf = kernel_families[f].engine ? (tc                              ? &engine_mma
                                                             : a->attn == DECODER_ATTN_CUDNN ? &engine_cudnn
                                                                                             : &engine_core)
                                                          : &kernel_families[f];
        if (kf->cudnn && !kf->engine) {
            if (a->attn == DECODER_ATTN_CUDNN) continue; /* the bf16 row is it */
            if (no_cudnn) {
                if (a->json) printf(",\"cudnn_skipped\":\"%s\"", no_cudnn);
                else printf("  %-6s skipped: %s\n", kf->name, no_cudnn);
                continue;
            }
        }
        if (kf->variant >= 0) {
            /* the tensor-core backward variants: with attn mma, the one the "bf16" row does not run */
            if (!tc || kf->variant == (int)attention_bwd_variant_default()) continue;
            double bwd_ms;
            TIME_MS(a->reps, bwd_ms, kf->backward(&b, B, T, Hq, Hkv, D, &m));
            const double bt = 2.5 * ff / bwd_ms / 1e9;
            if (a->json) printf(",\"%s_backward_ms\":%.4f,\"%s_backward_tflops\":%.2f", kf->name, bwd_ms, kf->name, bt);
            else printf("  %-6s (%s): backward %.3f ms (%.1f TFLOP/s)\n", kf->name, kf->what, bwd_ms, bt);
            continue;
        }
        double fwd_ms, bwd_ms;
        TIME_MS(a->reps, fwd_ms, kf->forward(&b, B, T, Hq, Hkv, D, &m));
        TIME_MS(a->reps, bwd_ms, kf->backward(&b, B, T, Hq, Hkv, D, &m));
        const double ft = ff / fwd_ms / 1e9, bt = 2.5 * ff / bwd_ms / 1e9;
        if (kf->engine) {
            times->engine_forward_tflops = ft;
            times->engine_backward_tflops = bt;
        }
        if (a->json)
            printf(",\"%s_forward_ms\":%.4f,\"%s_backward_ms\":%.4f,\"%s_forward_tflops\":%.2f,\"%s_backward_tflops\":%"
                   ".2f",
                   kf->name, fwd_ms, kf->name, bwd_ms, kf->name, ft, kf->name, bt);
        else if (kf->engine && tc)
            printf("  %-6s (%s): forward %.3f ms (%.1f TFLOP/s), backward (%s) %.3f ms (%.1f TFLOP/s)\n", kf->name,
                   kf->what, fwd_ms, ft, attention_bwd_variant_name(attention_bwd_variant_default()), bwd_ms, bt);
        else
            printf("  %-6s (%s): forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n", kf->name, kf->what,
                   fwd_ms, ft, bwd_ms, bt);
    }
    void *bufs[] = {b.q, b.k, b.v, b.dout, b.out, b.lse, b.dq, b.dk, b.dv, b.qb, b.kb, b.vb, b.doutb, b.outb, b.sel};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) cuda_free(bufs[i]);
    attention_cudnn_release();
}

const BenchAttentionDevice bench_attention_cuda = {bench_kernels};
