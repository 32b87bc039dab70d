/* The CUDA half of `kvcpt bench ops` (bench/bench_ops_device.h): linked only
 * in builds with the CUDA backend. */
#include "bench_cuda.h"

#include <stdio.h>
#include <stdlib.h>

#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/crossentropy.h"
#include "../kernels/cuda_device.h"
#include "../kernels/embedding.h"
#include "../kernels/matmul.h"
#include "../kernels/rmsnorm.h"
#include "../kernels/swiglu.h"

typedef struct {
    int64_t tokens, hidden, ffn, vocab, ce_rows, reps;
    int json, printed; /* printed: ops reported so far (the JSON's commas) */
} BenchOps;

/* Device buffer of n floats, uniform in [-1, 1] (or n bf16 when bf16 is set). */
static void *random_device(int64_t n, int bf16, Rng *r) {
    size_t elem = bf16 ? 2 : 4;
    void *h = xmalloc(elem * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float v = 2.0f * rng_uniform(r) - 1.0f;
        if (bf16) ((uint16_t *)h)[i] = bf16_bits_from_float(v);
        else ((float *)h)[i] = v;
    }
    void *d = cuda_malloc(elem * (size_t)n);
    cuda_memcpy_h2d(d, h, elem * (size_t)n);
    free(h);
    return d;
}

/* bytes > 0: report GB/s; flops > 0: report TFLOP/s. */
static void report(BenchOps *b, const char *name, double seconds, double bytes, double flops) {
    double ms = 1e3 * seconds / (double)b->reps;
    double rate = flops > 0 ? flops * b->reps / seconds / 1e12 : bytes * b->reps / seconds / 1e9;
    const char *unit = flops > 0 ? "TFLOP/s" : "GB/s";
    if (b->json) printf("%s\"%s\": {\"ms\": %.4f, \"%s\": %.1f}", b->printed++ ? ", " : "", name, ms, unit, rate);
    else printf("%-28s %9.4f ms  %8.1f %s\n", name, ms, rate, unit);
}

#define TIME_OP(b, name, bytes, flops, call)                                                                           \
    do {                                                                                                               \
        call;                                                                                                          \
        cuda_synchronize();                                                                                            \
        double t0_ = now_seconds();                                                                                    \
        for (int64_t rep_ = 0; rep_ < (b)->reps; rep_++) call;                                                         \
        cuda_synchronize();                                                                                            \
        report(b, name, now_seconds() - t0_, bytes, flops);                                                            \
    } while (0)

static void bench_all(BenchOps *b) {
    Rng r;
    rng_seed(&r, 1);
    const int64_t N = b->tokens, C = b->hidden, F = b->ffn, V = b->vocab, R = b->ce_rows;
    const double f4 = 4.0, NC = (double)N * C, NF = (double)N * F, RV = (double)R * V;

    float *x = random_device(N * C, 0, &r), *y = random_device(N * C, 0, &r), *w = random_device(C, 0, &r);
    float *rstd = cuda_malloc(sizeof(float) * (size_t)N), *dx = random_device(N * C, 0, &r);
    float *dw = random_device(C, 0, &r);
    TIME_OP(b, "rmsnorm_fwd", 2 * NC * f4, 0, rmsnorm_forward_cuda(y, rstd, x, w, N, C, 1e-5f));
    TIME_OP(b, "rmsnorm_bwd", 4 * NC * f4, 0, rmsnorm_backward_cuda(dx, dw, y, x, w, rstd, N, C));

    int32_t *tok_h = xmalloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) tok_h[i] = (int32_t)(rng_u64(&r) % (uint64_t)V);
    int32_t *tok = cuda_malloc(sizeof(int32_t) * (size_t)N);
    cuda_memcpy_h2d(tok, tok_h, sizeof(int32_t) * (size_t)N);
    float *wte = random_device(V * C, 0, &r);
    TIME_OP(b, "embedding_fwd", 2 * NC * f4, 0, embedding_forward_cuda(y, tok, wte, N, C));
    TIME_OP(b, "embedding_bwd", 3 * NC * f4, 0, embedding_backward_cuda(wte, y, tok, N, C));
    cuda_free(wte), cuda_free(x), cuda_free(y), cuda_free(w), cuda_free(rstd), cuda_free(dx), cuda_free(dw);

    /* the MLP's layout: rows [gate | up] in, h out */
    float *gu = random_device(2 * N * F, 0, &r), *h = random_device(N * F, 0, &r);
    TIME_OP(b, "swiglu_fwd", 3 * NF * f4, 0, swiglu_fused_forward_cuda(h, gu, N, F));
    cuda_free(gu), cuda_free(h);
    void *gub = random_device(2 * N * F, 1, &r), *hb = random_device(N * F, 1, &r);
    TIME_OP(b, "swiglu_fwd_bf16", 3 * NF * 2, 0, swiglu_fused_forward_bf16_cuda(hb, gub, N, F));
    cuda_free(gub), cuda_free(hb);

    float *logits = random_device(R * V, 0, &r), *loss = cuda_malloc(4 * (size_t)R), *lse = cuda_malloc(4 * (size_t)R);
    int32_t *tgt = cuda_malloc(sizeof(int32_t) * (size_t)R);
    cuda_memcpy_h2d(tgt, tok_h, sizeof(int32_t) * (size_t)(R < N ? R : N));
    if (R > N) cuda_memset_zero(tgt + N, sizeof(int32_t) * (size_t)(R - N));
    TIME_OP(b, "crossentropy_fwd (1 read)", RV * f4, 0, crossentropy_forward_cuda(loss, lse, logits, tgt, R, V));
    TIME_OP(b, "crossentropy_bwd", 2 * RV * f4, 0, crossentropy_backward_cuda(logits, lse, tgt, R, V, 1.0f / R));
    cuda_free(logits), cuda_free(loss), cuda_free(lse), cuda_free(tgt);
    free(tok_h);

    const double mm_flops = 2.0 * N * C * F;
    void *ab = random_device(N * C, 1, &r), *wb = random_device(F * C, 1, &r), *ob = random_device(N * F, 1, &r);
    void *dab = random_device(N * C, 1, &r);
    float *dwf = random_device(F * C, 0, &r);
    TIME_OP(b, "matmul_fwd_bf16 (C->F)", 0, mm_flops, matmul_forward_bf16_cuda(ob, ab, wb, N, C, F));
    TIME_OP(b, "matmul_bwd_bf16 (C->F)", 0, 2 * mm_flops, matmul_backward_bf16_cuda(dab, dwf, ob, ab, wb, N, C, F));
    cuda_free(ab), cuda_free(wb), cuda_free(ob), cuda_free(dab);
    float *a = random_device(N * C, 0, &r), *wf = random_device(F * C, 0, &r), *o = random_device(N * F, 0, &r);
    TIME_OP(b, "matmul_fwd_fp32 (C->F)", 0, mm_flops, matmul_forward_cuda(o, a, wf, N, C, F));
    cuda_free(a), cuda_free(wf), cuda_free(o), cuda_free(dwf);
    matmul_cuda_release();
}

static void ops_run(const BenchOpsArgs *a) {
    BenchOps b = {a->tokens, a->hidden, a->ffn, a->vocab, a->ce_rows, a->reps, a->json, 0};
    char dev[256];
    cuda_device_describe(dev, sizeof dev);
    if (a->json) printf("{\"device\": \"%s\", \"ops\": {", dev);
    else printf("device: %s\n", dev);
    bench_all(&b);
    if (a->json) printf("}}\n");
}

const BenchOpsDevice bench_ops_cuda = {ops_run};
