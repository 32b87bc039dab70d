/* Finite-difference checks of every CPU op's backward: for y = op(x) and a
 * fixed random r, the analytic d(sum r*y)/dx must match central differences. */
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../kernels/attention.h"
#include "../../kernels/crossentropy.h"
#include "../../kernels/embedding.h"
#include "../../kernels/matmul.h"
#include "../../kernels/rmsnorm.h"
#include "../../kernels/rope.h"
#include "../../kernels/swiglu.h"
#include "../testlib.h"

#define H_STEP 1e-3f
#define ATOL 2e-3
#define RTOL 2e-2

static Rng rng;

static float *randn(int64_t n, float std) {
    float *p = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) p[i] = std * rng_normal(&rng);
    return p;
}

static double weighted_sum(const float *y, const float *r, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)y[i] * r[i];
    return s;
}

/* f(ctx) recomputes the forward from the current inputs and returns sum r*y */
typedef double (*Objective)(void *ctx);

/* Compares analytic gradient g (for input x) with central differences on
 * up to `samples` evenly spread elements. */
static void fd_check(const char *name, Objective f, void *ctx, float *x, const float *g, int64_t n, int samples) {
    float *num = xmalloc(sizeof(float) * (size_t)samples), *ana = xmalloc(sizeof(float) * (size_t)samples);
    int k = 0;
    for (int64_t i = 0; i < n && k < samples; i += (n + samples - 1) / samples, k++) {
        float keep = x[i];
        x[i] = keep + H_STEP;
        double fp = f(ctx);
        x[i] = keep - H_STEP;
        double fm = f(ctx);
        x[i] = keep;
        num[k] = (float)((fp - fm) / (2.0 * H_STEP));
        ana[k] = g[i];
    }
    tl_close(name, ana, num, k, ATOL, RTOL);
    free(num);
    free(ana);
}

/* ---- rmsnorm ---- */
typedef struct {
    float *x, *w, *y, *rstd, *r;
    int64_t N, C;
} NormCtx;
static double norm_f(void *p) {
    NormCtx *c = p;
    rmsnorm_forward_cpu(c->y, c->rstd, c->x, c->w, c->N, c->C, 1e-5f);
    return weighted_sum(c->y, c->r, c->N * c->C);
}
static void check_rmsnorm(void) {
    NormCtx c = {randn(5 * 24, 1), randn(24, 1), xmalloc(5 * 24 * 4), xmalloc(5 * 4), randn(5 * 24, 1), 5, 24};
    float *dx = xcalloc(5 * 24, 4), *dw = xcalloc(24, 4);
    norm_f(&c);
    rmsnorm_backward_cpu(dx, dw, c.r, c.x, c.w, c.rstd, c.N, c.C);
    fd_check("rmsnorm dinp", norm_f, &c, c.x, dx, 5 * 24, 60);
    fd_check("rmsnorm dweight", norm_f, &c, c.w, dw, 24, 24);
}

/* ---- matmul ---- */
typedef struct {
    float *x, *w, *y, *r;
    int64_t N, IC, OC;
} MmCtx;
static double mm_f(void *p) {
    MmCtx *c = p;
    matmul_forward_cpu(c->y, c->x, c->w, c->N, c->IC, c->OC);
    return weighted_sum(c->y, c->r, c->N * c->OC);
}
static void check_matmul(void) {
    MmCtx c = {randn(7 * 9, 1), randn(5 * 9, 1), xmalloc(7 * 5 * 4), randn(7 * 5, 1), 7, 9, 5};
    float *dx = xcalloc(7 * 9, 4), *dw = xcalloc(5 * 9, 4);
    mm_f(&c);
    matmul_backward_cpu(dx, dw, c.r, c.x, c.w, c.N, c.IC, c.OC);
    fd_check("matmul dinp", mm_f, &c, c.x, dx, 7 * 9, 63);
    fd_check("matmul dweight", mm_f, &c, c.w, dw, 5 * 9, 45);
}

/* ---- swiglu: rows [gate (F) | up (F)] ---- */
typedef struct {
    float *gu, *h, *r;
    int64_t N, F;
} SwCtx;
static double sw_f(void *p) {
    SwCtx *c = p;
    swiglu_fused_forward_cpu(c->h, c->gu, c->N, c->F);
    return weighted_sum(c->h, c->r, c->N * c->F);
}
static void check_swiglu(void) {
    SwCtx c = {randn(5 * 2 * 10, 2), xmalloc(5 * 10 * 4), randn(5 * 10, 1), 5, 10};
    float *dgu = xmalloc(5 * 2 * 10 * 4);
    sw_f(&c);
    swiglu_fused_backward_cpu(dgu, c.r, c.gu, c.N, c.F);
    fd_check("swiglu dgate|dup", sw_f, &c, c.gu, dgu, 5 * 2 * 10, 100);
}

/* ---- rope (llama3 rule) ---- */
typedef struct {
    float *x, *y, *r, *cs, *sn;
    int64_t B, T, H, D;
} RopeCtx;
static double rope_f(void *p) {
    RopeCtx *c = p;
    int64_t n = c->B * c->T * c->H * c->D;
    memcpy(c->y, c->x, sizeof(float) * (size_t)n);
    rope_forward_cpu(c->y, c->cs, c->sn, c->B, c->T, c->H, c->D);
    return weighted_sum(c->y, c->r, n);
}
static void check_rope(void) {
    int64_t B = 2, T = 6, H = 3, D = 8, n = B * T * H * D;
    RopeParams rp = {.theta = 500000.0,
                     .s = {.type = ROPE_LINEAR,
                           .factor = 8.0,
                           .low_freq_factor = 1.0,
                           .high_freq_factor = 4.0,
                           .original_max_pos = 64}};
    RopeCtx c = {randn(n, 1),
                 xmalloc(sizeof(float) * n),
                 randn(n, 1),
                 xmalloc(4 * T * D / 2),
                 xmalloc(4 * T * D / 2),
                 B,
                 T,
                 H,
                 D};
    rope_table(c.cs, c.sn, T, D, &rp);
    rope_f(&c);
    float *dx = xmalloc(sizeof(float) * n);
    memcpy(dx, c.r, sizeof(float) * n);
    rope_backward_cpu(dx, c.cs, c.sn, B, T, H, D);
    fd_check("rope dinp", rope_f, &c, c.x, dx, n, 100);
}

/* ---- embedding ---- */
typedef struct {
    float *wte, *y, *r;
    int32_t *tok;
    int64_t N, C;
} EmbCtx;
static double emb_f(void *p) {
    EmbCtx *c = p;
    embedding_forward_cpu(c->y, c->tok, c->wte, c->N, c->C);
    return weighted_sum(c->y, c->r, c->N * c->C);
}
static void check_embedding(void) {
    int32_t tok[6] = {3, 1, 3, 0, 4, 3}; /* repeated ids must accumulate */
    EmbCtx c = {randn(5 * 4, 1), xmalloc(6 * 4 * 4), randn(6 * 4, 1), tok, 6, 4};
    float *dw = xcalloc(5 * 4, 4);
    emb_f(&c);
    embedding_backward_cpu(dw, c.r, tok, 6, 4);
    fd_check("embedding dweight", emb_f, &c, c.wte, dw, 20, 20);
}

/* ---- cross-entropy (with an ignored row) ---- */
typedef struct {
    float *z, *loss, *lse;
    int32_t *tgt;
    int64_t R, V;
} CeCtx;
static double ce_f(void *p) {
    CeCtx *c = p;
    crossentropy_forward_cpu(c->loss, c->lse, c->z, c->tgt, c->R, c->V);
    double s = 0;
    for (int64_t i = 0; i < c->R; i++) s += c->loss[i];
    return s * 0.5; /* scale as the model's 1/n_targets does */
}
static void check_crossentropy(void) {
    int32_t tgt[4] = {2, -1, 0, 6};
    CeCtx c = {randn(4 * 7, 2), xmalloc(16), xmalloc(16), tgt, 4, 7};
    ce_f(&c);
    float *dz = xmalloc(4 * 7 * 4);
    memcpy(dz, c.z, 4 * 7 * 4);
    crossentropy_backward_cpu(dz, c.lse, tgt, 4, 7, 0.5f);
    fd_check("crossentropy dlogits", ce_f, &c, c.z, dz, 28, 28);
}

/* ---- attention, causal and with the RefreshKV mask (selection frozen) ---- */
typedef struct {
    float *q, *k, *v, *o, *lse, *r;
    int32_t *sel;
    int64_t B, T, Hq, Hkv, D;
    RefreshMask m;
} AttCtx;
static double att_f(void *p) {
    AttCtx *c = p;
    attention_forward_cpu(c->o, c->lse, c->q, c->k, c->v, c->sel, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    return weighted_sum(c->o, c->r, c->B * c->T * c->Hq * c->D);
}
static void check_attention(const char *tag, RefreshMask m, int64_t Hq, int64_t Hkv) {
    int64_t B = 2, T = 14, D = 4, nq = B * T * Hq * D, nk = B * T * Hkv * D;
    AttCtx c = {randn(nq, 1),
                randn(nk, 1),
                randn(nk, 1),
                xmalloc(4 * nq),
                xmalloc(4 * B * Hq * T),
                randn(nq, 1),
                NULL,
                B,
                T,
                Hq,
                Hkv,
                D,
                m};
    if (refresh_active(&m, T)) {
        c.sel = xmalloc(sizeof(int32_t) * B * Hkv * refresh_sel_len(&m, T));
        attention_refresh_select_cpu(c.sel, c.q, c.k, B, T, Hq, Hkv, D, &m);
    }
    att_f(&c);
    float *dq = xmalloc(4 * nq), *dk = xmalloc(4 * nk), *dv = xmalloc(4 * nk);
    attention_backward_cpu(dq, dk, dv, c.r, c.q, c.k, c.v, c.o, c.lse, c.sel, B, T, Hq, Hkv, D, &m);
    char name[96];
    snprintf(name, sizeof name, "attention %s dq", tag);
    fd_check(name, att_f, &c, c.q, dq, nq, 120);
    snprintf(name, sizeof name, "attention %s dk", tag);
    fd_check(name, att_f, &c, c.k, dk, nk, 120);
    snprintf(name, sizeof name, "attention %s dv", tag);
    fd_check(name, att_f, &c, c.v, dv, nk, 120);
}

int main(void) {
    rng_seed(&rng, 1234);
    check_rmsnorm();
    check_matmul();
    check_swiglu();
    check_rope();
    check_embedding();
    check_crossentropy();
    RefreshMask causal = {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX};
    RefreshMask masked = {.enabled = 1,
                          .L = 10,
                          .K = 3,
                          .pool_kernel = 3,
                          .agg = GROUP_AGG_MAX}; /* T = 14: 4 refresh rows, 3 of 10 prefill keys */
    check_attention("causal MHA", causal, 2, 2);
    check_attention("causal GQA 4:1", causal, 4, 1);
    check_attention("masked GQA 2:1", masked, 4, 2);
    masked.agg = GROUP_AGG_MEAN;
    check_attention("masked GQA mean", masked, 4, 2);
    /* the eval cache's keys: K 3 covers kept and local keys (rows 10..13
     * keep 3, 2, 1, 0 selected keys); restride 2 makes rows 11 and 13 full
     * rows that re-select */
    RefreshMask evict = {.enabled = 1, .L = 10, .K = 3, .pool_kernel = 3, .agg = GROUP_AGG_MAX, .evict = 1};
    check_attention("evict GQA 2:1", evict, 4, 2);
    evict.restride = 2;
    check_attention("evict + restride 2 GQA 2:1", evict, 4, 2);
    evict.evict = 0;
    check_attention("restride 2 without evict GQA 2:1", evict, 4, 2);
    return tl_finish();
}
