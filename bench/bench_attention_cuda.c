/* The CUDA half of `kvcpt bench attention` (bench/bench_attention_cuda.h):
 * linked only in builds with the CUDA backend. */
#include "bench_attention_cuda.h"

#include <stdio.h>
#include <stdlib.h>

#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/attention.h"
#include "../kernels/attention_mma.h"
#include "../kernels/cuda_device.h"

typedef void (*AttnForward)(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                            int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);
typedef void (*AttnBackward)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                             int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m);

/* The kernel families timed, each with its forward and backward. */
typedef struct {
    const char *name; /* JSON key */
    const char *what; /* how it computes */
    AttnForward forward;
    AttnBackward backward;
} AttnKernels;

static const AttnKernels kernel_families[] = {
    {"fp32", "fp32 FMA on CUDA cores", attention_forward_cuda, attention_backward_cuda},
    {"mma", "bf16 mma.sync on tensor cores, fp32 sums", attention_forward_mma_cuda, attention_backward_mma_cuda},
};
#define N_FAMILIES (int)(sizeof kernel_families / sizeof kernel_families[0])

/* The mask the options describe (L = 0: causal). */
static RefreshMask bench_mask(const BenchAttn *a) {
    return (RefreshMask){.enabled = a->L > 0, .L = a->L, .K = a->K, .pool_kernel = a->pool, .agg = GROUP_AGG_MAX,
                         .evict = (int)a->evict, .restride = a->restride};
}

/* (query, key) pairs the mask lets one (batch row, query head) visit: the
 * causal rows see 1..L keys, the suffix rows min(K, L) selected plus the
 * local ones. */
static double visited_pairs(const BenchAttn *a) {
    RefreshMask m = bench_mask(a);
    double pairs = 0;
    for (int64_t p = 0; p < a->seq; p++) pairs += (double)(refresh_active(&m, a->seq) ? refresh_row_count(&m, p) : p + 1);
    return pairs;
}

/* Forward FLOPs: Q K^T and P V, 2 D multiply-adds per visited pair. */
static double forward_flops(const BenchAttn *a, double pairs) {
    return 4.0 * (double)a->head_dim * (double)(a->batch * a->heads) * pairs;
}

/* Device buffer of n standard normal floats. */
static float *normal_device(int64_t n, Rng *r) {
    float *h = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = rng_normal(r);
    float *d = cuda_malloc(sizeof(float) * (size_t)n);
    cuda_memcpy_h2d(d, h, sizeof(float) * (size_t)n);
    free(h);
    return d;
}

/* Mean milliseconds of `reps` calls after one warm-up call. */
#define TIME_MS(reps, ms, call)                                                                                     \
    do {                                                                                                            \
        call;                                                                                                       \
        cuda_synchronize();                                                                                         \
        double t0_ = now_seconds();                                                                                 \
        for (int64_t rep_ = 0; rep_ < (reps); rep_++) call;                                                         \
        cuda_synchronize();                                                                                         \
        (ms) = 1e3 * (now_seconds() - t0_) / (double)(reps);                                                        \
    } while (0)

static void bench_kernels(const BenchAttn *a) {
    const int64_t B = a->batch, T = a->seq, Hq = a->heads, Hkv = a->kv_heads, D = a->head_dim;
    RefreshMask m = bench_mask(a);
    refresh_mask_validate(&m, "bench attention");
    const int active = refresh_active(&m, T);
    const int64_t nq = B * T * Hq * D, nkv = B * T * Hkv * D;
    Rng r;
    rng_seed(&r, 1);
    float *q = normal_device(nq, &r), *k = normal_device(nkv, &r), *v = normal_device(nkv, &r);
    float *dout = normal_device(nq, &r);
    float *out = cuda_malloc(sizeof(float) * (size_t)nq), *lse = cuda_malloc(sizeof(float) * (size_t)(B * Hq * T));
    float *dq = cuda_malloc(sizeof(float) * (size_t)nq), *dk = cuda_malloc(sizeof(float) * (size_t)nkv);
    float *dv = cuda_malloc(sizeof(float) * (size_t)nkv);
    int32_t *sel = active ? cuda_malloc(sizeof(int32_t) * (size_t)(B * Hkv * refresh_sel_len(&m, T))) : NULL;
    double select_ms = 0;
    if (active) TIME_MS(a->reps, select_ms, attention_refresh_select_cuda(sel, q, k, B, T, Hq, Hkv, D, &m));
    const double pairs = visited_pairs(a), ff = forward_flops(a, pairs);
    char dev[256];
    cuda_device_describe(dev, sizeof dev);
    if (a->json)
        printf("{\"bench\":\"attention\",\"device\":\"%s\",\"batch\":%lld,\"seq\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
               "\"head_dim\":%lld,\"mask_L\":%lld,\"mask_K\":%lld,\"mask_evict\":%d,\"mask_restride\":%lld,"
               "\"reps\":%lld,\"forward_flops\":%.6e,\"select_ms\":%.4f",
               dev, (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)D,
               (long long)(active ? a->L : 0), (long long)(active ? a->K : 0), active ? m.evict : 0,
               (long long)(active ? m.restride : 0), (long long)a->reps, ff, select_ms);
    else {
        printf("bench attention: %s; B %lld, T %lld, %lld query heads over %lld KV heads, head dim %lld, %s\n", dev,
               (long long)B, (long long)T, (long long)Hq, (long long)Hkv, (long long)D,
               active ? "RefreshKV mask" : "causal");
        printf("  forward %.4g GFLOP, backward 2.5x (FlashAttention convention)%s", ff / 1e9, active ? "" : "\n");
        if (active)
            printf("; selection (L %lld, K %lld, evict %d, restride %lld) %.3f ms\n", (long long)a->L, (long long)a->K,
                   m.evict, (long long)m.restride, select_ms);
    }
    for (int f = 0; f < N_FAMILIES; f++) {
        const AttnKernels *kf = &kernel_families[f];
        if (kf->forward == attention_forward_mma_cuda && !attention_tensor_core_head_dim(D)) continue;
        double fwd_ms, bwd_ms;
        TIME_MS(a->reps, fwd_ms, kf->forward(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, &m));
        TIME_MS(a->reps, bwd_ms, kf->backward(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, &m));
        const double ft = ff / fwd_ms / 1e9, bt = 2.5 * ff / bwd_ms / 1e9;
        if (a->json)
            printf(",\"%s_forward_ms\":%.4f,\"%s_backward_ms\":%.4f,\"%s_forward_tflops\":%.2f,\"%s_backward_tflops\":%.2f",
                   kf->name, fwd_ms, kf->name, bwd_ms, kf->name, ft, kf->name, bt);
        else
            printf("  %-6s (%s): forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n", kf->name, kf->what,
                   fwd_ms, ft, bwd_ms, bt);
    }
    float *bufs[] = {q, k, v, dout, out, lse, dq, dk, dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cuda_free(bufs[i]);
    if (sel) cuda_free(sel);
}

static const BenchAttentionCuda table = {bench_kernels};

const BenchAttentionCuda *bench_attention_cuda(void) { return &table; }
