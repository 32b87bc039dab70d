/* GPU parity of the evaluator's attention (kernels/attention_decode.cu)
 * against its CPU oracles (kernels/attention_decode.c): prefill statistics
 * (colsum, the last W probability rows) and one decode step over listed and
 * dense key lists, over odd shapes; NULL outputs; run-twice determinism; the
 * argument checks; and, on a real GPU only, the 8B shapes (decode over
 * 131072 keys, prefill stats at T = 4096 against the CPU, T = 32768 timed).
 *
 * Tolerances: |gpu - cpu| <= atol + atol_per_k * K + rtol * |cpu|, where K is
 * the number of terms the op sums (inputs are standard normal).
 *
 *   op        atol   atol_per_k  rtol   why
 *   colsum    1e-6   1e-8        1e-5   K = T probabilities exp(s - lse) (CPU: exp(s - max) / sum);
 *                                       fma dots vs mul + add; per-thread column partials
 *                                       added in a tree of 16 vs one running sum
 *   last      1e-7   0           2e-5   one probability: exp's relative error is the absolute
 *                                       error of s - lse, a few ulp of |s| (up to ~16 with q x 4)
 *   out       2e-6   2e-8        1e-5   K = n keys; chunked (256) max / sum rescaled by
 *                                       e^(m_c - M) vs one pass; warp-tree sums
 *   probs     1e-7   0           2e-5   exp(s - M) / Z: as last; M exact, Z a sum
 *
 * Every comparison prints its worst error relative to the allowance as a
 * "# margin" line, so GPU runs can recalibrate the table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rng.h"
#include "../testlib.h"

#ifdef KVCPT_CUDA
#include <math.h>

#include "../../common/util.h"
#include "../../kernels/attention_decode.h"
#include "../../kernels/cuda_device.h"
#include "gpu_testlib.h"

static const Tol TOL_COLSUM = {1e-6, 1e-8, 1e-5};
static const Tol TOL_LAST = {1e-7, 0, 2e-5};
static const Tol TOL_OUT = {2e-6, 2e-8, 1e-5};
static const Tol TOL_PROBS = {1e-7, 0, 2e-5};

/* untouched entries of an output keep this value on both sides */
static const float SENTINEL = -7.0f;

static Rng rng;

static float *host_normal(int64_t n) {
    float *p = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = rng_normal(&rng);
    return p;
}

static void scale_by(float *x, int64_t n, float s) {
    if (s != 0.0f)
        for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static float *host_filled(int64_t n, float v) {
    float *p = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = v;
    return p;
}

/* ------------------------------------------------------------ prefill */

typedef struct {
    const char *label;
    int64_t T, Hq, Hkv, D, W;
    int want_colsum, want_last;
    float q_scale; /* 0: 1; larger: sharper softmax rows */
} PrefillCase;

typedef struct {
    float *colsum, *last;
} PrefillOut;

/* One GPU run; the outputs start as the sentinel so that missed entries show. */
static PrefillOut prefill_gpu(const PrefillCase *c, const float *dq, const float *dk, int64_t Wc) {
    const int64_t ncol = c->Hq * c->T, nlast = c->Hq * Wc * c->T;
    float *fill_col = host_filled(ncol, SENTINEL), *fill_last = host_filled(nlast, SENTINEL);
    float *dcol = c->want_colsum ? dev_upload(fill_col, sizeof(float) * (size_t)(ncol > 0 ? ncol : 1)) : NULL;
    float *dlast = c->want_last ? dev_upload(fill_last, sizeof(float) * (size_t)(nlast > 0 ? nlast : 1)) : NULL;
    attention_prefill_stats_cuda(dcol, dlast, dq, dk, c->T, c->Hq, c->Hkv, c->D, c->W);
    cuda_synchronize();
    PrefillOut o = {dcol ? download(dcol, ncol) : NULL, dlast ? download(dlast, nlast) : NULL};
    if (dcol) cuda_free(dcol);
    if (dlast) cuda_free(dlast);
    free(fill_col), free(fill_last);
    return o;
}

static void free_prefill(PrefillOut *o) { free(o->colsum), free(o->last); }

/* Every query row is a distribution, so each head's colsum adds up to T. */
static void check_colsum_total(const char *label, const float *colsum, int64_t T, int64_t Hq) {
    double worst = 0;
    for (int64_t h = 0; h < Hq; h++) {
        double s = 0;
        for (int64_t j = 0; j < T; j++) s += colsum[h * T + j];
        const double rel = fabs(s - (double)T) / (double)T;
        worst = rel > worst ? rel : worst;
    }
    char name[256];
    snprintf(name, sizeof name, "prefill colsum adds up to T per head: %s", label);
    printf("# margin %s: worst relative error %.3g (allowed 1e-5)\n", name, worst);
    tl_result(worst <= 1e-5, name, "worst relative error %.3g", worst);
}

static void run_prefill_case(const PrefillCase *c) {
    char name[256];
    const int64_t T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D, Wc = c->W < T ? c->W : T;
    const int64_t nq = T * Hq * D, nk = T * Hkv * D, ncol = Hq * T, nlast = Hq * Wc * T;
    float *q = host_normal(nq), *k = host_normal(nk);
    scale_by(q, nq, c->q_scale);
    float *dq = dev_upload(q, sizeof(float) * (size_t)nq), *dk = dev_upload(k, sizeof(float) * (size_t)nk);
    PrefillOut ref = {c->want_colsum ? host_filled(ncol, SENTINEL) : NULL,
                      c->want_last ? host_filled(nlast, SENTINEL) : NULL};
    attention_prefill_stats_cpu(ref.colsum, ref.last, q, k, T, Hq, Hkv, D, c->W);
    PrefillOut got = prefill_gpu(c, dq, dk, Wc);
    if (c->want_colsum) {
        snprintf(name, sizeof name, "prefill colsum: %s", c->label);
        close_k(name, got.colsum, ref.colsum, ncol, TOL_COLSUM, T);
        check_colsum_total(c->label, got.colsum, T, Hq);
    }
    if (c->want_last) {
        snprintf(name, sizeof name, "prefill last %lld rows: %s", (long long)Wc, c->label);
        close_k(name, got.last, ref.last, nlast, TOL_LAST, T);
    }
    PrefillOut again = prefill_gpu(c, dq, dk, Wc);
    if (c->want_colsum) {
        snprintf(name, sizeof name, "prefill colsum rerun gives the same bits: %s", c->label);
        tl_identical(name, again.colsum, got.colsum, ncol);
    }
    if (c->want_last) {
        snprintf(name, sizeof name, "prefill last rerun gives the same bits: %s", c->label);
        tl_identical(name, again.last, got.last, nlast);
    }
    if (c->want_colsum && c->want_last) { /* without colsum only the window's lse is computed: same rows, same bits */
        PrefillCase only_last = *c;
        only_last.want_colsum = 0;
        PrefillOut lone = prefill_gpu(&only_last, dq, dk, Wc);
        snprintf(name, sizeof name, "prefill last alone equals last with colsum, bit for bit: %s", c->label);
        tl_identical(name, lone.last, got.last, nlast);
        free_prefill(&lone);
    }
    free_prefill(&again), free_prefill(&got), free_prefill(&ref);
    cuda_free(dq), cuda_free(dk);
    free(q), free(k);
}

/* ------------------------------------------------------------- decode */

/* KV head g: n[g] keys, listed (ascending, a random subset of 0..cap-1)
 * when listed[g], else dense (0..n[g]-1, off = -1). */
typedef struct {
    const char *label;
    int64_t Hq, Hkv, D, cap, max_n;
    int64_t n[4];
    int listed[4];
    float q_scale; /* 0: 1; larger: sharper softmax rows */
} DecodeCase;

typedef struct {
    int64_t off[ATTENTION_DECODE_MAX_KV_HEADS], n[ATTENTION_DECODE_MAX_KV_HEADS];
    int32_t *keys;
    int64_t total;
} KeyLists;

/* n ascending distinct positions out of 0..cap-1 (selection sampling). */
static void sample_ascending(int32_t *dst, int64_t n, int64_t cap) {
    int64_t need = n;
    for (int64_t p = 0; p < cap && need > 0; p++)
        if ((double)rng_uniform(&rng) * (double)(cap - p) < (double)need) dst[n - need--] = (int32_t)p;
}

static KeyLists make_keys(const int64_t *n, const int *listed, int64_t Hkv, int64_t cap) {
    KeyLists kl = {{0}, {0}, NULL, 0};
    for (int64_t g = 0; g < Hkv; g++) kl.total += listed[g] ? n[g] : 0;
    kl.keys = xmalloc(sizeof(int32_t) * (size_t)(kl.total > 0 ? kl.total : 1));
    int64_t at = 0;
    for (int64_t g = 0; g < Hkv; g++) {
        kl.n[g] = n[g];
        kl.off[g] = listed[g] ? at : -1;
        if (listed[g]) sample_ascending(kl.keys + at, n[g], cap), at += n[g];
    }
    return kl;
}

typedef struct {
    float *out, *probs;
} DecodeOut;

static DecodeOut decode_gpu(const DecodeCase *c, const KeyLists *kl, const float *dq, const float *dkc,
                            const float *dvc, const int32_t *dkeys, int want_probs) {
    const int64_t nout = c->Hq * c->D, nprobs = c->Hq * c->max_n;
    float *fill = host_filled(nprobs, SENTINEL);
    float *dout = cuda_malloc(sizeof(float) * (size_t)nout);
    float *dprobs = want_probs ? dev_upload(fill, sizeof(float) * (size_t)nprobs) : NULL;
    attention_decode_cuda(dout, dprobs, dq, dkc, dvc, dkeys, kl->off, kl->n, c->max_n, c->Hq, c->Hkv, c->D);
    cuda_synchronize();
    DecodeOut o = {download(dout, nout), dprobs ? download(dprobs, nprobs) : NULL};
    cuda_free(dout);
    if (dprobs) cuda_free(dprobs);
    free(fill);
    return o;
}

static void free_decode(DecodeOut *o) { free(o->out), free(o->probs); }

static void run_decode_case(const DecodeCase *c) {
    char name[256];
    const int64_t Hq = c->Hq, Hkv = c->Hkv, D = c->D, cap = c->cap;
    const int64_t nq = Hq * D, ncache = cap * Hkv * D, nprobs = Hq * c->max_n;
    int64_t longest = 0;
    for (int64_t g = 0; g < Hkv; g++) longest = c->n[g] > longest ? c->n[g] : longest;
    KeyLists kl = make_keys(c->n, c->listed, Hkv, cap);
    float *q = host_normal(nq), *kc = host_normal(ncache), *vc = host_normal(ncache);
    scale_by(q, nq, c->q_scale);
    float *dq = dev_upload(q, sizeof(float) * (size_t)nq), *dkc = dev_upload(kc, sizeof(float) * (size_t)ncache);
    float *dvc = dev_upload(vc, sizeof(float) * (size_t)ncache);
    int32_t *dkeys = dev_upload(kl.keys, sizeof(int32_t) * (size_t)(kl.total > 0 ? kl.total : 1));

    DecodeOut ref = {xmalloc(sizeof(float) * (size_t)nq), host_filled(nprobs, SENTINEL)};
    attention_decode_cpu(ref.out, ref.probs, q, kc, vc, kl.keys, kl.off, kl.n, c->max_n, Hq, Hkv, D);
    DecodeOut got = decode_gpu(c, &kl, dq, dkc, dvc, dkeys, 1);
    snprintf(name, sizeof name, "decode out: %s", c->label);
    close_k(name, got.out, ref.out, nq, TOL_OUT, longest);
    snprintf(name, sizeof name, "decode probs (entries past n[g] untouched): %s", c->label);
    close_k(name, got.probs, ref.probs, nprobs, TOL_PROBS, longest);

    DecodeOut again = decode_gpu(c, &kl, dq, dkc, dvc, dkeys, 1);
    snprintf(name, sizeof name, "decode rerun gives the same bits (out): %s", c->label);
    tl_identical(name, again.out, got.out, nq);
    snprintf(name, sizeof name, "decode rerun gives the same bits (probs): %s", c->label);
    tl_identical(name, again.probs, got.probs, nprobs);
    DecodeOut bare = decode_gpu(c, &kl, dq, dkc, dvc, dkeys, 0);
    snprintf(name, sizeof name, "decode with probs NULL gives the same out bits: %s", c->label);
    tl_identical(name, bare.out, got.out, nq);
    float *ref_bare = xmalloc(sizeof(float) * (size_t)nq);
    attention_decode_cpu(ref_bare, NULL, q, kc, vc, kl.keys, kl.off, kl.n, c->max_n, Hq, Hkv, D);
    snprintf(name, sizeof name, "decode out with probs NULL matches the CPU: %s", c->label);
    close_k(name, bare.out, ref_bare, nq, TOL_OUT, longest);

    free(ref_bare);
    free_decode(&bare), free_decode(&again), free_decode(&got), free_decode(&ref);
    cuda_free(dq), cuda_free(dkc), cuda_free(dvc), cuda_free(dkeys);
    free(q), free(kc), free(vc), free(kl.keys);
}

/* ------------------------------------------------------ argument checks */

typedef struct {
    int64_t Hq, Hkv, D, n, max_n;
} BadDecode;

/* Dies in the argument checks, before any device pointer is touched. */
static void bad_decode(void *arg) {
    const BadDecode *b = arg;
    int64_t off[ATTENTION_DECODE_MAX_KV_HEADS + 1], n[ATTENTION_DECODE_MAX_KV_HEADS + 1];
    for (int i = 0; i <= ATTENTION_DECODE_MAX_KV_HEADS; i++) off[i] = -1, n[i] = b->n;
    attention_decode_cuda(NULL, NULL, NULL, NULL, NULL, NULL, off, n, b->max_n, b->Hq, b->Hkv, b->D);
}

static void bad_prefill_dim(void *arg) {
    const int64_t *D = arg;
    attention_prefill_stats_cuda(NULL, NULL, NULL, NULL, 10, 4, 2, *D, 1);
}

static void argument_checks(void) {
    static const BadDecode big_d = {4, 2, 257, 1, 1}, many_kv = {65, 65, 64, 1, 1}, wide = {32, 1, 128, 1, 1},
                           too_long = {4, 2, 64, 9, 8}, empty = {4, 2, 64, 0, 8};
    tl_expect_death("decode: D = 257 stops with a message", bad_decode, (void *)&big_d, "head dim D");
    tl_expect_death("decode: Hkv = 65 stops with a message", bad_decode, (void *)&many_kv,
                    "ATTENTION_DECODE_MAX_KV_HEADS");
    tl_expect_death("decode: group 32 x D 128 stops with a message", bad_decode, (void *)&wide, "group * D");
    tl_expect_death("decode: n > max_n stops with a message", bad_decode, (void *)&too_long, "expected 1..max_n");
    tl_expect_death("decode: n = 0 stops with a message", bad_decode, (void *)&empty, "expected 1..max_n");
    static const int64_t d_zero = 0, d_big = 300;
    tl_expect_death("prefill: D = 0 stops with a message", bad_prefill_dim, (void *)&d_zero, "head dim D");
    tl_expect_death("prefill: D = 300 stops with a message", bad_prefill_dim, (void *)&d_big, "head dim D");
}

#ifndef KVCPT_CUDA_EMU /* the 8B shapes need a GPU's memory and speed */
static void fill_device(float *d, int64_t n, float *host) {
    for (int64_t i = 0; i < n; i++) host[i] = rng_normal(&rng);
    cuda_memcpy_h2d(d, host, sizeof(float) * (size_t)n);
}

/* Llama-3.1-8B decode over 131072 cached positions: half the KV heads
 * dense, half listing every other position; against the CPU, then timed. */
static void decode_8b(void) {
    const int64_t Hq = 32, Hkv = 8, D = 128, cap = 131072, max_n = cap;
    int64_t n[8];
    int listed[8];
    for (int g = 0; g < 8; g++) listed[g] = g % 2, n[g] = listed[g] ? cap / 2 : cap;
    KeyLists kl = {{0}, {0}, NULL, 0};
    kl.keys = xmalloc(sizeof(int32_t) * (size_t)(4 * cap / 2));
    for (int g = 0; g < 8; g++) {
        kl.n[g] = n[g];
        kl.off[g] = listed[g] ? kl.total : -1;
        if (listed[g])
            for (int64_t i = 0; i < cap / 2; i++) kl.keys[kl.total++] = (int32_t)(2 * i + (g / 2) % 2);
    }
    const int64_t ncache = cap * Hkv * D;
    float *host = xmalloc(sizeof(float) * (size_t)ncache);
    float *q = host_normal(Hq * D), *kc = xmalloc(sizeof(float) * (size_t)ncache);
    float *dq = dev_upload(q, sizeof(float) * (size_t)(Hq * D));
    float *dkc = cuda_malloc(sizeof(float) * (size_t)ncache), *dvc = cuda_malloc(sizeof(float) * (size_t)ncache);
    fill_device(dkc, ncache, kc);
    fill_device(dvc, ncache, host);
    int32_t *dkeys = dev_upload(kl.keys, sizeof(int32_t) * (size_t)kl.total);
    DecodeOut ref = {xmalloc(sizeof(float) * (size_t)(Hq * D)), host_filled(Hq * max_n, SENTINEL)};
    attention_decode_cpu(ref.out, ref.probs, q, kc, host, kl.keys, kl.off, kl.n, max_n, Hq, Hkv, D);
    const DecodeCase c = {"8B shape, n = 131072 (dense) and 65536 (listed)", Hq, Hkv, D, cap, max_n, {0}, {0}, 0};
    DecodeOut got = decode_gpu(&c, &kl, dq, dkc, dvc, dkeys, 1);
    close_k("decode out: 8B shape n = 131072 / 65536", got.out, ref.out, Hq * D, TOL_OUT, cap);
    close_k("decode probs: 8B shape n = 131072 / 65536", got.probs, ref.probs, Hq * max_n, TOL_PROBS, cap);

    float *dout = cuda_malloc(sizeof(float) * (size_t)(Hq * D)), *dprobs = cuda_malloc(4 * (size_t)(Hq * max_n));
    const int reps = 20;
    for (int with_probs = 0; with_probs < 2; with_probs++) {
        attention_decode_cuda(dout, with_probs ? dprobs : NULL, dq, dkc, dvc, dkeys, kl.off, kl.n, max_n, Hq, Hkv, D);
        cuda_synchronize();
        const double t0 = now_seconds();
        for (int r = 0; r < reps; r++)
            attention_decode_cuda(dout, with_probs ? dprobs : NULL, dq, dkc, dvc, dkeys, kl.off, kl.n, max_n, Hq, Hkv,
                                  D);
        cuda_synchronize();
        const double ms = 1e3 * (now_seconds() - t0) / reps;
        const double bytes = 2.0 * 4 * D * (4 * cap + 4 * cap / 2); /* K and V rows read */
        printf("# decode 8B shape (probs %s): %.3f ms per step, %.0f GB/s of K/V rows\n", with_probs ? "on" : "off", ms,
               bytes / (ms * 1e-3) / 1e9);
    }
    cuda_free(dout), cuda_free(dprobs);
    free_decode(&got), free_decode(&ref);
    cuda_free(dq), cuda_free(dkc), cuda_free(dvc), cuda_free(dkeys);
    free(q), free(kc), free(host), free(kl.keys);
}

/* The 8B prefill stats: against the CPU at T = 4096; timed at T = 32768
 * (colsum totals and finiteness only). */
static void prefill_8b(void) {
    const PrefillCase c = {"8B shape T=4096 W=64", 4096, 32, 8, 128, 64, 1, 1, 0};
    run_prefill_case(&c);

    const int64_t T = 32768, Hq = 32, Hkv = 8, D = 128, W = 64;
    float *host = xmalloc(sizeof(float) * (size_t)(T * Hq * D));
    float *dq = cuda_malloc(4 * (size_t)(T * Hq * D)), *dk = cuda_malloc(4 * (size_t)(T * Hkv * D));
    float *dcol = cuda_malloc(4 * (size_t)(Hq * T)), *dlast = cuda_malloc(4 * (size_t)(Hq * W * T));
    fill_device(dq, T * Hq * D, host), fill_device(dk, T * Hkv * D, host);
    attention_prefill_stats_cuda(dcol, dlast, dq, dk, T, Hq, Hkv, D, W); /* warm-up: workspace, clocks */
    cuda_synchronize();
    const double t0 = now_seconds();
    attention_prefill_stats_cuda(dcol, dlast, dq, dk, T, Hq, Hkv, D, W);
    cuda_synchronize();
    const double s = now_seconds() - t0;
    const double flops = 2.0 * 2.0 * (double)T * (double)T / 2 * Hq * D; /* two causal Q K^T passes */
    printf("# prefill stats 8B shape T=%lld W=%lld: %.3f s, %.1f TFLOP/s in the two score passes\n", (long long)T,
           (long long)W, s, flops / s / 1e12);
    cuda_memcpy_d2h(host, dcol, sizeof(float) * (size_t)(Hq * T));
    check_colsum_total("8B shape T=32768", host, T, Hq);
    cuda_memcpy_d2h(host, dlast, sizeof(float) * (size_t)(Hq * W * T));
    int finite = 1;
    for (int64_t i = 0; i < Hq * W * T; i++) finite &= isfinite(host[i]) != 0;
    tl_result(finite, "prefill stats 8B shape T=32768: last rows finite", "a NaN or inf");
    cuda_free(dq), cuda_free(dk), cuda_free(dcol), cuda_free(dlast);
    free(host);
}
#endif

static void run_all(void) {
    rng_seed(&rng, 20240917);
    /* label, T, Hq, Hkv, D, W, colsum, last, q scale (0: 1) */
    const PrefillCase prefill[] = {
        {"T=1 W=1, ratio 4, D=64", 1, 4, 1, 64, 1, 1, 1, 0},
        {"T=37 W=5, ratio 1, D=40", 37, 2, 2, 40, 5, 1, 1, 0},
        {"T=70 W=T, ratio 8, D=128", 70, 8, 1, 128, 70, 1, 1, 0},
        {"T=70 W=100 (clipped to T), ratio 4, D=64", 70, 4, 1, 64, 100, 1, 1, 0},
        {"T=130 W=1, ratio 4, D=64", 130, 4, 1, 64, 1, 1, 1, 0},
        {"T=130 last NULL, ratio 2, D=32", 130, 4, 2, 32, 3, 1, 0, 0},
        {"T=150 W=65 colsum NULL, ratio 4, D=64", 150, 4, 1, 64, 65, 0, 1, 0},
        {"T=257 W=100 (two window tiles), ratio 8, D=128, sharp (q x 4)", 257, 8, 1, 128, 100, 1, 1, 4.0f},
        /* the colsum kernel's partials table outgrows the Q/K tiles below D = 8 */
        {"T=70 W=3, ratio 2, D=4 (partials table larger than the tiles)", 70, 4, 2, 4, 3, 1, 1, 0},
        {"T=20 W=2, ratio 1, D=2", 20, 2, 2, 2, 2, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof prefill / sizeof prefill[0]; i++) run_prefill_case(&prefill[i]);

    /* label, Hq, Hkv, D, cap, max_n, n per KV head, listed per KV head, q scale (0: 1) */
    const DecodeCase decode[] = {
        {"n=1 listed, ratio 4, D=64", 4, 1, 64, 40, 3, {1}, {1}, 0},
        {"n=1 dense, ratio 1, D=128", 2, 2, 128, 8, 1, {1, 1}, {0, 0}, 0},
        {"dense n=300 and 299 (> one chunk), ratio 1, D=128", 2, 2, 128, 300, 300, {300, 299}, {0, 0}, 0},
        {"listed n=600 and 257 of 1000, ratio 8, D=128", 16, 2, 128, 1000, 640, {600, 257}, {1, 1}, 0},
        {"mixed: dense 513, listed 1, listed 256, dense 40, ratio 4, D=64",
         16,
         4,
         64,
         700,
         520,
         {513, 1, 256, 40},
         {0, 1, 1, 0},
         0},
        {"listed n=77 and dense 290, ratio 2, D=40", 4, 2, 40, 300, 300, {77, 290}, {1, 0}, 0},
        {"listed n=512 of 513, ratio 8, D=256", 8, 1, 256, 513, 512, {512}, {1}, 0},
        {"dense n=1100, listed 1025 of 1100, ratio 4, D=128, sharp (q x 4)",
         8,
         2,
         128,
         1100,
         1100,
         {1100, 1025},
         {0, 1},
         4.0f},
    };
    for (size_t i = 0; i < sizeof decode / sizeof decode[0]; i++) run_decode_case(&decode[i]);
    argument_checks();
#ifdef KVCPT_CUDA_EMU
    tl_skip("8B shapes (decode n = 131072, prefill T = 4096 and 32768)", "need a GPU, not the CPU emulator");
#else
    decode_8b();
    prefill_8b();
#endif
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("cuda attention decode", "no CUDA device visible");
        return tl_finish();
    }
    run_all();
#else
    tl_skip("cuda attention decode", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
