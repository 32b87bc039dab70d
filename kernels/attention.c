#include "attention.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/checked.h"
#include "../common/util.h"
#include "bf16.h"
#include "blas.h"
#include "dot_lanes.h"
#include "vector_math.h"

/* A plain left-to-right dot product (the backward's rowsum(dout * out)). */
static inline float dot(const float *a, const float *b, int64_t D) {
    float s = 0.0f;
    for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

static int by_pos(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Group-aggregated, max-pooled scores of query n-1 over keys 0..n-1 (n = L:
 * the selection at the end of the prefill; n = p + 1: a full row's), each
 * step the eval's (kernels/refresh_select.h). Scratch: agg and p, n floats. */
static void selection_scores(float *pooled, float *agg, float *p, const float *q, const float *k, int64_t b, int64_t g,
                             int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m, int64_t n) {
    int64_t group = Hq / Hkv, nh = refresh_selection_heads(m, Hq, Hkv);
    float scale = 1.0f / sqrtf((float)D);
    const float *kbase = k + (b * T * Hkv + g) * D;
    for (int64_t hh = 0; hh < nh; hh++) {
        int64_t h = g * group + hh;
        select_softmax_row(p, q + ((b * T + n - 1) * Hq + h) * D, kbase, Hkv * D, n, D, scale);
        select_group_fold(agg, p, n, hh, m->agg);
    }
    select_group_finish(agg, n, group, m->agg);
    select_max_pool(pooled, agg, n, m->pool_kernel);
}

/* The selection from query n-1 over keys 0..n-1: its min(K, n) entries into
 * kept, in retention order (its first c entries are what c slots keep).
 * Scratch: pooled 3 n floats, order n entries. Returns the count. */
static int64_t ranked_selection(SelectRanked *kept, float *pooled, SelectRanked *order, const float *q, const float *k,
                                int64_t b, int64_t g, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                                const RefreshMask *m, int64_t n) {
    selection_scores(pooled, pooled + n, pooled + 2 * n, q, k, b, g, T, Hq, Hkv, D, m, n);
    int64_t nk = select_top_k(order, pooled, n, m->K); /* top-K: ties to the lower index */
    memcpy(kept, order, sizeof(SelectRanked) * (size_t)nk);
    select_sort_retention(kept, nk);
    return nk;
}

/* The records of one (batch row, KV head) for rows L..T-1 (attention.h):
 * the eval's partial cache replayed row by row. Within an epoch the cache
 * only evicts, in a fixed order, so row p's kept set is the first c entries
 * of the retention order, c = min(nk, max(0, K - (p - since))). */
static void select_rows(int32_t *rec, SelectRanked *kept, float *pooled, SelectRanked *order, const float *q,
                        const float *k, int64_t b, int64_t g, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                        const RefreshMask *m) {
    int64_t L = m->L, W = refresh_row_width(m, T);
    int64_t nk = ranked_selection(kept, pooled, order, q, k, b, g, T, Hq, Hkv, D, m, L), since = L;
    for (int64_t p = L; p < T; p++) {
        int32_t *row = rec + (p - L) * (1 + W);
        if (refresh_full_row(m, p)) {
            row[0] = 0; /* full row: every key 0..p, then the cache is re-selected from it */
            nk = ranked_selection(kept, pooled, order, q, k, b, g, T, Hq, Hkv, D, m, p + 1);
            since = p + 1;
            continue;
        }
        int64_t c, first_local;
        refresh_row_span(m, p, since, nk, &c, &first_local);
        int32_t *keys = row + 1;
        for (int64_t i = 0; i < c; i++) keys[i] = kept[i].pos;
        qsort(keys, (size_t)c, sizeof(int32_t), by_pos); /* all kept keys precede since */
        int64_t n = c;
        for (int64_t j = first_local; j <= p; j++) keys[n++] = (int32_t)j;
        row[0] = (int32_t)n;
    }
}

void attention_refresh_select_cpu(int32_t *sel, const float *q, const float *k, int64_t B, int64_t T, int64_t Hq,
                                  int64_t Hkv, int64_t D, const RefreshMask *m) {
    int64_t L = m->L, ks = refresh_num_selected(m);
    if (refresh_per_row(m)) {
        int64_t per = refresh_sel_len(m, T);
#pragma omp parallel
        {
            float *pooled = xmalloc(sizeof(float) * (size_t)T * 3);
            SelectRanked *order = xmalloc(sizeof(SelectRanked) * (size_t)T);
            SelectRanked *kept = xmalloc(sizeof(SelectRanked) * (size_t)T);
#pragma omp for collapse(2) schedule(static)
            for (int64_t b = 0; b < B; b++)
                for (int64_t g = 0; g < Hkv; g++)
                    select_rows(sel + (b * Hkv + g) * per, kept, pooled, order, q, k, b, g, T, Hq, Hkv, D, m);
            free(pooled);
            free(order);
            free(kept);
        }
        return;
    }
#pragma omp parallel
    {
        float *pooled = xmalloc(sizeof(float) * (size_t)L * 3);
        SelectRanked *order = xmalloc(sizeof(SelectRanked) * (size_t)L);
        SelectRanked *kept = xmalloc(sizeof(SelectRanked) * (size_t)L);
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t g = 0; g < Hkv; g++) {
                int32_t *out = sel + (b * Hkv + g) * ks;
                if (ks == L) { /* every prefill key: no scores needed */
                    for (int64_t j = 0; j < L; j++) out[j] = (int32_t)j;
                    continue;
                }
                ranked_selection(kept, pooled, order, q, k, b, g, T, Hq, Hkv, D, m, L);
                for (int64_t j = 0; j < ks; j++) out[j] = kept[j].pos;
                qsort(out, (size_t)ks, sizeof(int32_t), by_pos);
            }
        free(pooled);
        free(order);
        free(kept);
    }
}

/* The row loops are compiled for AVX-512, AVX2 and baseline x86-64 and
 * picked at load time (VECTOR_CLONES, kernels/vector_math.h). Every
 * reduction below has a fixed order (LANES interleaved partial sums, then the
 * lanes in order), so each clone performs the same IEEE operations: results
 * do not depend on the machine, only the speed does. The softmax's exp is
 * exp_poly (x <= ~0 there). */
#define INLINE static inline __attribute__((always_inline))
#define LANES DOT_LANES /* sum_lanes and dot_columns keep dot_lanes' order */

/* sum_t x[t], in the same lane order as dot_lanes. */
INLINE float sum_lanes(const float *restrict x, int64_t n) {
    float lane[LANES] = {0};
    int64_t t = 0;
    for (; t + LANES <= n; t += LANES)
#pragma omp simd
        for (int l = 0; l < LANES; l++) lane[l] += x[t + l];
    for (int l = 0; t + l < n; l++) lane[l] += x[t + l];
    float s = 0.0f;
    for (int l = 0; l < LANES; l++) s += lane[l];
    return s;
}

/* The keys of one (batch row, KV head), transposed (D rows of positions) so
 * that every inner loop runs over keys with unit stride. A causal row p sees
 * columns 0..p of kt/vt; a masked row sees columns 0..ks+p-L of km/vm, which
 * hold the selected keys followed by L..T-1. With K = L, km equals kt bit for
 * bit, so the masked rows repeat the causal arithmetic exactly. A listed row
 * (evict or restride: one record per row, attention.h) copies its columns of
 * kt/vt into kr/vr first; being ascending, a list 0..p repeats the causal
 * arithmetic too. */
typedef struct {
    float *kt, *vt;   /* (D, T) */
    float *km, *vm;   /* (D, nm), nm = ks + T - L; unused when !masked */
    float *kr, *vr;   /* (D, W) the current listed row's keys; unused unless rows */
    float *dkt, *dvt; /* (D, T) gradient accumulators (backward) */
    const int32_t *sel;
    const int32_t *rows; /* (T - L, 1 + W) records of the rows >= L, or NULL */
    int64_t ks, L, T, D, nm, W;
} HeadKeys;

typedef struct {
    const float *base; /* leading column of the row's key list */
    int64_t ld, n;     /* column stride, number of keys */
} RowKeys;

/* Where a row's dk, dv terms go: its first nsel keys to positions
 * pos[0..nsel), the others to consecutive positions from `first`. */
typedef struct {
    const int32_t *pos;
    int64_t nsel, first;
} RowScatter;

INLINE RowKeys row_keys(const HeadKeys *hk, int64_t p, int use_v) {
    if (!hk->sel || p < hk->L) return (RowKeys){use_v ? hk->vt : hk->kt, hk->T, p + 1};
    return (RowKeys){use_v ? hk->vm : hk->km, hk->nm, hk->ks + p - hk->L + 1};
}

/* s[j] = scale * sum_d q[d] * cols[d][j] for j < n, d ascending; LANES
 * columns at a time so that the partial sums stay in registers. */
INLINE void dot_columns(float *restrict s, const float *restrict q, RowKeys c, int64_t D, float scale) {
    int64_t j = 0;
    for (; j + LANES <= c.n; j += LANES) {
        float acc[LANES] = {0};
        for (int64_t d = 0; d < D; d++) {
            const float qd = q[d], *restrict col = c.base + d * c.ld + j;
#pragma omp simd
            for (int l = 0; l < LANES; l++) acc[l] += qd * col[l];
        }
#pragma omp simd
        for (int l = 0; l < LANES; l++) s[j + l] = acc[l] * scale;
    }
    for (; j < c.n; j++) {
        float a = 0.0f;
        for (int64_t d = 0; d < D; d++) a += q[d] * c.base[d * c.ld + j];
        s[j] = a * scale;
    }
}

/* Row p's key and value columns (a listed row's gathered into kr/vr) and
 * where its gradient terms go. */
static void row_setup(const HeadKeys *hk, int64_t p, RowKeys *kc, RowKeys *vc, RowScatter *to) {
    const int32_t *rec = hk->rows && p >= hk->L ? hk->rows + (p - hk->L) * (1 + hk->W) : NULL;
    if (rec && rec[0] > 0) {
        int64_t n = rec[0], T = hk->T, W = hk->W;
        for (int64_t d = 0; d < hk->D; d++)
            for (int64_t c = 0; c < n; c++) {
                hk->kr[d * W + c] = hk->kt[d * T + rec[1 + c]];
                hk->vr[d * W + c] = hk->vt[d * T + rec[1 + c]];
            }
        *kc = (RowKeys){hk->kr, W, n};
        *vc = (RowKeys){hk->vr, W, n};
        *to = (RowScatter){rec + 1, n, 0};
        return;
    }
    /* causal rows, a listed full row (rows set, sel NULL) and the paper's rows */
    *kc = row_keys(hk, p, 0);
    *vc = row_keys(hk, p, 1);
    int64_t nsel = hk->sel && p >= hk->L ? hk->ks : 0;
    *to = (RowScatter){hk->sel, nsel, nsel ? hk->L : 0};
}

/* One query row: out row and log-sum-exp. On return s[0..n) holds the
 * row's unnormalised exponentials and the result is their sum, so that a
 * caller can read the probabilities s[t] / sum without recomputing them. */
VECTOR_CLONES static float forward_row(float *o, float *lse, const float *qrow, RowKeys kc, RowKeys vc, int64_t D,
                                       float scale, float *s) {
    int64_t n = kc.n;
    dot_columns(s, qrow, kc, D, scale);
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t t = 0; t < n; t++) mx = s[t] > mx ? s[t] : mx;
#pragma omp simd
    for (int64_t t = 0; t < n; t++) s[t] = exp_poly(s[t] - mx);
    float sum = sum_lanes(s, n);
    for (int64_t d = 0; d < D; d++) o[d] = dot_lanes(s, vc.base + d * vc.ld, n) / sum;
    *lse = mx + logf(sum);
    return sum;
}

/* The prefill statistics of causal row p of head h from its exponentials s
 * (forward_row): the probabilities s[t] / sum added to colsum (T), and,
 * for the last W rows, stored as row p - (T - W) of last (W, T), zero past p. */
VECTOR_CLONES static void stats_row(float *colsum, float *last, const float *s, float sum, int64_t p, int64_t T,
                                    int64_t W) {
    int64_t n = p + 1;
    if (colsum)
#pragma omp simd
        for (int64_t t = 0; t < n; t++) colsum[t] += s[t] / sum;
    if (last && p >= T - W) {
        float *row = last + (p - (T - W)) * T;
#pragma omp simd
        for (int64_t t = 0; t < n; t++) row[t] = s[t] / sum;
        memset(row + n, 0, sizeof(float) * (size_t)(T - n));
    }
}

/* One query row: writes dq, accumulates its terms into dkt, dvt (by position). */
VECTOR_CLONES static void backward_row(float *dqrow, const float *qrow, const float *dorow, float di, float l,
                                       RowKeys kc, RowKeys vc, RowScatter to, const HeadKeys *hk, float scale,
                                       float *pr, float *ds) {
    int64_t n = kc.n, D = hk->D, T = hk->T;
    dot_columns(pr, qrow, kc, D, scale);
#pragma omp simd
    for (int64_t t = 0; t < n; t++) pr[t] = exp_poly(pr[t] - l);
    dot_columns(ds, dorow, vc, D, 1.0f);
#pragma omp simd
    for (int64_t t = 0; t < n; t++) ds[t] = pr[t] * (ds[t] - di) * scale;
    for (int64_t d = 0; d < D; d++) dqrow[d] = dot_lanes(ds, kc.base + d * kc.ld, n);
    /* masked rows: the selected keys scatter to their positions, the local
     * keys L..p are contiguous again; causal rows are one contiguous run;
     * listed rows scatter every key */
    int64_t nsel = to.nsel, first = to.first;
    for (int64_t d = 0; d < D; d++) {
        float *restrict dk = hk->dkt + d * T, *restrict dv = hk->dvt + d * T;
        const float qd = qrow[d], od = dorow[d];
        for (int64_t t = 0; t < nsel; t++) {
            dk[to.pos[t]] += ds[t] * qd;
            dv[to.pos[t]] += pr[t] * od;
        }
        float *restrict dkl = dk + first, *restrict dvl = dv + first;
        const float *restrict dsl = ds + nsel, *restrict prl = pr + nsel;
#pragma omp simd
        for (int64_t t = 0; t < n - nsel; t++) {
            dkl[t] += dsl[t] * qd;
            dvl[t] += prl[t] * od;
        }
    }
}

/* dst[d * ld + c] = src row of position (pos ? pos[c] : first + c), element d */
static void transpose_in(float *dst, int64_t ld, const float *src, int64_t kvs, const int32_t *pos, int64_t first,
                         int64_t n, int64_t D) {
    for (int64_t c = 0; c < n; c++) {
        const float *row = src + (pos ? (int64_t)pos[c] : first + c) * kvs;
        for (int64_t d = 0; d < D; d++) dst[d * ld + c] = row[d];
    }
}

/* ks: selected keys of the paper's rows (0: none); W: width of listed rows (0: none). */
static float *head_keys_alloc(HeadKeys *hk, int64_t T, int64_t D, int64_t ks, int64_t W, const RefreshMask *m) {
    int64_t nm = ks ? ks + T - m->L : 0;
    float *buf = xmalloc(sizeof(float) * (size_t)(D * (4 * T + 2 * nm + 2 * W) + 2 * T));
    float *kr = buf + 4 * D * T + 2 * D * nm;
    *hk = (HeadKeys){.kt = buf,
                     .vt = buf + D * T,
                     .dkt = buf + 2 * D * T,
                     .dvt = buf + 3 * D * T,
                     .km = buf + 4 * D * T,
                     .vm = buf + 4 * D * T + D * nm,
                     .kr = kr,
                     .vr = kr + D * W,
                     .ks = ks,
                     .L = m->L,
                     .T = T,
                     .D = D,
                     .nm = nm,
                     .W = W};
    return buf;
}

/* Rows scratch (2 T floats) follows the head buffers. */
static float *head_keys_scratch(const HeadKeys *hk) { return hk->kt + hk->D * (4 * hk->T + 2 * hk->nm + 2 * hk->W); }

/* sel: the paper's selection of this (batch row, KV head), rows: its listed
 * records; at most one of them is set. */
static void head_keys_load(HeadKeys *hk, const float *kb, const float *vb, int64_t kvs, const int32_t *sel,
                           const int32_t *rows) {
    int64_t T = hk->T, D = hk->D;
    hk->sel = sel;
    hk->rows = rows;
    transpose_in(hk->kt, T, kb, kvs, NULL, 0, T, D);
    transpose_in(hk->vt, T, vb, kvs, NULL, 0, T, D);
    if (!sel) return;
    transpose_in(hk->km, hk->nm, kb, kvs, sel, 0, hk->ks, D);
    transpose_in(hk->vm, hk->nm, vb, kvs, sel, 0, hk->ks, D);
    transpose_in(hk->km + hk->ks, hk->nm, kb, kvs, NULL, hk->L, T - hk->L, D);
    transpose_in(hk->vm + hk->ks, hk->nm, vb, kvs, NULL, hk->L, T - hk->L, D);
}

/* Which buffers the rows need: ks selected keys (the paper's rows), or
 * listed rows of width W; sel offsets per (batch row, KV head). */
typedef struct {
    int64_t ks, W, per;
} MaskUse;

static MaskUse mask_use(const RefreshMask *m, int64_t T) {
    if (!refresh_active(m, T)) return (MaskUse){0, 0, 0};
    if (refresh_per_row(m)) return (MaskUse){0, refresh_row_width(m, T), refresh_sel_len(m, T)};
    return (MaskUse){refresh_num_selected(m), 0, refresh_num_selected(m)};
}

static void head_keys_load_bg(HeadKeys *hk, const float *k, const float *v, const int32_t *sel, MaskUse u, int64_t b,
                              int64_t g, int64_t T, int64_t Hkv, int64_t D) {
    int64_t base = (b * T * Hkv + g) * D;
    const int32_t *mine = u.per ? sel + (b * Hkv + g) * u.per : NULL;
    head_keys_load(hk, k + base, v + base, Hkv * D, u.ks ? mine : NULL, u.W ? mine : NULL);
}

/* The causal rows run in blocks of query rows through sgemm: the keys and
 * values a block reads (up to 2 x T x D floats) serve all its rows at once,
 * where the row kernels above stream them once per row; at T = 8192 that
 * traffic, not the arithmetic, was their cost. Each sgemm also packs its
 * T x D keys (and values) again, with D = 64 the inner dimension: 64-row
 * blocks spent a quarter of a prefill's time packing, 256-row ones (8 MiB
 * of scores per thread at T = 8192) a few percent. */
#define ATTN_QUERY_ROWS 256

/* Row ranges per query head: a partition fixed by T alone, so that every
 * sum (colsum, dk, dv) has an order that does not depend on the thread
 * count, and fine enough that B x Hq x ATTN_BLOCKS tasks balance a few
 * cores even when Hkv is smaller than the thread count (SmolLM2: 3 KV
 * heads). Block i holds rows [edge[i], edge[i+1]): row p costs ~p, so the
 * edges sit at T sqrt(i / ATTN_BLOCKS) for equal work. */
#define ATTN_BLOCKS 4

typedef struct {
    int64_t edge[ATTN_BLOCKS + 1];
} RowBlocks;

static RowBlocks row_blocks(int64_t T) {
    RowBlocks rb;
    for (int64_t i = 0; i <= ATTN_BLOCKS; i++) rb.edge[i] = (int64_t)((double)T * sqrt((double)i / ATTN_BLOCKS));
    rb.edge[ATTN_BLOCKS] = T;
    return rb;
}

/* Task t of B x Hq x ATTN_BLOCKS: its batch row, query head and block, the
 * heaviest blocks (last rows) first. */
typedef struct {
    int64_t b, h, blk;
} AttnTask;

static AttnTask attn_task(int64_t t, int64_t Hq) {
    int64_t per_b = Hq * ATTN_BLOCKS, r = t % per_b;
    return (AttnTask){t / per_b, r / ATTN_BLOCKS, ATTN_BLOCKS - 1 - r % ATTN_BLOCKS};
}

/* 1 when row p of a (batch row, KV head) sees exactly keys 0..p: every row
 * without the mask or before L, the paper's rows when K >= L (km equals kt
 * then), full listed rows and listed rows whose list is 0..p (ascending and
 * distinct, so p + 1 entries are all of them). */
static int row_is_causal(const int32_t *mine, MaskUse u, int64_t L, int64_t p) {
    if (!u.per || p < L) return 1;
    if (u.ks) return u.ks == L;
    const int32_t *rec = mine + (p - L) * (1 + u.W);
    return rec[0] == 0 || rec[0] == p + 1;
}

/* How many of rows p0..p0+nr-1, from the first, are causal: those take the
 * blocked path, over the same keys 0..p0+nr-1 as a chunk of causal rows;
 * the rest take the row kernels. */
static int64_t causal_rows(const int32_t *mine, MaskUse u, int64_t L, int64_t p0, int64_t nr) {
    int64_t c = 0;
    while (c < nr && row_is_causal(mine, u, L, p0 + c)) c++;
    return c;
}

/* Row p of a block of scores s[0..n) (scaled q.k, keys 0..n-1): in place,
 * the unnormalised exponentials of keys 0..p and zeros past p; returns
 * their sum and the row's max in *mx. */
VECTOR_CLONES static float softmax_causal_row(float *s, int64_t p, int64_t n, float *mx_out) {
    int64_t cnt = p + 1;
    float mx = vector_max(s, cnt);
#pragma omp simd
    for (int64_t t = 0; t < cnt; t++) s[t] = exp_poly(s[t] - mx);
    for (int64_t t = cnt; t < n; t++) s[t] = 0.0f;
    *mx_out = mx;
    return sum_lanes(s, cnt);
}

/* Backward of causal row p from its scaled scores s and dP = dout.v over
 * keys 0..n-1: in place, s becomes P = exp(s - lse) and dp becomes
 * dS = P (dP - di) scale over keys 0..p, both zero past p. */
VECTOR_CLONES static void softmax_grad_causal_row(float *s, float *dp, float l, float di, float scale, int64_t p,
                                                  int64_t n) {
    int64_t cnt = p + 1;
#pragma omp simd
    for (int64_t t = 0; t < cnt; t++) {
        float pr = exp_poly(s[t] - l);
        s[t] = pr;
        dp[t] = pr * (dp[t] - di) * scale;
    }
    for (int64_t t = cnt; t < n; t++) s[t] = dp[t] = 0.0f;
}

/* What the forward and backward tasks share: the shapes, the inputs' row
 * strides and one (batch row, KV head)'s bases. */
typedef struct {
    int64_t B, T, Hq, Hkv, D, qs, kvs; /* qs = Hq D, kvs = Hkv D: row strides */
    float scale;
    MaskUse u;
    const RefreshMask *m;
    const int32_t *sel;
} AttnShape;

static AttnShape attn_shape(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const int32_t *sel,
                            const RefreshMask *m) {
    return (AttnShape){B, T, Hq, Hkv, D, Hq * D, Hkv * D, 1.0f / sqrtf((float)D), mask_use(m, T), m, sel};
}

static const int32_t *sel_of(const AttnShape *a, int64_t b, int64_t g) {
    return a->u.per ? a->sel + (b * a->Hkv + g) * a->u.per : NULL;
}

/* One thread's state: the scores scratch and, for the mask's listed or
 * selected rows, the row kernels' keys (allocated on first use, loaded for
 * one (batch row, KV head) at a time). */
typedef struct {
    float *S, *dP; /* (ATTN_QUERY_ROWS, T) each */
    HeadKeys hk;
    float *hk_buf;
    int64_t hk_bg; /* b * Hkv + g loaded into hk; -1: none */
} AttnThread;

static void attn_thread_init(AttnThread *w, const AttnShape *a, int backward) {
    memset(w, 0, sizeof *w);
    int64_t n = ATTN_QUERY_ROWS * a->T;
    w->S = xmalloc(sizeof(float) * (size_t)(backward ? 2 * n : n));
    w->dP = backward ? w->S + n : NULL;
    w->hk_bg = -1;
}

static HeadKeys *attn_thread_keys(AttnThread *w, const AttnShape *a, const float *k, const float *v, int64_t b,
                                  int64_t g) {
    if (!w->hk_buf) w->hk_buf = head_keys_alloc(&w->hk, a->T, a->D, a->u.ks, a->u.W, a->m);
    if (w->hk_bg != b * a->Hkv + g) {
        head_keys_load_bg(&w->hk, k, v, a->sel, a->u, b, g, a->T, a->Hkv, a->D);
        w->hk_bg = b * a->Hkv + g;
    }
    return &w->hk;
}

static void attn_thread_free(AttnThread *w) {
    free(w->S);
    free(w->hk_buf);
}

/* Forward of rows [p0, p0 + nr) of head h; st (may be NULL) takes the
 * prefill statistics, colsum into this task's own row. */
static void forward_chunk(AttnThread *w, const AttnShape *a, float *out, float *lse, const AttentionStats *st,
                          float *colsum, int64_t W, const float *q, const float *k, const float *v, AttnTask tk,
                          int64_t p0, int64_t nr) {
    int64_t T = a->T, D = a->D, b = tk.b, h = tk.h, g = h / (a->Hq / a->Hkv);
    float *lse_h = lse + (b * a->Hq + h) * T;
    const int32_t *mine = sel_of(a, b, g);
    int64_t c = causal_rows(mine, a->u, a->m->L, p0, nr), n = p0 + nr;
    /* A chunk holding prefill rows (p < L) multiplies all nr rows, as the
     * same chunk of a causal run does, and the row kernels overwrite the
     * mask's rows afterwards: a BLAS core's result for one row can depend
     * on how many rows the sgemm has (OpenBLAS's Prescott kernels differ
     * for odd counts, Haswell's for counts off its 12-row tiles), and the
     * prefill rows must keep their causal bits under the mask on every
     * core. Past L only the causal rows are multiplied. */
    int64_t rows = c > 0 && p0 < a->m->L ? nr : c;
    int64_t kvoff = b * T * a->kvs + g * D, qoff = (b * T + p0) * a->qs + h * D;
    float sums[ATTN_QUERY_ROWS], *S = w->S, *o = out + qoff;
    if (c > 0) {
        /* scores of rows p0..p0+rows-1 over keys 0..n-1; one sgemm, one
         * thread (blas.h: the same bits whatever the thread count) */
        blas_sgemm_serial(0, 1, rows, n, D, a->scale, q + qoff, a->qs, k + kvoff, a->kvs, 0.0f, S, n);
        for (int64_t r = 0; r < rows; r++) {
            int64_t p = p0 + r;
            float mx;
            sums[r] = softmax_causal_row(S + r * n, p, n, &mx);
            if (r >= c) continue; /* a mask row: only the product's shape needs it */
            lse_h[p] = mx + logf(sums[r]);
            if (st) stats_row(colsum, st->last ? st->last + h * W * T : NULL, S + r * n, sums[r], p, T, W);
        }
        blas_sgemm_serial(0, 0, rows, D, n, 1.0f, S, n, v + kvoff, a->kvs, 0.0f, o, a->qs);
        for (int64_t r = 0; r < c; r++)
            for (int64_t d = 0; d < D; d++) o[r * a->qs + d] /= sums[r];
    }
    if (c == nr) return;
    HeadKeys *hk = attn_thread_keys(w, a, k, v, b, g); /* the mask's rows: one at a time */
    for (int64_t p = p0 + c; p < p0 + nr; p++) {
        int64_t row = (b * T + p) * a->Hq + h;
        RowKeys kc, vc;
        RowScatter to;
        row_setup(hk, p, &kc, &vc, &to);
        forward_row(out + row * D, lse_h + p, q + row * D, kc, vc, D, a->scale, head_keys_scratch(hk));
    }
}

/* Both forwards: st NULL for training, else one causal sequence's prefill
 * statistics (attention_forward_stats_cpu). */
static void forward_blocked(float *out, float *lse, const AttentionStats *st, const float *q, const float *k,
                            const float *v, const int32_t *sel, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                            int64_t D, const RefreshMask *m) {
    AttnShape a = attn_shape(B, T, Hq, Hkv, D, sel, m);
    RowBlocks rb = row_blocks(T);
    int64_t tasks = B * Hq * ATTN_BLOCKS, W = st ? (st->W < T ? st->W : T) : 0;
    /* each task's column sums apart, added in block order afterwards */
    float *part = st && st->colsum ? xcalloc((size_t)(tasks * T), sizeof(float)) : NULL;
#pragma omp parallel
    {
        AttnThread w;
        attn_thread_init(&w, &a, 0);
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) {
            AttnTask tk = attn_task(t, Hq);
            for (int64_t p0 = rb.edge[tk.blk]; p0 < rb.edge[tk.blk + 1]; p0 += ATTN_QUERY_ROWS) {
                int64_t nr = rb.edge[tk.blk + 1] - p0 < ATTN_QUERY_ROWS ? rb.edge[tk.blk + 1] - p0 : ATTN_QUERY_ROWS;
                forward_chunk(&w, &a, out, lse, st, part ? part + t * T : NULL, W, q, k, v, tk, p0, nr);
            }
        }
        attn_thread_free(&w);
    }
    if (!part) return;
#pragma omp parallel for schedule(static)
    for (int64_t h = 0; h < Hq; h++) {
        float *c = st->colsum + h * T;
        memset(c, 0, sizeof(float) * (size_t)T);
        for (int64_t blk = 0; blk < ATTN_BLOCKS; blk++) {
            /* task order: block ATTN_BLOCKS-1-j is task h*ATTN_BLOCKS + j */
            const float *pb = part + (h * ATTN_BLOCKS + (ATTN_BLOCKS - 1 - blk)) * T;
            for (int64_t t = 0; t < T; t++) c[t] += pb[t];
        }
    }
    free(part);
}

void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v, const int32_t *sel,
                           int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    forward_blocked(out, lse, NULL, q, k, v, sel, B, T, Hq, Hkv, D, m);
}

void attention_forward_stats_cpu(float *out, float *lse, const AttentionStats *st, const float *q, const float *k,
                                 const float *v, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    KV_CHECK(st && st->W >= 0, "attention_forward_stats_cpu: needs statistics buffers and a window W >= 0");
    RefreshMask off = refresh_mask_off();
    forward_blocked(out, lse, st, q, k, v, NULL, 1, T, Hq, Hkv, D, &off);
}

/* The backward's per-task gradients of keys and values: task (b, h, blk)
 * writes dk, dv terms for keys 0..edge[blk+1]-1 only (causal rows see no
 * later key), so its slice holds that many rows of each; they are summed in
 * a fixed order (query head, then block) once every task is done. */
typedef struct {
    float *buf;
    int64_t rows_per_head, D; /* sum over blocks of edge[blk+1]; head dim */
    int64_t start[ATTN_BLOCKS];
    RowBlocks rb;
} KeyGradParts;

static void key_grad_parts_init(KeyGradParts *kp, int64_t B, int64_t Hq, int64_t T, int64_t D) {
    kp->rb = row_blocks(T);
    kp->D = D;
    kp->rows_per_head = 0;
    for (int64_t blk = 0; blk < ATTN_BLOCKS; blk++) {
        kp->start[blk] = kp->rows_per_head;
        kp->rows_per_head += kp->rb.edge[blk + 1];
    }
    int64_t n;
    KV_CHECK(i64_mul(B * Hq, kp->rows_per_head, &n) == 0 && i64_mul(n, 2 * D, &n) == 0 &&
                 n <= (int64_t)(SIZE_MAX / sizeof(float)),
             "attention backward: per-task key gradients of %lld x %lld rows overflow", (long long)(B * Hq),
             (long long)kp->rows_per_head);
    kp->buf = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
}

/* dk of task (b, h, blk): edge[blk+1] rows of D; its dv follows. */
static float *key_grad_part(const KeyGradParts *kp, int64_t Hq, int64_t b, int64_t h, int64_t blk) {
    return kp->buf + ((b * Hq + h) * kp->rows_per_head + kp->start[blk]) * 2 * kp->D;
}

/* Backward of causal rows [p0, p0 + c) of head h over keys 0..n-1
 * (blocked, sgemm) into dq and the task's dk, dv (pk, pv: rows by key
 * position). */
static void backward_chunk(AttnThread *w, const AttnShape *a, float *dq, float *pk, float *pv, const float *dout,
                           const float *q, const float *k, const float *v, const float *out, const float *lse,
                           AttnTask tk, int64_t g, int64_t p0, int64_t c, int64_t n) {
    int64_t T = a->T, D = a->D;
    int64_t kvoff = tk.b * T * a->kvs + g * D, qoff = (tk.b * T + p0) * a->qs + tk.h * D;
    const float *lse_h = lse + (tk.b * a->Hq + tk.h) * T;
    float *S = w->S, *dP = w->dP;
    blas_sgemm_serial(0, 1, c, n, D, a->scale, q + qoff, a->qs, k + kvoff, a->kvs, 0.0f, S, n);
    blas_sgemm_serial(0, 1, c, n, D, 1.0f, dout + qoff, a->qs, v + kvoff, a->kvs, 0.0f, dP, n);
    for (int64_t r = 0; r < c; r++) {
        float di = dot(dout + qoff + r * a->qs, out + qoff + r * a->qs, D);
        softmax_grad_causal_row(S + r * n, dP + r * n, lse_h[p0 + r], di, a->scale, p0 + r, n);
    }
    blas_sgemm_serial(0, 0, c, D, n, 1.0f, dP, n, k + kvoff, a->kvs, 0.0f, dq + qoff, a->qs);
    blas_sgemm_serial(1, 0, n, D, c, 1.0f, dP, n, q + qoff, a->qs, 1.0f, pk, D);
    blas_sgemm_serial(1, 0, n, D, c, 1.0f, S, n, dout + qoff, a->qs, 1.0f, pv, D);
}

void attention_backward_cpu(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, const int32_t *sel, int64_t B,
                            int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const RefreshMask *m) {
    AttnShape a = attn_shape(B, T, Hq, Hkv, D, sel, m);
    int64_t group = Hq / Hkv, tasks = B * Hq * ATTN_BLOCKS;
    KeyGradParts kp;
    key_grad_parts_init(&kp, B, Hq, T, D);
#pragma omp parallel
    {
        AttnThread w;
        attn_thread_init(&w, &a, 1);
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < tasks; t++) {
            AttnTask tk = attn_task(t, Hq);
            int64_t g = tk.h / group, lo = kp.rb.edge[tk.blk], hi = kp.rb.edge[tk.blk + 1];
            float *pk = key_grad_part(&kp, Hq, tk.b, tk.h, tk.blk), *pv = pk + hi * D;
            memset(pk, 0, sizeof(float) * (size_t)(2 * hi * D));
            const int32_t *mine = sel_of(&a, tk.b, g);
            HeadKeys *hk = NULL; /* the mask's rows, one at a time, into hk's transposed sums */
            for (int64_t p0 = lo; p0 < hi; p0 += ATTN_QUERY_ROWS) {
                int64_t nr = hi - p0 < ATTN_QUERY_ROWS ? hi - p0 : ATTN_QUERY_ROWS;
                int64_t c = causal_rows(mine, a.u, m->L, p0, nr);
                if (c > 0) backward_chunk(&w, &a, dq, pk, pv, dout, q, k, v, out, lse, tk, g, p0, c, p0 + nr);
                if (c == nr) continue;
                if (!hk) {
                    hk = attn_thread_keys(&w, &a, k, v, tk.b, g);
                    memset(hk->dkt, 0, sizeof(float) * (size_t)(2 * D * T)); /* dkt and dvt are adjacent */
                }
                float *s = head_keys_scratch(hk);
                for (int64_t p = p0 + c; p < p0 + nr; p++) {
                    int64_t row = (tk.b * T + p) * Hq + tk.h;
                    float di = dot(dout + row * D, out + row * D, D);
                    RowKeys kc, vc;
                    RowScatter to;
                    row_setup(hk, p, &kc, &vc, &to);
                    backward_row(dq + row * D, q + row * D, dout + row * D, di, lse[(tk.b * Hq + tk.h) * T + p], kc, vc,
                                 to, hk, a.scale, s, s + T);
                }
            }
            if (hk)
                for (int64_t j = 0; j < hi; j++)
                    for (int64_t d = 0; d < D; d++) {
                        pk[j * D + d] += hk->dkt[d * T + j];
                        pv[j * D + d] += hk->dvt[d * T + j];
                    }
        }
        attn_thread_free(&w);
    }
    /* dk, dv of key j: the group's heads in order, each head's blocks in order */
#pragma omp parallel for collapse(3) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < Hkv; g++)
            for (int64_t j = 0; j < T; j++) {
                float *dkj = dk + (b * T + j) * a.kvs + g * D, *dvj = dv + (b * T + j) * a.kvs + g * D;
                for (int64_t d = 0; d < D; d++) dkj[d] = dvj[d] = 0.0f;
                for (int64_t h = g * group; h < (g + 1) * group; h++)
                    for (int64_t blk = 0; blk < ATTN_BLOCKS; blk++) {
                        int64_t hi = kp.rb.edge[blk + 1];
                        if (j >= hi) continue;
                        const float *pk = key_grad_part(&kp, Hq, b, h, blk), *pv = pk + hi * D;
                        for (int64_t d = 0; d < D; d++) {
                            dkj[d] += pk[j * D + d];
                            dvj[d] += pv[j * D + d];
                        }
                    }
            }
    free(kp.buf);
}

int attention_tensor_core_head_dim(int64_t D) { return D == 16 || D == 32 || D == 64 || D == 128; }
