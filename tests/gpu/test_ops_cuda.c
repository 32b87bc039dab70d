/* GPU parity of the simple ops: every CUDA twin against its CPU oracle on the
 * same random inputs, odd shapes included, plus run-twice determinism.
 *
 * Tolerances: |gpu - cpu| <= atol + atol_per_k * K + rtol * |cpu|, where K is
 * the length of the op's reduction (inputs are uniform in [-1, 1]).
 *
 *   op                  atol    atol_per_k  rtol    why
 *   embedding fwd/bwd   bitwise identical           copies; the same adds in the same row order
 *   rope fwd/bwd        1e-7    0           1e-6    same roundings (no FMA); slack for an FMA-built CPU
 *   swiglu fp32         1e-6    0           1e-5    CUDA expf vs glibc: <= 2 ulp
 *   swiglu bf16         1e-6    0           1e-2    one bf16 rounding (< 2^-7 rel) of the fp32 value
 *   rmsnorm fwd         1e-6    0           2e-5    sequential CPU sum of x^2 vs block tree
 *   rmsnorm bwd dinp    1e-6    0           2e-5    same, on sum(w * dy * x)
 *   rmsnorm bwd dweight 1e-6    5e-7        1e-5    column sums over K = N rows in another order
 *   crossentropy lse    1e-5    0           2e-6    double exp-sum both sides; lse may differ by 1 ulp
 *   crossentropy loss   1e-5    0           2e-6    lse - z[target]
 *   crossentropy dlogit 1e-6*s  0           3e-5    s = scale; expf <= 2 ulp, 1 ulp of lse (7.6e-6 at 104)
 *   matmul fp32         1e-6    5e-7        1e-5    fp32 dot products of length K, any order
 *   matmul bf16 out     1e-6    2e-6        1e-2    as fp32 (tensor-core accumulation), then bf16 rounding
 *   matmul bf16 dweight 1e-6    2e-6        1e-5    fp32 output of exact bf16 products
 *   matmul bf16r/bf16w  1e-6    5e-7        1e-5    as fp32: both sides round the operands to bf16 the
 *                                                   same way (RNE), the products are exact, fp32 sums
 *
 * bf16 cases feed the CPU the bf16-rounded inputs, so only the GPU's output
 * rounding and accumulation order are measured. The bf16r/bf16w launchers
 * (fp32 activations, bf16-rounded inside) run under the emulator too, where
 * bf16r is the CPU oracle itself and bf16w checks the bf16-weight path. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rng.h"
#include "../testlib.h"

#ifdef KVCPT_CUDA
#include "../../kernels/bf16.h"
#include "../../kernels/crossentropy.h"
#include "../../kernels/cuda_device.h"
#include "gpu_testlib.h"
#include "../../kernels/embedding.h"
#include "../../kernels/matmul.h"
#include "../../kernels/rmsnorm.h"
#include "../../kernels/rope.h"
#include "../../kernels/swiglu.h"

static const Tol TOL_ROPE = {1e-7, 0, 1e-6};
static const Tol TOL_SWIGLU = {1e-6, 0, 1e-5};
static const Tol TOL_SWIGLU_BF16 = {1e-6, 0, 1e-2};
static const Tol TOL_RMS_FWD = {1e-6, 0, 2e-5};
static const Tol TOL_RMS_DINP = {1e-6, 0, 2e-5};
static const Tol TOL_RMS_DW = {1e-6, 5e-7, 1e-5};
static const Tol TOL_CE_LSE = {1e-5, 0, 2e-6};
static const Tol TOL_CE_GRAD_PER_SCALE = {1e-6, 0, 3e-5}; /* atol is multiplied by |scale| */
static const Tol TOL_MM = {1e-6, 5e-7, 1e-5};
static const Tol TOL_MM_BF16_OUT = {1e-6, 2e-6, 1e-2};
static const Tol TOL_MM_BF16_DW = {1e-6, 2e-6, 1e-5};

static Rng rng;

static float *host_uniform(int64_t n, float lo, float hi) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * rng_uniform(&rng);
    return p;
}

static float *host_copy(const float *src, int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    memcpy(p, src, sizeof(float) * (size_t)n);
    return p;
}

static float *dev_floats(const float *src, int64_t n) { return dev_upload(src, sizeof(float) * (size_t)n); }

/* Rounds x to bf16 in place and returns the bf16 bits. */
static uint16_t *round_to_bf16(float *x, int64_t n) {
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        b[i] = bf16_bits_from_float(x[i]);
        x[i] = float_from_bf16_bits(b[i]);
    }
    return b;
}

static float *host_download_bf16(const void *d, int64_t n) {
    uint16_t *b = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    cuda_memcpy_d2h(b, d, sizeof(uint16_t) * (size_t)n);
    float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) f[i] = float_from_bf16_bits(b[i]);
    free(b);
    return f;
}

/* ---------------------------------------------------------------- embedding */

static void test_embedding(int64_t N, int64_t C, int64_t vocab) {
    char name[160];
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) tok[i] = (int32_t)(rng_u64(&rng) % (uint64_t)vocab);
    float *wte = host_uniform(vocab * C, -1, 1), *dout = host_uniform(N * C, -1, 1);
    float *dwte0 = host_uniform(vocab * C, -1, 1);
    int32_t *d_tok = dev_upload(tok, sizeof(int32_t) * (size_t)N);
    float *d_wte = dev_floats(wte, vocab * C), *d_out = cuda_malloc(sizeof(float) * (size_t)(N * C));
    float *d_dout = dev_floats(dout, N * C), *d_dwte = dev_floats(dwte0, vocab * C);

    float *ref = malloc(sizeof(float) * (size_t)(N * C));
    embedding_forward_cpu(ref, tok, wte, N, C);
    embedding_forward_cuda(d_out, d_tok, d_wte, N, C);
    float *got = download(d_out, N * C);
    snprintf(name, sizeof name, "embedding fwd N=%lld C=%lld vocab=%lld", (long long)N, (long long)C, (long long)vocab);
    tl_identical(name, got, ref, N * C);

    float *dref = host_copy(dwte0, vocab * C);
    embedding_backward_cpu(dref, dout, tok, N, C);
    embedding_backward_cuda(d_dwte, d_dout, d_tok, N, C);
    float *dgot = download(d_dwte, vocab * C);
    snprintf(name, sizeof name, "embedding bwd N=%lld C=%lld vocab=%lld (bitwise)", (long long)N, (long long)C,
             (long long)vocab);
    tl_identical(name, dgot, dref, vocab * C);

    cuda_memcpy_h2d(d_dwte, dwte0, sizeof(float) * (size_t)(vocab * C));
    embedding_backward_cuda(d_dwte, d_dout, d_tok, N, C);
    float *again = download(d_dwte, vocab * C);
    snprintf(name, sizeof name, "embedding bwd N=%lld C=%lld deterministic", (long long)N, (long long)C);
    tl_identical(name, again, dgot, vocab * C);

    cuda_free(d_tok), cuda_free(d_wte), cuda_free(d_out), cuda_free(d_dout), cuda_free(d_dwte);
    free(tok), free(wte), free(dout), free(dwte0), free(ref), free(got), free(dref), free(dgot), free(again);
}

/* ------------------------------------------------------------------ rmsnorm */

static void test_rmsnorm(int64_t N, int64_t C) {
    char name[160];
    const float eps = 1e-5f;
    float *x = host_uniform(N * C, -1, 1), *w = host_uniform(C, 0.5f, 1.5f), *dy = host_uniform(N * C, -1, 1);
    float *dx0 = host_uniform(N * C, -1, 1), *dw0 = host_uniform(C, -1, 1);
    float *out = malloc(sizeof(float) * (size_t)(N * C)), *rstd = malloc(sizeof(float) * (size_t)N);
    rmsnorm_forward_cpu(out, rstd, x, w, N, C, eps);

    float *d_x = dev_floats(x, N * C), *d_w = dev_floats(w, C), *d_dy = dev_floats(dy, N * C);
    float *d_out = cuda_malloc(sizeof(float) * (size_t)(N * C)), *d_rstd = cuda_malloc(sizeof(float) * (size_t)N);
    rmsnorm_forward_cuda(d_out, d_rstd, d_x, d_w, N, C, eps);
    float *g_out = download(d_out, N * C), *g_rstd = download(d_rstd, N);
    snprintf(name, sizeof name, "rmsnorm fwd out N=%lld C=%lld", (long long)N, (long long)C);
    close_k(name, g_out, out, N * C, TOL_RMS_FWD, C);
    snprintf(name, sizeof name, "rmsnorm fwd rstd N=%lld C=%lld", (long long)N, (long long)C);
    close_k(name, g_rstd, rstd, N, TOL_RMS_FWD, C);
    {   /* bf16 output: the same arithmetic rounded once, so exactly the
         * fp32 kernel's output rounded */
        void *d_outb = cuda_malloc(2 * (size_t)(N * C));
        rmsnorm_forward_bf16_cuda(d_outb, d_rstd, d_x, d_w, N, C, eps);
        float *b_out = host_download_bf16(d_outb, N * C), *r_out = host_copy(g_out, N * C);
        free(round_to_bf16(r_out, N * C));
        snprintf(name, sizeof name, "rmsnorm fwd bf16 out = round(fp32 out) N=%lld C=%lld", (long long)N, (long long)C);
        tl_identical(name, b_out, r_out, N * C);
        cuda_free(d_outb), free(b_out), free(r_out);
    }

    /* backward from the CPU's rstd, so it is tested on its own */
    float *dx = host_copy(dx0, N * C), *dw = host_copy(dw0, C);
    rmsnorm_backward_cpu(dx, dw, dy, x, w, rstd, N, C);
    float *d_dx = dev_floats(dx0, N * C), *d_dw = dev_floats(dw0, C);
    cuda_memcpy_h2d(d_rstd, rstd, sizeof(float) * (size_t)N);
    rmsnorm_backward_cuda(d_dx, d_dw, d_dy, d_x, d_w, d_rstd, N, C);
    float *g_dx = download(d_dx, N * C), *g_dw = download(d_dw, C);
    snprintf(name, sizeof name, "rmsnorm bwd dinp (accumulated) N=%lld C=%lld", (long long)N, (long long)C);
    close_k(name, g_dx, dx, N * C, TOL_RMS_DINP, C);
    snprintf(name, sizeof name, "rmsnorm bwd dweight (accumulated) N=%lld C=%lld", (long long)N, (long long)C);
    close_k(name, g_dw, dw, C, TOL_RMS_DW, N);

    cuda_memcpy_h2d(d_dx, dx0, sizeof(float) * (size_t)(N * C));
    cuda_memcpy_h2d(d_dw, dw0, sizeof(float) * (size_t)C);
    rmsnorm_backward_cuda(d_dx, d_dw, d_dy, d_x, d_w, d_rstd, N, C);
    float *a_dx = download(d_dx, N * C), *a_dw = download(d_dw, C);
    snprintf(name, sizeof name, "rmsnorm bwd N=%lld C=%lld deterministic dinp", (long long)N, (long long)C);
    tl_identical(name, a_dx, g_dx, N * C);
    snprintf(name, sizeof name, "rmsnorm bwd N=%lld C=%lld deterministic dweight", (long long)N, (long long)C);
    tl_identical(name, a_dw, g_dw, C);

    cuda_free(d_x), cuda_free(d_w), cuda_free(d_dy), cuda_free(d_out), cuda_free(d_rstd), cuda_free(d_dx),
        cuda_free(d_dw);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(out), free(rstd), free(g_out), free(g_rstd), free(dx),
        free(dw), free(g_dx), free(g_dw), free(a_dx), free(a_dw);
}

/* --------------------------------------------------------------------- rope */

static void test_rope(int64_t B, int64_t T, int64_t H, int64_t D) {
    char name[160];
    const RopeParams p = {.theta = 500000.0,
                          .s = {.type = ROPE_LINEAR,
                                .factor = 8.0,
                                .low_freq_factor = 1.0,
                                .high_freq_factor = 4.0,
                                .original_max_pos = 8192}};
    const int64_t half = D / 2, n = B * T * H * D;
    float *cos_t = malloc(sizeof(float) * (size_t)(T * half + 1)),
          *sin_t = malloc(sizeof(float) * (size_t)(T * half + 1));
    rope_table(cos_t, sin_t, T, D, &p);
    float *x = host_uniform(n, -1, 1);
    float *d_cos = dev_floats(cos_t, T * half), *d_sin = dev_floats(sin_t, T * half), *d_x = dev_floats(x, n);
    float *ref = host_copy(x, n);
    rope_forward_cpu(ref, cos_t, sin_t, B, T, H, D);
    rope_forward_cuda(d_x, d_cos, d_sin, B, T, H, D);
    float *got = download(d_x, n);
    snprintf(name, sizeof name, "rope fwd B=%lld T=%lld H=%lld D=%lld", (long long)B, (long long)T, (long long)H,
             (long long)D);
    close_k(name, got, ref, n, TOL_ROPE, 0);

    memcpy(ref, x, sizeof(float) * (size_t)n);
    cuda_memcpy_h2d(d_x, x, sizeof(float) * (size_t)n);
    rope_backward_cpu(ref, cos_t, sin_t, B, T, H, D);
    rope_backward_cuda(d_x, d_cos, d_sin, B, T, H, D);
    free(got);
    got = download(d_x, n);
    snprintf(name, sizeof name, "rope bwd B=%lld T=%lld H=%lld D=%lld", (long long)B, (long long)T, (long long)H,
             (long long)D);
    close_k(name, got, ref, n, TOL_ROPE, 0);

    cuda_free(d_cos), cuda_free(d_sin), cuda_free(d_x);
    free(cos_t), free(sin_t), free(x), free(ref), free(got);
}

/* The fused q|k|v split (RoPE on q and k) and its backward join, fp32
 * against the CPU oracle, bf16 against the oracle on the same bf16 values
 * rounded once (bit for bit: the same arithmetic, no FMA). */
static void test_rope_fused(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    char name[200], shape[100];
    snprintf(shape, sizeof shape, "B=%lld T=%lld Hq=%lld Hkv=%lld D=%lld", (long long)B, (long long)T, (long long)Hq,
             (long long)Hkv, (long long)D);
    const RopeParams p = {.theta = 500000.0,
                          .s = {.type = ROPE_LINEAR,
                                .factor = 8.0,
                                .low_freq_factor = 1.0,
                                .high_freq_factor = 4.0,
                                .original_max_pos = 8192}};
    const int64_t half = D / 2, rows = B * T, nq = rows * Hq * D, nk = rows * Hkv * D, nw = nq + 2 * nk;
    float *cos_t = malloc(sizeof(float) * (size_t)(T * half + 1)),
          *sin_t = malloc(sizeof(float) * (size_t)(T * half + 1));
    rope_table(cos_t, sin_t, T, D, &p);
    float *d_cos = dev_floats(cos_t, T * half), *d_sin = dev_floats(sin_t, T * half);
    float *qkv = host_uniform(nw, -1, 1), *dq = host_uniform(nq, -1, 1), *dk = host_uniform(nk, -1, 1),
          *dv = host_uniform(nk, -1, 1);
    float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nk),
          *v = malloc(sizeof(float) * (size_t)nk), *dqkv = malloc(sizeof(float) * (size_t)nw);
    for (int bf = 0; bf < 2; bf++) {
        const size_t es = bf ? 2 : 4;
        uint16_t *bqkv = NULL;
        if (bf) bqkv = round_to_bf16(qkv, nw);
        rope_split_forward_cpu(q, k, v, qkv, cos_t, sin_t, B, T, Hq, Hkv, D);
        rope_join_backward_cpu(dqkv, dq, dk, dv, cos_t, sin_t, B, T, Hq, Hkv, D);
        void *d_qkv = bf ? dev_upload(bqkv, 2 * (size_t)nw) : dev_floats(qkv, nw);
        void *d_q = cuda_malloc(es * (size_t)nq), *d_k = cuda_malloc(es * (size_t)nk),
             *d_v = cuda_malloc(es * (size_t)nk);
        void *d_dqkv = cuda_malloc(es * (size_t)nw);
        float *d_dq = dev_floats(dq, nq), *d_dk = dev_floats(dk, nk), *d_dv = dev_floats(dv, nk);
        if (bf) {
            rope_split_forward_bf16_cuda(d_q, d_k, d_v, d_qkv, d_cos, d_sin, B, T, Hq, Hkv, D);
            rope_join_backward_bf16_cuda(d_dqkv, d_dq, d_dk, d_dv, d_cos, d_sin, B, T, Hq, Hkv, D);
        } else {
            rope_split_forward_cuda(d_q, d_k, d_v, d_qkv, d_cos, d_sin, B, T, Hq, Hkv, D);
            rope_join_backward_cuda(d_dqkv, d_dq, d_dk, d_dv, d_cos, d_sin, B, T, Hq, Hkv, D);
        }
        float *g[4], *want[4] = {q, k, v, dqkv};
        const int64_t n[4] = {nq, nk, nk, nw};
        void *dev[4] = {d_q, d_k, d_v, d_dqkv};
        const char *what[4] = {"split q", "split k", "split v", "join dqkv"};
        for (int i = 0; i < 4; i++) {
            g[i] = bf ? host_download_bf16(dev[i], n[i]) : download(dev[i], n[i]);
            if (bf) free(round_to_bf16(want[i], n[i]));
            snprintf(name, sizeof name, "rope %s %s %s", bf ? "bf16" : "fp32", what[i], shape);
            tl_identical(name, g[i], want[i], n[i]);
            free(g[i]);
        }
        cuda_free(d_qkv), cuda_free(d_q), cuda_free(d_k), cuda_free(d_v), cuda_free(d_dqkv), cuda_free(d_dq),
            cuda_free(d_dk), cuda_free(d_dv);
        free(bqkv);
    }
    cuda_free(d_cos), cuda_free(d_sin);
    free(cos_t), free(sin_t), free(qkv), free(dq), free(dk), free(dv), free(q), free(k), free(v), free(dqkv);
}

/* ------------------------------------------------------------------- swiglu */

/* The fused [gate | up] rows, fp32 and bf16, against the CPU oracle. */
static void test_swiglu_fused(int64_t N, int64_t F) {
    char name[160];
    const int64_t n = N * F;
    float *gu = host_uniform(2 * n, -4, 4), *dh = host_uniform(n, -2, 2);
    float *h = malloc(sizeof(float) * (size_t)n), *dgu = malloc(sizeof(float) * (size_t)(2 * n));
    for (int bf = 0; bf < 2; bf++) {
        const size_t es = bf ? 2 : 4;
        uint16_t *bgu = NULL, *bdh = NULL;
        if (bf) bgu = round_to_bf16(gu, 2 * n), bdh = round_to_bf16(dh, n);
        swiglu_fused_forward_cpu(h, gu, N, F);
        swiglu_fused_backward_cpu(dgu, dh, gu, N, F);
        void *d_gu = bf ? dev_upload(bgu, 2 * (size_t)(2 * n)) : dev_floats(gu, 2 * n);
        void *d_dh = bf ? dev_upload(bdh, 2 * (size_t)n) : dev_floats(dh, n);
        void *d_h = cuda_malloc(es * (size_t)n), *d_dgu = cuda_malloc(es * (size_t)(2 * n));
        if (bf) {
            swiglu_fused_forward_bf16_cuda(d_h, d_gu, N, F);
            swiglu_fused_backward_bf16_cuda(d_dgu, d_dh, d_gu, N, F);
        } else {
            swiglu_fused_forward_cuda(d_h, d_gu, N, F);
            swiglu_fused_backward_cuda(d_dgu, d_dh, d_gu, N, F);
        }
        float *gh = bf ? host_download_bf16(d_h, n) : download(d_h, n);
        float *gd = bf ? host_download_bf16(d_dgu, 2 * n) : download(d_dgu, 2 * n);
        snprintf(name, sizeof name, "swiglu fused %s fwd N=%lld F=%lld", bf ? "bf16" : "fp32", (long long)N,
                 (long long)F);
        close_k(name, gh, h, n, bf ? TOL_SWIGLU_BF16 : TOL_SWIGLU, 0);
        snprintf(name, sizeof name, "swiglu fused %s bwd N=%lld F=%lld", bf ? "bf16" : "fp32", (long long)N,
                 (long long)F);
        close_k(name, gd, dgu, 2 * n, bf ? TOL_SWIGLU_BF16 : TOL_SWIGLU, 0);
        cuda_free(d_gu), cuda_free(d_dh), cuda_free(d_h), cuda_free(d_dgu);
        free(gh), free(gd), free(bgu), free(bdh);
    }
    free(gu), free(dh), free(h), free(dgu);
}

/* ------------------------------------------------------------- crossentropy */

/* The logits (rows, V) and targets of a cross-entropy case: row 0 targets
 * -1 (ignored) when rows > 1; row 1 is shifted by +100 (exp would overflow
 * without the max); row 2 has a dominant target logit. */
static float *crossentropy_case(int64_t rows, int64_t V, int32_t **targets) {
    float *z = host_uniform(rows * V, -4, 4);
    int32_t *tgt = malloc(sizeof(int32_t) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) tgt[r] = (int32_t)(rng_u64(&rng) % (uint64_t)V);
    if (rows > 1) tgt[0] = -1;
    if (rows > 1)
        for (int64_t v = 0; v < V; v++) z[V + v] += 100.0f;
    if (rows > 2) z[2 * V + tgt[2]] = 30.0f;
    *targets = tgt;
    return z;
}

static void test_crossentropy(int64_t rows, int64_t V) {
    char name[160];
    int32_t *tgt;
    float *z = crossentropy_case(rows, V, &tgt);
    const float scale = 1.0f / (float)rows;

    float *loss = malloc(sizeof(float) * (size_t)rows), *lse = malloc(sizeof(float) * (size_t)rows);
    crossentropy_forward_cpu(loss, lse, z, tgt, rows, V);
    float *d_z = dev_floats(z, rows * V), *d_loss = cuda_malloc(sizeof(float) * (size_t)rows),
          *d_lse = cuda_malloc(sizeof(float) * (size_t)rows);
    int32_t *d_tgt = dev_upload(tgt, sizeof(int32_t) * (size_t)rows);
    crossentropy_forward_cuda(d_loss, d_lse, d_z, d_tgt, rows, V);
    float *g_loss = download(d_loss, rows), *g_lse = download(d_lse, rows);
    snprintf(name, sizeof name, "crossentropy fwd lse rows=%lld V=%lld", (long long)rows, (long long)V);
    close_k(name, g_lse, lse, rows, TOL_CE_LSE, 0);
    snprintf(name, sizeof name, "crossentropy fwd loss rows=%lld V=%lld", (long long)rows, (long long)V);
    close_k(name, g_loss, loss, rows, TOL_CE_LSE, 0);

    crossentropy_forward_cuda(d_loss, d_lse, d_z, d_tgt, rows, V);
    float *a_lse = download(d_lse, rows);
    snprintf(name, sizeof name, "crossentropy fwd rows=%lld V=%lld deterministic", (long long)rows, (long long)V);
    tl_identical(name, a_lse, g_lse, rows);

    /* backward from the CPU's lse, in place on both sides */
    cuda_memcpy_h2d(d_lse, lse, sizeof(float) * (size_t)rows);
    crossentropy_backward_cpu(z, lse, tgt, rows, V, scale);
    crossentropy_backward_cuda(d_z, d_lse, d_tgt, rows, V, scale);
    float *g_z = download(d_z, rows * V);
    Tol t = TOL_CE_GRAD_PER_SCALE;
    t.atol *= scale;
    snprintf(name, sizeof name, "crossentropy bwd rows=%lld V=%lld", (long long)rows, (long long)V);
    close_k(name, g_z, z, rows * V, t, 0);

    cuda_free(d_z), cuda_free(d_loss), cuda_free(d_lse), cuda_free(d_tgt);
    free(z), free(tgt), free(loss), free(lse), free(g_loss), free(g_lse), free(a_lse), free(g_z);
}

/* The fused kernel on the same cases: the bits of the two kernels in turn,
 * and the fused CPU oracle's values within the tolerances above. */
static void test_crossentropy_fused(int64_t rows, int64_t V) {
    char name[160];
    int32_t *tgt;
    float *z = crossentropy_case(rows, V, &tgt);
    const float scale = 1.0f / (float)rows;
    float *d_z1 = dev_floats(z, rows * V), *d_z2 = dev_floats(z, rows * V);
    float *d_loss = cuda_malloc(sizeof(float) * (size_t)rows * 4), *d_lse = d_loss + rows;
    float *d_loss2 = d_loss + 2 * rows, *d_lse2 = d_loss + 3 * rows;
    int32_t *d_tgt = dev_upload(tgt, sizeof(int32_t) * (size_t)rows);
    crossentropy_forward_cuda(d_loss, d_lse, d_z1, d_tgt, rows, V);
    crossentropy_backward_cuda(d_z1, d_lse, d_tgt, rows, V, scale);
    crossentropy_forward_backward_cuda(d_loss2, d_lse2, d_z2, d_tgt, rows, V, scale);
    float *two = download(d_loss, rows * 4), *g1 = download(d_z1, rows * V), *g2 = download(d_z2, rows * V);
    snprintf(name, sizeof name,
             "crossentropy fused rows=%lld V=%lld: the two kernels' losses, lse and gradient, bit for bit",
             (long long)rows, (long long)V);
    tl_result(memcmp(two, two + 2 * rows, sizeof(float) * (size_t)rows * 2) == 0 &&
                  memcmp(g1, g2, sizeof(float) * (size_t)(rows * V)) == 0,
              name, "losses, lse or gradients differ");

    float *loss = malloc(sizeof(float) * (size_t)rows * 2), *lse = loss + rows;
    crossentropy_forward_backward_cpu(loss, lse, z, tgt, rows, V, scale);
    snprintf(name, sizeof name, "crossentropy fused rows=%lld V=%lld: loss", (long long)rows, (long long)V);
    close_k(name, two + 2 * rows, loss, rows, TOL_CE_LSE, 0);
    snprintf(name, sizeof name, "crossentropy fused rows=%lld V=%lld: lse", (long long)rows, (long long)V);
    close_k(name, two + 3 * rows, lse, rows, TOL_CE_LSE, 0);
    Tol t = TOL_CE_GRAD_PER_SCALE;
    t.atol *= scale;
    snprintf(name, sizeof name, "crossentropy fused rows=%lld V=%lld: gradient", (long long)rows, (long long)V);
    close_k(name, g2, z, rows * V, t, 0);

    cuda_free(d_z1), cuda_free(d_z2), cuda_free(d_loss), cuda_free(d_tgt);
    free(z), free(tgt), free(two), free(g1), free(g2), free(loss);
}

/* ------------------------------------------------------------------- matmul */

/* offset: elements by which every operand view is shifted from its
 * allocation, to exercise misaligned pointers. */
#ifndef KVCPT_CUDA_EMU /* cuBLASLt runs on a GPU only */
static void test_matmul(int64_t N, int64_t IC, int64_t OC, int64_t offset) {
    char name[200], shape[96];
    snprintf(shape, sizeof shape, "N=%lld IC=%lld OC=%lld offset=%lld", (long long)N, (long long)IC, (long long)OC,
             (long long)offset);
    const int64_t nx = N * IC, nw = OC * IC, ny = N * OC;
    float *x = host_uniform(nx, -1, 1), *w = host_uniform(nw, -1, 1), *dy = host_uniform(ny, -1, 1);
    float *dx0 = host_uniform(nx, -1, 1), *dw0 = host_uniform(nw, -1, 1);
    float *y = malloc(sizeof(float) * (size_t)ny), *dx = host_copy(dx0, nx), *dw = host_copy(dw0, nw);
    matmul_forward_cpu(y, x, w, N, IC, OC);
    matmul_backward_cpu(dx, dw, dy, x, w, N, IC, OC);

    const size_t pad = sizeof(float) * (size_t)offset;
    char *b_x = cuda_malloc(pad + 4 * (size_t)nx), *b_w = cuda_malloc(pad + 4 * (size_t)nw),
         *b_dy = cuda_malloc(pad + 4 * (size_t)ny), *b_y = cuda_malloc(pad + 4 * (size_t)ny),
         *b_dx = cuda_malloc(pad + 4 * (size_t)nx), *b_dw = cuda_malloc(pad + 4 * (size_t)nw);
    float *d_x = (float *)(b_x + pad), *d_w = (float *)(b_w + pad), *d_dy = (float *)(b_dy + pad),
          *d_y = (float *)(b_y + pad), *d_dx = (float *)(b_dx + pad), *d_dw = (float *)(b_dw + pad);
    cuda_memcpy_h2d(d_x, x, 4 * (size_t)nx), cuda_memcpy_h2d(d_w, w, 4 * (size_t)nw);
    cuda_memcpy_h2d(d_dy, dy, 4 * (size_t)ny), cuda_memcpy_h2d(d_dx, dx0, 4 * (size_t)nx);
    cuda_memcpy_h2d(d_dw, dw0, 4 * (size_t)nw);
    matmul_forward_cuda(d_y, d_x, d_w, N, IC, OC);
    matmul_backward_cuda(d_dx, d_dw, d_dy, d_x, d_w, N, IC, OC);
    float *g_y = download(d_y, ny), *g_dx = download(d_dx, nx), *g_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul fwd %s", shape);
    close_k(name, g_y, y, ny, TOL_MM, IC);
    snprintf(name, sizeof name, "matmul bwd dinp (accumulated) %s", shape);
    close_k(name, g_dx, dx, nx, TOL_MM, OC);
    snprintf(name, sizeof name, "matmul bwd dweight (accumulated) %s", shape);
    close_k(name, g_dw, dw, nw, TOL_MM, N);

    /* NULL outputs are skipped, and a second run gives the same bits */
    cuda_memcpy_h2d(d_dx, dx0, 4 * (size_t)nx);
    matmul_backward_cuda(d_dx, NULL, d_dy, d_x, d_w, N, IC, OC);
    float *a_dx = download(d_dx, nx);
    snprintf(name, sizeof name, "matmul bwd dinp only, deterministic %s", shape);
    tl_identical(name, a_dx, g_dx, nx);
    cuda_memcpy_h2d(d_dw, dw0, 4 * (size_t)nw);
    matmul_backward_cuda(NULL, d_dw, d_dy, d_x, d_w, N, IC, OC);
    float *a_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul bwd dweight only, deterministic %s", shape);
    tl_identical(name, a_dw, g_dw, nw);

    cuda_free(b_x), cuda_free(b_w), cuda_free(b_dy), cuda_free(b_y), cuda_free(b_dx), cuda_free(b_dw);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(y), free(dx), free(dw), free(g_y), free(g_dx), free(g_dw),
        free(a_dx), free(a_dw);
}

#endif

/* bf16 operands: bf16 or fp32 outputs, each against the fp32 oracle on the
 * same (bf16) values. */
static void test_matmul_bf16(int64_t N, int64_t IC, int64_t OC) {
    char name[200], shape[80];
    snprintf(shape, sizeof shape, "N=%lld IC=%lld OC=%lld", (long long)N, (long long)IC, (long long)OC);
    const int64_t nx = N * IC, nw = OC * IC, ny = N * OC;
    float *x = host_uniform(nx, -1, 1), *w = host_uniform(nw, -1, 1), *dy = host_uniform(ny, -1, 1);
    float *dx = host_uniform(nx, -1, 1), *dw0 = host_uniform(nw, -1, 1);
    uint16_t *bx = round_to_bf16(x, nx), *bw = round_to_bf16(w, nw), *bdy = round_to_bf16(dy, ny),
             *bdx = round_to_bf16(dx, nx);
    float *y = malloc(sizeof(float) * (size_t)ny), *dw = host_copy(dw0, nw);
    matmul_forward_cpu(y, x, w, N, IC, OC);
    matmul_backward_cpu(dx, dw, dy, x, w, N, IC, OC);

    void *d_x = dev_upload(bx, 2 * (size_t)nx), *d_w = dev_upload(bw, 2 * (size_t)nw),
         *d_dy = dev_upload(bdy, 2 * (size_t)ny), *d_dx = dev_upload(bdx, 2 * (size_t)nx),
         *d_y = cuda_malloc(2 * (size_t)ny);
    float *d_dw = dev_floats(dw0, nw);
    matmul_forward_bf16_cuda(d_y, d_x, d_w, N, IC, OC);
    matmul_backward_bf16_cuda(d_dx, d_dw, d_dy, d_x, d_w, N, IC, OC);
    float *g_y = host_download_bf16(d_y, ny), *g_dx = host_download_bf16(d_dx, nx), *g_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul bf16 fwd %s", shape);
    close_k(name, g_y, y, ny, TOL_MM_BF16_OUT, IC);
    snprintf(name, sizeof name, "matmul bf16 bwd dinp (bf16, written) %s", shape);
    close_k(name, g_dx, dx, nx, TOL_MM_BF16_OUT, OC);
    snprintf(name, sizeof name, "matmul bf16 bwd dweight (fp32, accumulated) %s", shape);
    close_k(name, g_dw, dw, nw, TOL_MM_BF16_DW, N);

    cuda_memcpy_h2d(d_dw, dw0, 4 * (size_t)nw);
    matmul_backward_bf16_cuda(NULL, d_dw, d_dy, d_x, d_w, N, IC, OC);
    float *a_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul bf16 bwd dweight deterministic %s", shape);
    tl_identical(name, a_dw, g_dw, nw);

    /* the bf16 engine's mixed products: bf16 in, fp32 out; bf16 dout, fp32
     * dinp; fp32 dout (rounded by the launcher), bf16 dinp */
    float *d_y32 = cuda_malloc(4 * (size_t)ny), *d_dx32 = cuda_malloc(4 * (size_t)nx);
    matmul_forward_bf16_f32out_cuda(d_y32, d_x, d_w, N, IC, OC);
    float *m_y = download(d_y32, ny);
    snprintf(name, sizeof name, "matmul bf16 in, fp32 out %s", shape);
    close_k(name, m_y, y, ny, TOL_MM, IC);
    /* the residual add in the epilogue: into another buffer (add left as
     * it was), and in place, the same bits both ways */
    float *r = host_uniform(ny, -1, 1), *yr = malloc(sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++) yr[i] = y[i] + r[i];
    float *d_r = dev_floats(r, ny), *d_o = cuda_malloc(4 * (size_t)ny);
    matmul_forward_bf16_f32out_add_cuda(d_o, d_r, d_x, d_w, N, IC, OC);
    float *e_o = download(d_o, ny), *e_r = download(d_r, ny);
    snprintf(name, sizeof name, "matmul bf16 in, fp32 out + add in the epilogue %s", shape);
    close_k(name, e_o, yr, ny, TOL_MM, IC);
    snprintf(name, sizeof name, "matmul epilogue add with D != C leaves C as it was %s", shape);
    tl_identical(name, e_r, r, ny);
    matmul_forward_bf16_f32out_add_cuda(d_r, d_r, d_x, d_w, N, IC, OC);
    float *e_in = download(d_r, ny);
    snprintf(name, sizeof name, "matmul epilogue add in place (D = C) gives the same bits %s", shape);
    tl_identical(name, e_in, e_o, ny);
    cuda_free(d_r), cuda_free(d_o);
    free(r), free(yr), free(e_o), free(e_r), free(e_in);
    cuda_memcpy_h2d(d_dw, dw0, 4 * (size_t)nw);
    matmul_backward_bf16_f32dinp_cuda(d_dx32, d_dw, d_dy, d_x, d_w, N, IC, OC);
    float *m_dx = download(d_dx32, nx), *m_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul bf16 dout, fp32 dinp %s", shape);
    close_k(name, m_dx, dx, nx, TOL_MM, OC);
    snprintf(name, sizeof name, "matmul bf16 dout, dweight %s", shape);
    close_k(name, m_dw, dw, nw, TOL_MM_BF16_DW, N);
    float *dy32 = host_uniform(ny, -1, 1), *r_dx = malloc(sizeof(float) * (size_t)nx), *r_dw = host_copy(dw0, nw);
    matmul_backward_bf16r_cpu(r_dx, r_dw, dy32, x, w, N, IC, OC);
    float *d_dy32 = dev_floats(dy32, ny);
    cuda_memcpy_h2d(d_dw, dw0, 4 * (size_t)nw);
    matmul_backward_f32dout_cuda(d_dx, d_dw, d_dy32, d_x, d_w, N, IC, OC);
    float *f_dx = host_download_bf16(d_dx, nx), *f_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul fp32 dout, bf16 dinp %s", shape);
    close_k(name, f_dx, r_dx, nx, TOL_MM_BF16_OUT, OC);
    snprintf(name, sizeof name, "matmul fp32 dout, dweight %s", shape);
    close_k(name, f_dw, r_dw, nw, TOL_MM_BF16_DW, N);
    cuda_free(d_y32), cuda_free(d_dx32), cuda_free(d_dy32);
    free(m_y), free(m_dx), free(m_dw), free(dy32), free(r_dx), free(r_dw), free(f_dx), free(f_dw);

    cuda_free(d_x), cuda_free(d_w), cuda_free(d_dy), cuda_free(d_dx), cuda_free(d_y), cuda_free(d_dw);
    free(x), free(w), free(dy), free(dx), free(dw0), free(bx), free(bw), free(bdy), free(bdx), free(y), free(dw),
        free(g_y), free(g_dx), free(g_dw), free(a_dw);
}

/* fp32 activations rounded to bf16 inside the launcher, the weight either
 * fp32 (bf16r, rounded too) or already bf16 (bf16w): both against the
 * bf16r CPU oracle, and against each other bit for bit (same gemm). */
static void test_matmul_bf16r(int64_t N, int64_t IC, int64_t OC) {
    char name[200], shape[80];
    snprintf(shape, sizeof shape, "N=%lld IC=%lld OC=%lld", (long long)N, (long long)IC, (long long)OC);
    const int64_t nx = N * IC, nw = OC * IC, ny = N * OC;
    float *x = host_uniform(nx, -1, 1), *w = host_uniform(nw, -1, 1), *dy = host_uniform(ny, -1, 1);
    float *dx0 = host_uniform(nx, -1, 1), *dw0 = host_uniform(nw, -1, 1);
    float *y = malloc(sizeof(float) * (size_t)ny), *dx = host_copy(dx0, nx), *dw = host_copy(dw0, nw);
    matmul_forward_bf16r_cpu(y, x, w, N, IC, OC);
    matmul_backward_bf16r_cpu(dx, dw, dy, x, w, N, IC, OC);
    float *wr = host_copy(w, nw);
    uint16_t *bw = round_to_bf16(wr, nw);

    float *d_x = dev_floats(x, nx), *d_w = dev_floats(w, nw), *d_dy = dev_floats(dy, ny);
    float *d_y = cuda_malloc(4 * (size_t)ny), *d_dx = dev_floats(dx0, nx), *d_dw = dev_floats(dw0, nw);
    bf16 *d_bw = dev_upload(bw, 2 * (size_t)nw);
    matmul_forward_bf16r_cuda(d_y, d_x, d_w, N, IC, OC);
    matmul_backward_bf16r_cuda(d_dx, d_dw, d_dy, d_x, d_w, N, IC, OC);
    float *r_y = download(d_y, ny), *r_dx = download(d_dx, nx), *r_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul bf16r fwd %s", shape);
    close_k(name, r_y, y, ny, TOL_MM, IC);
    snprintf(name, sizeof name, "matmul bf16r bwd dinp (written) %s", shape);
    close_k(name, r_dx, dx, nx, TOL_MM, OC);
    snprintf(name, sizeof name, "matmul bf16r bwd dweight (accumulated) %s", shape);
    close_k(name, r_dw, dw, nw, TOL_MM, N);

    cuda_memcpy_h2d(d_dx, dx0, 4 * (size_t)nx), cuda_memcpy_h2d(d_dw, dw0, 4 * (size_t)nw);
    matmul_forward_bf16w_cuda(d_y, d_x, d_bw, N, IC, OC);
    matmul_backward_bf16w_cuda(d_dx, NULL, d_dy, d_x, d_bw, N, IC, OC);
    matmul_backward_bf16w_cuda(NULL, d_dw, d_dy, d_x, d_bw, N, IC, OC);
    float *g_y = download(d_y, ny), *g_dx = download(d_dx, nx), *g_dw = download(d_dw, nw);
    snprintf(name, sizeof name, "matmul bf16w fwd %s", shape);
    close_k(name, g_y, y, ny, TOL_MM, IC);
    snprintf(name, sizeof name, "matmul bf16w bwd dinp only (accumulated) %s", shape);
    close_k(name, g_dx, dx, nx, TOL_MM, OC);
    snprintf(name, sizeof name, "matmul bf16w bwd dweight only (accumulated) %s", shape);
    close_k(name, g_dw, dw, nw, TOL_MM, N);
    snprintf(name, sizeof name, "matmul bf16w = bf16r bit for bit (fwd, dinp, dweight) %s", shape);
    tl_result(memcmp(g_y, r_y, 4 * (size_t)ny) == 0 && memcmp(g_dx, r_dx, 4 * (size_t)nx) == 0 &&
                  memcmp(g_dw, r_dw, 4 * (size_t)nw) == 0,
              name, "the bf16 weight path gives other bits than the fp32-weight one");

    cuda_free(d_x), cuda_free(d_w), cuda_free(d_dy), cuda_free(d_y), cuda_free(d_dx), cuda_free(d_dw), cuda_free(d_bw);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(y), free(dx), free(dw), free(wr), free(bw), free(r_y),
        free(r_dx), free(r_dw), free(g_y), free(g_dx), free(g_dw);
}

static void run_all(void) {
    rng_seed(&rng, 20240607);

    if (tl_case_selected("embedding N=1 C=1 vocab=1")) test_embedding(1, 1, 1);
    if (tl_case_selected("embedding N=37 C=7 vocab=5")) test_embedding(37, 7, 5); /* many repeats per token */
    if (tl_case_selected("embedding N=300 C=129 vocab=1")) test_embedding(300, 129, 1); /* every row the same token */
    if (tl_case_selected("embedding N=1031 C=4099 vocab=50")) test_embedding(1031, 4099, 50);

    if (tl_case_selected("rmsnorm N=1 C=1")) test_rmsnorm(1, 1);
    if (tl_case_selected("rmsnorm N=5 C=7")) test_rmsnorm(5, 7);
    if (tl_case_selected("rmsnorm N=37 C=4099")) test_rmsnorm(37, 4096 + 3);
    if (tl_case_selected("rmsnorm N=1031 C=64")) test_rmsnorm(1031, 64); /* several dweight row chunks */
    if (tl_case_selected("rmsnorm N=20001 C=3")) test_rmsnorm(20001, 3); /* > kMaxChunks * kMinChunkRows rows */

    if (tl_case_selected("rope B=1 T=1 H=1 D=2")) test_rope(1, 1, 1, 2);
    if (tl_case_selected("rope B=2 T=7 H=3 D=10")) test_rope(2, 7, 3, 10);
    if (tl_case_selected("rope B=2 T=33 H=5 D=128")) test_rope(2, 33, 5, 128);
    if (tl_case_selected("rope fused B=1 T=1 Hq=1 Hkv=1 D=2")) test_rope_fused(1, 1, 1, 1, 2);
    if (tl_case_selected("rope fused B=2 T=7 Hq=4 Hkv=2 D=16")) test_rope_fused(2, 7, 4, 2, 16);
    if (tl_case_selected("rope fused B=1 T=33 Hq=8 Hkv=1 D=128")) test_rope_fused(1, 33, 8, 1, 128);

    if (tl_case_selected("swiglu fused N=1 F=1")) test_swiglu_fused(1, 1);
    if (tl_case_selected("swiglu fused N=7 F=13")) test_swiglu_fused(7, 13);
    if (tl_case_selected("swiglu fused N=33 F=1000")) test_swiglu_fused(33, 1000);
    if (tl_case_selected("swiglu fused N=1 F=1000003")) test_swiglu_fused(1, 1000003);

    if (tl_case_selected("crossentropy rows=1 V=1")) test_crossentropy(1, 1);
    if (tl_case_selected("crossentropy rows=5 V=7")) test_crossentropy(5, 7);
    if (tl_case_selected("crossentropy rows=9 V=128256")) test_crossentropy(9, 128256);
    if (tl_case_selected("crossentropy rows=3 V=1025")) test_crossentropy(3, 1025);
    if (tl_case_selected("crossentropy fused rows=5 V=7")) test_crossentropy_fused(5, 7);
    if (tl_case_selected("crossentropy fused rows=3 V=1025")) test_crossentropy_fused(3, 1025);
    if (tl_case_selected("crossentropy fused rows=9 V=128256")) test_crossentropy_fused(9, 128256);

    if (tl_case_selected("matmul bf16r 1x1x1")) test_matmul_bf16r(1, 1, 1);
    if (tl_case_selected("matmul bf16r 7x13x5")) test_matmul_bf16r(7, 13, 5);
    if (tl_case_selected("matmul bf16r 37x4099x67")) test_matmul_bf16r(37, 4096 + 3, 67);
    if (tl_case_selected("matmul bf16r 130x64x1031")) test_matmul_bf16r(130, 64, 1031);

    if (tl_case_selected("matmul bf16 1x1x1")) test_matmul_bf16(1, 1, 1);
    if (tl_case_selected("matmul bf16 7x13x5")) test_matmul_bf16(7, 13, 5);
    if (tl_case_selected("matmul bf16 37x4099x67")) test_matmul_bf16(37, 4096 + 3, 67);
    if (tl_case_selected("matmul bf16 128x512x256")) test_matmul_bf16(128, 512, 256); /* tensor-core friendly */

#ifdef KVCPT_CUDA_EMU
    tl_skip("matmul fp32", "cuBLASLt is not emulated on the CPU; these run on a GPU only");
#else
    test_matmul(1, 1, 1, 0);
    test_matmul(7, 13, 5, 0);
    test_matmul(37, 4096 + 3, 67, 0);
    test_matmul(130, 64, 1031, 1);   /* 4-byte aligned views */
    test_matmul(64, 256, 128, 0);
#endif
    matmul_cuda_release();
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("cuda ops", "no CUDA device visible");
        return tl_finish();
    }
    run_all();
#else
    tl_skip("cuda ops", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
