/* GPU parity of the RefreshKV attention ops (kernels/attention.cu) against
 * their CPU oracles (kernels/attention.c): selection, forward, backward over
 * odd shapes, the eval cache's per-row records (evict, restride) among
 * them, run-twice determinism, K = L (and restride 1) equal to the unmasked
 * run bit for bit, and the 8B layer shape at T = 16384 and 32768 (memory and finiteness
 * only; no CPU comparison at that size).
 *
 * Tolerances: |gpu - cpu| <= atol + atol_per_k * K + rtol * |cpu|, where K is
 * the number of terms the op sums (inputs are standard normal).
 *
 *   op          atol   atol_per_k  rtol   why
 *   selection   exact                     same pooled-score ranks; only a near tie at the top-K
 *                                         boundary (rounding-level) could differ
 *   out         2e-6   2e-8        1e-5   K = T keys; expf within 2 ulp of the CPU's exp
 *                                         polynomial, per-tile (online) rescaling vs one pass,
 *                                         warp-tree row sums vs 16-lane sums
 *   lse         2e-6   0           2e-6   m + log(l): a few ulp of l, |lse| ~ log T
 *   dq          5e-6   5e-8        1e-4   K = T; dS = P (dP - Dq) cancels, and Dq and P come
 *                                         from the GPU's own out and lse
 *   dk, dv      5e-6   5e-8        1e-4   K = T * (Hq / Hkv) rows summed in another order
 *
 * The comparisons print their worst error relative to the allowance as a
 * "# margin" line, so the first GPU runs can recalibrate the table. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/rng.h"
#include "../testlib.h"

#ifdef KVCPT_CUDA
#include <math.h>

#include "../../common/util.h"
#include "../../kernels/attention.h"
#include "../../kernels/attention_cuda_size.h"
#include "../../kernels/attention_rows.h"
#include "../../kernels/cuda_device.h"
#include "gpu_testlib.h"

static const Tol TOL_OUT = {2e-6, 2e-8, 1e-5};
static const Tol TOL_LSE = {2e-6, 0, 2e-6};
static const Tol TOL_DQ = {5e-6, 5e-8, 1e-4};
static const Tol TOL_DKV = {5e-6, 5e-8, 1e-4};

static Rng rng;

static float *host_normal(int64_t n) {
    float *p = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = rng_normal(&rng);
    return p;
}

static int same_ints(const char *name, const int32_t *got, const int32_t *want, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            tl_result(0, name, "entry %lld is %d, expected %d", (long long)i, got[i], want[i]);
            return 0;
        }
    tl_result(1, name, "");
    return 1;
}

typedef struct {
    const char *label;
    int64_t B, T, Hq, Hkv, D;
    RefreshMask m;
} Case;

/* Device copies of one case's inputs and outputs. */
typedef struct {
    float *q, *k, *v, *dout, *out, *lse, *dq, *dk, *dv;
    int32_t *sel;
} DevBufs;

typedef struct {
    float *out, *lse, *dq, *dk, *dv;
} HostOut;

static void dev_alloc_outputs(DevBufs *d, int64_t nq, int64_t nkv, int64_t nlse) {
    d->out = cuda_malloc(sizeof(float) * (size_t)nq), d->dq = cuda_malloc(sizeof(float) * (size_t)nq);
    d->lse = cuda_malloc(sizeof(float) * (size_t)(nlse > 0 ? nlse : 1));
    d->dk = cuda_malloc(sizeof(float) * (size_t)nkv), d->dv = cuda_malloc(sizeof(float) * (size_t)nkv);
}

static void dev_free(DevBufs *d) {
    cuda_free(d->q), cuda_free(d->k), cuda_free(d->v), cuda_free(d->dout), cuda_free(d->out), cuda_free(d->lse);
    cuda_free(d->dq), cuda_free(d->dk), cuda_free(d->dv);
    if (d->sel) cuda_free(d->sel);
}

/* Forward then backward on the device (the backward uses the device's own out and lse). */
static HostOut gpu_run(const Case *c, DevBufs *d, const RefreshMask *m) {
    const int64_t nq = c->B * c->T * c->Hq * c->D, nkv = c->B * c->T * c->Hkv * c->D, nlse = c->B * c->Hq * c->T;
    const int32_t *sel = refresh_active(m, c->T) ? d->sel : NULL;
    attention_forward_cuda(d->out, d->lse, d->q, d->k, d->v, sel, c->B, c->T, c->Hq, c->Hkv, c->D, m);
    attention_backward_cuda(d->dq, d->dk, d->dv, d->dout, d->q, d->k, d->v, d->out, d->lse, sel, c->B, c->T, c->Hq,
                            c->Hkv, c->D, m);
    cuda_synchronize();
    return (HostOut){download(d->out, nq), download(d->lse, nlse), download(d->dq, nq), download(d->dk, nkv),
                     download(d->dv, nkv)};
}

static void free_out(HostOut *h) { free(h->out), free(h->lse), free(h->dq), free(h->dk), free(h->dv); }

static void expect_identical(const char *what, const char *label, const HostOut *a, const HostOut *b, int64_t nq,
                             int64_t nkv, int64_t nlse) {
    char name[256];
    snprintf(name, sizeof name, "%s out: %s", what, label);
    tl_identical(name, a->out, b->out, nq);
    snprintf(name, sizeof name, "%s lse: %s", what, label);
    tl_identical(name, a->lse, b->lse, nlse);
    snprintf(name, sizeof name, "%s dq: %s", what, label);
    tl_identical(name, a->dq, b->dq, nq);
    snprintf(name, sizeof name, "%s dk: %s", what, label);
    tl_identical(name, a->dk, b->dk, nkv);
    snprintf(name, sizeof name, "%s dv: %s", what, label);
    tl_identical(name, a->dv, b->dv, nkv);
}

/* Per-row records (evict, restride): each row's count and its keys; the
 * entries past a record's count are unused. */
static int same_records(const char *name, const int32_t *got, const int32_t *want, int64_t rows, int64_t W) {
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *g = got + r * (1 + W), *w = want + r * (1 + W);
        for (int64_t i = 0; i <= (w[0] > 0 ? w[0] : 0); i++)
            if (g[i] != w[i]) {
                tl_result(0, name, "record %lld entry %lld is %d, expected %d", (long long)r, (long long)i, g[i], w[i]);
                return 0;
            }
    }
    tl_result(1, name, "");
    return 1;
}

static int same_selection(const char *name, const Case *c, const int32_t *got, const int32_t *want) {
    const int64_t n = c->B * c->Hkv * refresh_sel_len(&c->m, c->T);
    if (!refresh_per_row(&c->m)) return same_ints(name, got, want, n);
    return same_records(name, got, want, c->B * c->Hkv * (c->T - c->m.L), refresh_row_width(&c->m, c->T));
}

/* Selection on both sides; the CPU's choice feeds both forward passes, so a
 * selection mismatch does not hide behind the attention checks. */
static int32_t *check_selection(const Case *c, const float *q, const float *k, DevBufs *d, char *name, size_t len) {
    const int64_t nsel = c->B * c->Hkv * refresh_sel_len(&c->m, c->T);
    int32_t *want = xcalloc((size_t)nsel, sizeof(int32_t)), *got = xmalloc(sizeof(int32_t) * (size_t)nsel);
    attention_refresh_select_cpu(want, q, k, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    d->sel = cuda_malloc(sizeof(int32_t) * (size_t)nsel);
    attention_refresh_select_cuda(d->sel, d->q, d->k, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    cuda_memcpy_d2h(got, d->sel, sizeof(int32_t) * (size_t)nsel);
    snprintf(name, len, "select matches the CPU: %s", c->label);
    same_selection(name, c, got, want);
    attention_refresh_select_cuda(d->sel, d->q, d->k, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    int32_t *again = xmalloc(sizeof(int32_t) * (size_t)nsel);
    cuda_memcpy_d2h(again, d->sel, sizeof(int32_t) * (size_t)nsel);
    snprintf(name, len, "select deterministic: %s", c->label);
    same_selection(name, c, again, got);
    cuda_memcpy_h2d(d->sel, want, sizeof(int32_t) * (size_t)nsel);
    free(got), free(again);
    return want;
}

/* The selection over more keys than one block of its score kernels takes
 * (ATTN_SELECT_CHUNK_KEYS): each head's softmax from its chunks' (max, sum)
 * combined in chunk order must choose the CPU's keys, and a chunk
 * normalised by its own statistics alone must not. Selection only. */
static void selection_chunks_case(const Case *c, int plant) {
    char name[256];
    const int64_t nq = c->B * c->T * c->Hq * c->D, nkv = c->B * c->T * c->Hkv * c->D;
    const int64_t nsel = c->B * c->Hkv * refresh_sel_len(&c->m, c->T);
    const int64_t chunks = attention_select_chunks(refresh_per_row(&c->m) ? c->m.L + 1 : c->m.L);
    float *q = host_normal(nq), *k = host_normal(nkv);
    int32_t *want = xcalloc((size_t)nsel, sizeof(int32_t)), *got = xmalloc(sizeof(int32_t) * (size_t)nsel);
    attention_refresh_select_cpu(want, q, k, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    float *d_q = dev_upload(q, sizeof(float) * (size_t)nq), *d_k = dev_upload(k, sizeof(float) * (size_t)nkv);
    int32_t *d_sel = cuda_malloc(sizeof(int32_t) * (size_t)nsel);
    /* per-row records leave entries past each row's count unwritten, as the CPU's zeros */
    cuda_memset_zero(d_sel, sizeof(int32_t) * (size_t)nsel);
    attention_refresh_select_cuda(d_sel, d_q, d_k, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    cuda_memcpy_d2h(got, d_sel, sizeof(int32_t) * (size_t)nsel);
    snprintf(name, sizeof name, "select over %lld key chunks matches the CPU: %s", (long long)chunks, c->label);
    same_selection(name, c, got, want);
    /* the paper mask's top-K runs over the same key chunks; per-row records take theirs in one block */
    static const struct {
        int bug, paper_only;
        const char *what;
    } plants[] = {
        {ATTN_SELECT_BUG_CHUNK_LOCAL, 0, "each key chunk normalised by its own softmax statistics"},
        {ATTN_SELECT_BUG_TOPK_LAST_CHUNK, 1, "the top-K's radix counts summed without the last key chunk's"},
    };
    for (size_t i = 0; plant && i < sizeof plants / sizeof plants[0]; i++) {
        if (plants[i].paper_only && refresh_per_row(&c->m)) continue;
        cuda_memset_zero(d_sel, sizeof(int32_t) * (size_t)nsel);
        attention_refresh_select_planted_cuda(d_sel, d_q, d_k, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m, plants[i].bug);
        cuda_memcpy_d2h(got, d_sel, sizeof(int32_t) * (size_t)nsel);
        int64_t differ = 0;
        for (int64_t e = 0; e < nsel; e++) differ += got[e] != want[e];
        snprintf(name, sizeof name, "planted bug caught (%s): %s", plants[i].what, c->label);
        tl_result(differ > 0, name, "the planted selection equals the CPU's");
        printf("# planted %s: %lld of %lld selection entries differ\n", plants[i].what, (long long)differ,
               (long long)nsel);
    }
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_sel);
    free(q), free(k), free(want), free(got);
}

/* The tensor-core path's entry for the rows [L, T) (attention_rows.h),
 * over the whole forward's out and lse, with a planted combine bug or none;
 * out and lse downloaded. */
static void rows_run(const Case *c, DevBufs *d, int bug, float **out, float **lse) {
    const int64_t nq = c->B * c->T * c->Hq * c->D, nlse = c->B * c->Hq * c->T;
    attention_forward_cuda(d->out, d->lse, d->q, d->k, d->v, d->sel, c->B, c->T, c->Hq, c->Hkv, c->D, &c->m);
    attention_forward_rows_planted_cuda(d->out, d->lse, d->q, d->k, d->v, d->sel, c->B, c->T, c->Hq, c->Hkv, c->D,
                                        &c->m, c->m.L, c->T, bug);
    cuda_synchronize();
    *out = download(d->out, nq), *lse = download(d->lse, nlse);
}

/* The suffix rows split over key chunks (attention_suffix_chunks > 1, the
 * row-range entry only): within the forward's tolerances of the oracle,
 * the same bits when rerun, and each planted combine bug caught by the same
 * comparison. */
static void check_split_suffix(const Case *c, DevBufs *d, const HostOut *ref) {
    char name[256];
    const int64_t nq = c->B * c->T * c->Hq * c->D, nlse = c->B * c->Hq * c->T;
    const int64_t chunks = attention_suffix_chunks(&c->m, c->B, c->T, c->Hq);
    if (chunks < 2) return;
    printf("# split suffix rows: %lld chunks of %lld keys: %s\n", (long long)chunks,
           (long long)attention_suffix_chunk_keys(&c->m, c->B, c->T, c->Hq), c->label);
    float *out, *lse, *out2, *lse2;
    rows_run(c, d, ATTN_SUFFIX_OK, &out, &lse);
    snprintf(name, sizeof name, "split suffix rows: out: %s", c->label);
    close_k(name, out, ref->out, nq, TOL_OUT, c->T);
    snprintf(name, sizeof name, "split suffix rows: lse: %s", c->label);
    close_k(name, lse, ref->lse, nlse, TOL_LSE, c->T);
    rows_run(c, d, ATTN_SUFFIX_OK, &out2, &lse2);
    snprintf(name, sizeof name, "split suffix rows: rerun gives the same bits, out: %s", c->label);
    tl_identical(name, out2, out, nq);
    snprintf(name, sizeof name, "split suffix rows: rerun gives the same bits, lse: %s", c->label);
    tl_identical(name, lse2, lse, nlse);
    free(out2), free(lse2);
    static const struct {
        int bug;
        const char *what;
    } plants[] = {{ATTN_SUFFIX_BUG_DROP_LAST_CHUNK, "last chunk dropped"},
                  {ATTN_SUFFIX_BUG_NEXT_MAX, "chunk c weighed by chunk c + 1's max"}};
    for (size_t i = 0; i < sizeof plants / sizeof plants[0]; i++) {
        rows_run(c, d, plants[i].bug, &out2, &lse2);
        const double r =
            worst_ratio(out2, ref->out, nq, TOL_OUT.atol + TOL_OUT.atol_per_k * (double)c->T, TOL_OUT.rtol);
        snprintf(name, sizeof name, "split suffix rows: planted combine bug caught (%s): %s", plants[i].what, c->label);
        tl_result(r > 1.0, name, "its worst out error is only %.3g of the allowance", r);
        printf("# planted %s: worst out error %.3g of the allowance\n", plants[i].what, r);
        free(out2), free(lse2);
    }
    free(out), free(lse);
}

static void run_case(const Case *c) {
    char name[256];
    const int64_t B = c->B, T = c->T, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    const int64_t nq = B * T * Hq * D, nkv = B * T * Hkv * D, nlse = B * Hq * T;
    const int active = refresh_active(&c->m, T);
    float *q = host_normal(nq), *k = host_normal(nkv), *v = host_normal(nkv), *dout = host_normal(nq);
    DevBufs d = {0};
    d.q = dev_upload(q, sizeof(float) * (size_t)nq), d.k = dev_upload(k, sizeof(float) * (size_t)nkv);
    d.v = dev_upload(v, sizeof(float) * (size_t)nkv), d.dout = dev_upload(dout, sizeof(float) * (size_t)nq);
    dev_alloc_outputs(&d, nq, nkv, nlse);
    int32_t *sel = active ? check_selection(c, q, k, &d, name, sizeof name) : NULL;

    HostOut ref = {xmalloc(sizeof(float) * (size_t)nq), xmalloc(sizeof(float) * (size_t)(nlse > 0 ? nlse : 1)),
                   xmalloc(sizeof(float) * (size_t)nq), xmalloc(sizeof(float) * (size_t)nkv),
                   xmalloc(sizeof(float) * (size_t)nkv)};
    attention_forward_cpu(ref.out, ref.lse, q, k, v, sel, B, T, Hq, Hkv, D, &c->m);
    attention_backward_cpu(ref.dq, ref.dk, ref.dv, dout, q, k, v, ref.out, ref.lse, sel, B, T, Hq, Hkv, D, &c->m);
    HostOut got = gpu_run(c, &d, &c->m);
    snprintf(name, sizeof name, "forward out: %s", c->label);
    close_k(name, got.out, ref.out, nq, TOL_OUT, T);
    snprintf(name, sizeof name, "forward lse: %s", c->label);
    close_k(name, got.lse, ref.lse, nlse, TOL_LSE, T);
    snprintf(name, sizeof name, "backward dq: %s", c->label);
    close_k(name, got.dq, ref.dq, nq, TOL_DQ, T);
    snprintf(name, sizeof name, "backward dk: %s", c->label);
    close_k(name, got.dk, ref.dk, nkv, TOL_DKV, T * (Hq / Hkv));
    snprintf(name, sizeof name, "backward dv: %s", c->label);
    close_k(name, got.dv, ref.dv, nkv, TOL_DKV, T * (Hq / Hkv));

    HostOut again = gpu_run(c, &d, &c->m);
    expect_identical("rerun gives the same bits,", c->label, &again, &got, nq, nkv, nlse);
    free_out(&again);
    /* every prefill key kept (the paper's rows with K = L) or every row full
     * (restride 1): the unmasked run, bit for bit */
    if (active && ((!refresh_per_row(&c->m) && c->m.K >= c->m.L) || c->m.restride == 1)) {
        RefreshMask off = c->m;
        off.enabled = 0;
        HostOut causal = gpu_run(c, &d, &off);
        expect_identical("K = L or restride 1 equals the unmasked GPU run,", c->label, &got, &causal, nq, nkv, nlse);
        free_out(&causal);
    }
    if (active) check_split_suffix(c, &d, &ref);
    free_out(&got), free_out(&ref);
    dev_free(&d);
    free(q), free(k), free(v), free(dout), free(sel);
}

#ifndef KVCPT_CUDA_EMU /* the 8B-shape checks need a GPU's memory and speed */
static int all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static void fill_device(float *d, int64_t n, float *host) {
    for (int64_t i = 0; i < n; i++) host[i] = rng_normal(&rng);
    cuda_memcpy_h2d(d, host, sizeof(float) * (size_t)n);
}

static void expect_finite(const char *what, const float *d, int64_t n, int64_t T, float *host) {
    char name[160];
    cuda_memcpy_d2h(host, d, sizeof(float) * (size_t)n);
    snprintf(name, sizeof name, "8B layer T=%lld: %s finite", (long long)T, what);
    tl_result(all_finite(host, n), name, "a NaN or inf among %lld values", (long long)n);
}

/* The Llama-3.1-8B layer shape with the paper's mask (S = 50, K = 2048):
 * runs to completion (an allocation failure stops the binary, which counts
 * as a failure) and gives finite outputs and an ascending selection. */
/* Per-row records: a full row exactly where restride puts one, else
 * refresh_row_count keys, ascending, ending at the row itself. */
static int records_valid(const int32_t *sel, const RefreshMask *m, int64_t BG, int64_t T) {
    const int64_t W = refresh_row_width(m, T), per = refresh_sel_len(m, T);
    for (int64_t g = 0; g < BG; g++)
        for (int64_t p = m->L; p < T; p++) {
            const int32_t *rec = sel + g * per + (p - m->L) * (1 + W);
            const int full = m->restride > 0 && (p - m->L + 1) % m->restride == 0;
            if (full != (rec[0] == 0) || (!full && (rec[0] != refresh_row_count(m, p) || rec[rec[0]] != p))) return 0;
            for (int32_t i = 2; i <= rec[0]; i++)
                if (rec[i] <= rec[i - 1] || rec[i - 1] < 0) return 0;
        }
    return 1;
}

static void run_8b_shape(int64_t T, int evict, int64_t restride) {
    const int64_t B = 1, Hq = 32, Hkv = 8, D = 128, nq = B * T * Hq * D, nkv = B * T * Hkv * D;
    const RefreshMask m = {.enabled = 1,
                           .L = T - 50,
                           .K = 2048,
                           .pool_kernel = 7,
                           .agg = GROUP_AGG_MAX,
                           .evict = evict,
                           .restride = restride};
    const int64_t ks = refresh_num_selected(&m), nsel = B * Hkv * refresh_sel_len(&m, T);
    float *host = xmalloc(sizeof(float) * (size_t)nq);
    float *q = cuda_malloc(4 * (size_t)nq), *k = cuda_malloc(4 * (size_t)nkv), *v = cuda_malloc(4 * (size_t)nkv);
    float *dout = cuda_malloc(4 * (size_t)nq), *out = cuda_malloc(4 * (size_t)nq), *dq = cuda_malloc(4 * (size_t)nq);
    float *lse = cuda_malloc(4 * (size_t)(B * Hq * T)), *dk = cuda_malloc(4 * (size_t)nkv),
          *dv = cuda_malloc(4 * (size_t)nkv);
    int32_t *sel = cuda_malloc(4 * (size_t)nsel);
    fill_device(q, nq, host), fill_device(k, nkv, host), fill_device(v, nkv, host), fill_device(dout, nq, host);

    cuda_synchronize();
    double t0 = now_seconds();
    attention_refresh_select_cuda(sel, q, k, B, T, Hq, Hkv, D, &m);
    cuda_synchronize();
    double t1 = now_seconds();
    attention_forward_cuda(out, lse, q, k, v, sel, B, T, Hq, Hkv, D, &m);
    cuda_synchronize();
    double t2 = now_seconds();
    attention_backward_cuda(dq, dk, dv, dout, q, k, v, out, lse, sel, B, T, Hq, Hkv, D, &m);
    cuda_synchronize();
    double t3 = now_seconds();
    printf("# 8B layer T=%lld (L=%lld, K=%lld, evict %d, restride %lld): select %.1f ms, forward %.1f ms, backward "
           "%.1f ms\n",
           (long long)T, (long long)m.L, (long long)m.K, evict, (long long)restride, 1e3 * (t1 - t0), 1e3 * (t2 - t1),
           1e3 * (t3 - t2));

    int32_t *hsel = xmalloc(sizeof(int32_t) * (size_t)nsel);
    cuda_memcpy_d2h(hsel, sel, sizeof(int32_t) * (size_t)nsel);
    int ascending = 1;
    if (refresh_per_row(&m)) ascending = records_valid(hsel, &m, B * Hkv, T);
    else
        for (int64_t g = 0; g < B * Hkv; g++)
            for (int64_t i = 0; i < ks; i++) {
                int32_t p = hsel[g * ks + i];
                if (p < 0 || p >= m.L || (i > 0 && p <= hsel[g * ks + i - 1])) ascending = 0;
            }
    char name[200];
    snprintf(name, sizeof name, "8B layer T=%lld evict %d restride %lld: selection ascending (records well formed)",
             (long long)T, evict, (long long)restride);
    tl_result(ascending, name, "");
    expect_finite("out", out, nq, T, host);
    expect_finite("lse", lse, B * Hq * T, T, host);
    expect_finite("dq", dq, nq, T, host);
    expect_finite("dk", dk, nkv, T, host);
    expect_finite("dv", dv, nkv, T, host);
    cuda_free(q), cuda_free(k), cuda_free(v), cuda_free(dout), cuda_free(out), cuda_free(dq), cuda_free(lse);
    cuda_free(dk), cuda_free(dv), cuda_free(sel);
    free(host), free(hsel);
}

#endif

static void run_all(void) {
    rng_seed(&rng, 20240611);
    /* label, B, T, Hq, Hkv, D, {enabled, L, K, pool_kernel, agg, evict, restride} */
    const Case cases[] = {
        {"T=1 causal, D=16, ratio 4",
         2,
         1,
         4,
         1,
         16,
         {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX}},
        {"T=7 L=6 (S=1) K=3, ratio 1, D=32",
         2,
         7,
         4,
         4,
         32,
         {.enabled = 1, .L = 6, .K = 3, .pool_kernel = 3, .agg = GROUP_AGG_MAX}},
        {"T=100 L=60 K=10 (< tile), ratio 4, D=64",
         2,
         100,
         8,
         2,
         64,
         {.enabled = 1, .L = 60, .K = 10, .pool_kernel = 7, .agg = GROUP_AGG_MAX}},
        {"T=257 L=207 K=L, ratio 8, D=128, mean",
         2,
         257,
         8,
         1,
         128,
         {.enabled = 1, .L = 207, .K = 207, .pool_kernel = 7, .agg = GROUP_AGG_MEAN}},
        {"T=257 causal, ratio 8, D=128",
         2,
         257,
         8,
         1,
         128,
         {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX}},
        {"T=257 L=200 K=100 (> tile), ratio 8, D=64, first, pool 5",
         2,
         257,
         16,
         2,
         64,
         {.enabled = 1, .L = 200, .K = 100, .pool_kernel = 5, .agg = GROUP_AGG_FIRST}},
        {"T=130 L=129 (S=1) K=70, ratio 4, D=16, mean",
         2,
         130,
         8,
         2,
         16,
         {.enabled = 1, .L = 129, .K = 70, .pool_kernel = 7, .agg = GROUP_AGG_MEAN}},
        {"T=100 L=100 (mask inactive), ratio 4, D=32",
         2,
         100,
         4,
         1,
         32,
         {.enabled = 1, .L = 100, .K = 30, .pool_kernel = 7, .agg = GROUP_AGG_MAX}},
        {"T=300 L=40 (refresh rows span tiles) K=20, ratio 4, D=64",
         2,
         300,
         8,
         2,
         64,
         {.enabled = 1, .L = 40, .K = 20, .pool_kernel = 7, .agg = GROUP_AGG_MAX}},
        {"T=70 L=1 K=1, ratio 2, D=32, no pooling",
         2,
         70,
         4,
         2,
         32,
         {.enabled = 1, .L = 1, .K = 1, .pool_kernel = 1, .agg = GROUP_AGG_MAX}},
        {"T=65 L=40 K=5, ratio 2, D=8",
         2,
         65,
         4,
         2,
         8,
         {.enabled = 1, .L = 40, .K = 5, .pool_kernel = 7, .agg = GROUP_AGG_MAX}},
        /* the eval cache's mask: per-row records */
        {"evict T=100 L=60 K=10 (S > K: local keys evicted), ratio 4, D=64",
         2,
         100,
         8,
         2,
         64,
         {.enabled = 1, .L = 60, .K = 10, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1}},
        {"restride 10 T=130 L=100 K=20, ratio 4, D=32, mean",
         2,
         130,
         8,
         2,
         32,
         {.enabled = 1, .L = 100, .K = 20, .pool_kernel = 5, .agg = GROUP_AGG_MEAN, .restride = 10}},
        {"evict restride 25 T=200 L=40 K=20 (rows span tiles), ratio 2, D=16",
         1,
         200,
         4,
         2,
         16,
         {.enabled = 1, .L = 40, .K = 20, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 25}},
        {"evict restride 3 T=50 L=40 K=L, ratio 2, D=8, first, pool 3",
         2,
         50,
         4,
         2,
         8,
         {.enabled = 1, .L = 40, .K = 40, .pool_kernel = 3, .agg = GROUP_AGG_FIRST, .evict = 1, .restride = 3}},
        {"restride 1 (every row full) T=70 L=40 K=5, ratio 2, D=32",
         2,
         70,
         4,
         2,
         32,
         {.enabled = 1, .L = 40, .K = 5, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .restride = 1}},
        {"evict T=257 L=200 K=100 (> tile), ratio 8, D=128",
         1,
         257,
         8,
         1,
         128,
         {.enabled = 1, .L = 200, .K = 100, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1}},
        /* smaller twins of the three largest cases, which the schedule-order
         * and race runs take (tests/cuda_emu/test_cuda_emu_orders.sh and _races.sh):
         * the same kernels and paths (refresh rows over several tiles, causal
         * D=128 over three, K over a tile) at a tenth of the emulator's time */
        {"T=130 L=40 (refresh rows span tiles) K=20, ratio 4, D=64, one sequence",
         1,
         130,
         8,
         2,
         64,
         {.enabled = 1, .L = 40, .K = 20, .pool_kernel = 7, .agg = GROUP_AGG_MAX}},
        {"T=130 causal (3 tiles), ratio 8, D=128, one sequence",
         1,
         130,
         8,
         1,
         128,
         {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX}},
        {"T=200 L=140 K=100 (> tile), ratio 8, D=64, first, pool 5, one sequence",
         1,
         200,
         16,
         2,
         64,
         {.enabled = 1, .L = 140, .K = 100, .pool_kernel = 5, .agg = GROUP_AGG_FIRST}},
        /* evict restride 25 at T 100: refresh rows 40..99 cross the first
         * tile's end, full rows 64 and 89 (from 0) re-select in the second; the
         * per-row selection grows with T squared, a quarter of T 200's */
        {"evict restride 25 T=100 L=40 K=20 (rows span tiles), ratio 2, D=16",
         1,
         100,
         4,
         2,
         16,
         {.enabled = 1, .L = 40, .K = 20, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 25}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (tl_case_selected(cases[i].label)) run_case(&cases[i]);
    /* the selection alone over several chunks of its score kernels' keys */
    const struct {
        Case c;
        int plant;
    } select_cases[] = {
        {{"select: T=1300 L=1290 K=100 pool 7, ratio 4, D=16",
          2,
          1300,
          8,
          2,
          16,
          {.enabled = 1, .L = 1290, .K = 100, .pool_kernel = 7, .agg = GROUP_AGG_MAX}},
         1},
        {{"select: T=1104 L=1100 K=200 pool 3, ratio 2, D=32, mean",
          1,
          1104,
          4,
          2,
          32,
          {.enabled = 1, .L = 1100, .K = 200, .pool_kernel = 3, .agg = GROUP_AGG_MEAN}},
         0},
        {{"select: evict restride 5 T=1212 L=1200 K=50, ratio 4, D=16",
          1,
          1212,
          4,
          1,
          16,
          {.enabled = 1, .L = 1200, .K = 50, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 5}},
         1},
    };
    for (size_t i = 0; i < sizeof select_cases / sizeof select_cases[0]; i++)
        if (tl_case_selected(select_cases[i].c.label)) selection_chunks_case(&select_cases[i].c, select_cases[i].plant);
#ifdef KVCPT_CUDA_EMU
    tl_skip("8B layer shape at T = 16384 and 32768 (and with evict, restride 10 at 16384)",
            "memory and time checks need a GPU, not the CPU emulator");
#else
    run_8b_shape(16384, 0, 0);
    run_8b_shape(32768, 0, 0);
    run_8b_shape(16384, 1, 10); /* the eval cache's mask: per-row records */
#endif
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("cuda attention", "no CUDA device visible");
        return tl_finish();
    }
    run_all();
#else
    tl_skip("cuda attention", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
