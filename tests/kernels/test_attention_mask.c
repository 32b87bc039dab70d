/* RefreshKV training mask: hand-built cases whose selected set is known in
 * advance, the dense reference (kernels/attention_ref.h) for the masked
 * rows, and K = L equal to causal attention bit for bit. With evict/restride (the eval cache's keys):
 * every row's key list equals what the eval's refreshkv policy and partial
 * cache choose on the same q and k, and the cases where nothing is evicted
 * equal causal attention bit for bit. */
#include <math.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../eval/partial_cache.h"
#include "../../eval/policy.h"
#include "../../kernels/attention.h"
#include "../../kernels/attention_ref.h"
#include "../../kernels/refresh_select.h"
#include "../testlib.h"

/* Builds q, k (B=1) so that query L-1 of head h has raw scores logp[h][j]
 * over keys j < L: q_h = e_h, k_j[h] = sqrt(D) * logp[h][j] (scale = 1/sqrt(D)). */
static void build_scores(float *q, float *k, int64_t T, int64_t Hq, int64_t D, int64_t L, const double *logp) {
    memset(q, 0, sizeof(float) * (size_t)(T * Hq * D));
    memset(k, 0, sizeof(float) * (size_t)(T * D)); /* Hkv = 1 */
    for (int64_t h = 0; h < Hq; h++) q[((L - 1) * Hq + h) * D + h] = 1.0f;
    for (int64_t j = 0; j < L; j++)
        for (int64_t h = 0; h < Hq; h++) k[j * D + h] = (float)(sqrt((double)D) * logp[h * L + j]);
}

static int same_set(const int32_t *got, const int32_t *want, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static void expect_selection(const char *name, const double *probs, int64_t Hq, int64_t L, int64_t K, int64_t kernel,
                             GroupAgg agg, const int32_t *want) {
    int64_t D = 4, T = L + 2;
    double *logp = xmalloc(sizeof(double) * (size_t)(Hq * L));
    for (int64_t i = 0; i < Hq * L; i++) logp[i] = log(probs[i]);
    float *q = xcalloc((size_t)(T * Hq * D), 4), *k = xcalloc((size_t)(T * D), 4);
    build_scores(q, k, T, Hq, D, L, logp);
    RefreshMask m = {.enabled = 1, .L = L, .K = K, .pool_kernel = kernel, .agg = agg};
    int32_t sel[64];
    attention_refresh_select_cpu(sel, q, k, 1, T, Hq, 1, D, &m);
    char got[256] = "", *p = got;
    for (int64_t i = 0; i < K; i++) p += sprintf(p, "%d ", sel[i]);
    tl_result(same_set(sel, want, K), name, "selected {%s}", got);
    free(logp), free(q), free(k);
}

/* one head; a single peak at `peak` over a flat background */
static void peak_probs(double *p, int64_t L, int64_t peak) {
    for (int64_t j = 0; j < L; j++) p[j] = 0.01;
    p[peak] = 0.5;
}

static void hand_cases(void) {
    double p[64];
    int64_t L = 12;
    peak_probs(p, L, 5); /* pooled (kernel 7) peak covers 2..8: ties -> lowest three */
    expect_selection("tie among pooled peak keeps lower positions", p, 1, L, 3, 7, GROUP_AGG_MAX, (int32_t[]){2, 3, 4});
    peak_probs(p, L, 0); /* left edge: window clipped, peak spreads to 0..3 only */
    expect_selection("pooling clipped at left edge", p, 1, L, 5, 7, GROUP_AGG_MAX, (int32_t[]){0, 1, 2, 3, 4});
    peak_probs(p, L, L - 1); /* right edge: L-4..L-1 */
    expect_selection("pooling clipped at right edge", p, 1, L, 4, 7, GROUP_AGG_MAX, (int32_t[]){8, 9, 10, 11});
    peak_probs(p, L, 6);
    p[1] = 0.3; /* two peaks, kernel 1: no pooling */
    expect_selection("kernel 1 selects raw top-2", p, 1, L, 2, 1, GROUP_AGG_MAX, (int32_t[]){1, 6});
    for (int64_t j = 0; j < L; j++) p[j] = 0.2; /* all equal: lowest K */
    expect_selection("all-equal scores select the first K", p, 1, L, 3, 7, GROUP_AGG_MAX, (int32_t[]){0, 1, 2});

    /* GQA, 2 heads sharing one KV head, no pooling:
     * head A: p1 = .5, p4 = .4;  head B: p9 = .6, p4 = .35 (rest small).
     * max -> {1, 9};  mean -> {4, 9};  first (head A) -> {1, 4}. */
    int64_t L2 = 16;
    double g[32];
    for (int64_t j = 0; j < 2 * L2; j++) g[j] = 0.003;
    g[1] = 0.5, g[4] = 0.4, g[L2 + 9] = 0.6, g[L2 + 4] = 0.35;
    expect_selection("GQA max aggregation", g, 2, L2, 2, 1, GROUP_AGG_MAX, (int32_t[]){1, 9});
    expect_selection("GQA mean aggregation", g, 2, L2, 2, 1, GROUP_AGG_MEAN, (int32_t[]){4, 9});
    expect_selection("GQA first-head aggregation", g, 2, L2, 2, 1, GROUP_AGG_FIRST, (int32_t[]){1, 4});
}

static void dense_mask_case(void) {
    Rng r;
    rng_seed(&r, 7);
    int64_t T = 40, L = 32, Hq = 4, Hkv = 2, D = 8, ks = 6;
    int64_t nq = T * Hq * D, nk = T * Hkv * D;
    float *q = xmalloc(4 * nq), *k = xmalloc(4 * nk), *v = xmalloc(4 * nk), *o = xmalloc(4 * nq),
          *lse = xmalloc(4 * T * Hq);
    for (int64_t i = 0; i < nq; i++) q[i] = rng_normal(&r);
    for (int64_t i = 0; i < nk; i++) k[i] = rng_normal(&r), v[i] = rng_normal(&r);
    RefreshMask m = {.enabled = 1, .L = L, .K = ks, .pool_kernel = 7, .agg = GROUP_AGG_MAX};
    int32_t sel[2 * 6];
    attention_refresh_select_cpu(sel, q, k, 1, T, Hq, Hkv, D, &m);
    attention_forward_cpu(o, lse, q, k, v, sel, 1, T, Hq, Hkv, D, &m);
    float *ref = xmalloc(4 * nq), *ref_lse = xmalloc(4 * T * Hq);
    attention_forward_ref(ref, ref_lse, q, k, v, sel, 1, T, Hq, Hkv, D, &m);
    tl_close("masked forward equals the dense reference (kernels/attention_ref.h)", o, ref, nq, 1e-5, 1e-4);
    tl_close("masked log-sum-exp equals the dense reference", lse, ref_lse, T * Hq, 1e-5, 1e-4);
    int sorted = 1;
    for (int64_t g = 0; g < Hkv; g++)
        for (int64_t i = 1; i < ks; i++) sorted &= sel[g * ks + i] > sel[g * ks + i - 1] && sel[g * ks + i] < L;
    tl_result(sorted, "selection is ascending, distinct and inside the prefill", "");
    free(q), free(k), free(v), free(o), free(lse), free(ref), free(ref_lse);
}

static void k_equals_l_is_causal(void) {
    Rng r;
    rng_seed(&r, 11);
    int64_t B = 2, T = 37, L = 29, Hq = 4, Hkv = 2, D = 8, nq = B * T * Hq * D, nk = B * T * Hkv * D;
    float *q = xmalloc(4 * nq), *k = xmalloc(4 * nk), *v = xmalloc(4 * nk), *dout = xmalloc(4 * nq);
    for (int64_t i = 0; i < nq; i++) q[i] = rng_normal(&r), dout[i] = rng_normal(&r);
    for (int64_t i = 0; i < nk; i++) k[i] = rng_normal(&r), v[i] = rng_normal(&r);
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
    RefreshMask masks[2] = {{.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX},
                            {.enabled = 1, .L = L, .K = L, .pool_kernel = 7, .agg = GROUP_AGG_MAX}};
    int32_t *sel = xmalloc(sizeof(int32_t) * B * Hkv * L);
    for (int i = 0; i < 2; i++) {
        o[i] = xmalloc(4 * nq), lse[i] = xmalloc(4 * B * Hq * T), dq[i] = xmalloc(4 * nq);
        dk[i] = xmalloc(4 * nk), dv[i] = xmalloc(4 * nk);
        if (i == 1) attention_refresh_select_cpu(sel, q, k, B, T, Hq, Hkv, D, &masks[i]);
        attention_forward_cpu(o[i], lse[i], q, k, v, i ? sel : NULL, B, T, Hq, Hkv, D, &masks[i]);
        attention_backward_cpu(dq[i], dk[i], dv[i], dout, q, k, v, o[i], lse[i], i ? sel : NULL, B, T, Hq, Hkv, D,
                               &masks[i]);
    }
    tl_identical("K = L: output bit-identical to causal", o[1], o[0], nq);
    tl_identical("K = L: log-sum-exp bit-identical to causal", lse[1], lse[0], B * Hq * T);
    tl_identical("K = L: dq bit-identical to causal", dq[1], dq[0], nq);
    tl_identical("K = L: dk bit-identical to causal", dk[1], dk[0], nk);
    tl_identical("K = L: dv bit-identical to causal", dv[1], dv[0], nk);
}

/* ---- evict / restride: the eval cache's keys ---- */

static void fill_normal(float *x, int64_t n, Rng *r) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_normal(r);
}

/* The key list record of row p >= L of (batch row, KV head) bg: the per-row
 * record, or for the paper's mask one built from its selection. */
static const int32_t *row_record(const RefreshMask *m, const int32_t *sel, int64_t bg, int64_t T, int64_t p,
                                 int32_t *tmp) {
    if (refresh_per_row(m)) return sel + bg * refresh_sel_len(m, T) + (p - m->L) * (1 + refresh_row_width(m, T));
    int64_t ks = refresh_num_selected(m), n = 0;
    for (int64_t i = 0; i < ks; i++) tmp[1 + n++] = sel[bg * ks + i];
    for (int64_t j = m->L; j <= p; j++) tmp[1 + n++] = (int32_t)j;
    tmp[0] = (int32_t)n;
    return tmp;
}

/* Softmax of query row `row`, head h, over keys 0..n-1: the selection's own
 * (kernels/refresh_select.h), so that the eval code ranks exactly the scores
 * the mask ranked. */
static void probs_row(float *p, const float *q, const float *k, int64_t b, int64_t row, int64_t h, int64_t n, int64_t T,
                      int64_t Hq, int64_t Hkv, int64_t D) {
    int64_t g = h / (Hq / Hkv);
    select_softmax_row(p, q + ((b * T + row) * Hq + h) * D, k + (b * T * Hkv + g) * D, Hkv * D, n, D,
                       1.0f / sqrtf((float)D));
}

/* Every head's probabilities of row `row` over 0..row: head h at h * (row + 1). */
static void probs_all_heads(float *p, const float *q, const float *k, int64_t b, int64_t row, int64_t T, int64_t Hq,
                            int64_t Hkv, int64_t D) {
    for (int64_t h = 0; h < Hq; h++) probs_row(p + h * (row + 1), q, k, b, row, h, row + 1, T, Hq, Hkv, D);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The mask's record of row pos against the eval's choice: a full step, or
 * keys[0..n) in any order (sorted here) plus pos itself, last. */
static int same_row(const int32_t *rec, int full, int32_t *keys, int64_t n, int64_t pos) {
    if (full) return rec[0] == 0;
    if (rec[0] != n + 1 || rec[n + 1] != pos) return 0;
    qsort(keys, (size_t)n, sizeof(int32_t), cmp_i32);
    for (int64_t i = 0; i < n; i++)
        if (rec[1 + i] != keys[i]) return 0;
    return 1;
}

typedef struct {
    const char *name;
    int64_t B, L, S, Hq, Hkv, D, K, kernel;
    GroupAgg agg;
    int evict;
    int64_t restride;
    int ties;       /* query L-1 zero (uniform attention) and keys repeated in pairs: tied scores */
    int expect_cut; /* some row has more new keys than K since its epoch (p - since > K) */
} EvalKeysCase;

/* The eval's choices for one batch row, replayed position by position:
 * with evict the refreshkv policy itself (a fixed stride above S when the
 * mask has no restride), without it the partial cache growing past K (what
 * the mask without evict keeps), re-selected at the same full steps. */
static void eval_keys_case(const EvalKeysCase *c) {
    int64_t B = c->B, L = c->L, T = L + c->S, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    Rng r;
    rng_seed(&r, (uint64_t)(1000 + 31 * c->K + 7 * c->restride + c->evict));
    float *q = xmalloc(sizeof(float) * (size_t)(B * T * Hq * D));
    float *k = xmalloc(sizeof(float) * (size_t)(B * T * Hkv * D));
    fill_normal(q, B * T * Hq * D, &r);
    fill_normal(k, B * T * Hkv * D, &r);
    if (c->ties)
        for (int64_t b = 0; b < B; b++) {
            memset(q + (b * T + L - 1) * Hq * D, 0, sizeof(float) * (size_t)(Hq * D));
            for (int64_t j = 1; j < T; j += 2)
                memcpy(k + (b * T + j) * Hkv * D, k + (b * T + j - 1) * Hkv * D, sizeof(float) * (size_t)(Hkv * D));
        }
    RefreshMask m = {.enabled = 1,
                     .L = L,
                     .K = c->K,
                     .pool_kernel = c->kernel,
                     .agg = c->agg,
                     .evict = c->evict,
                     .restride = c->restride};
    refresh_mask_validate(&m, c->name);
    int64_t per = refresh_sel_len(&m, T);
    int32_t *sel = xmalloc(sizeof(int32_t) * (size_t)(B * Hkv * per));
    attention_refresh_select_cpu(sel, q, k, B, T, Hq, Hkv, D, &m);

    PolicyShape shape = {.n_layers = 1, .Hq = Hq, .Hkv = Hkv, .D = D, .C = Hq * D, .L = L, .W = 1, .cap = T};
    PolicyOptions opt = policy_default_options(c->K);
    opt.agg = c->agg;
    opt.pool_kernel = c->kernel;
    opt.pool = POOL_MAX;
    opt.refresh_query = QUERY_PRE_ROPE; /* no RoPE tables here; a fixed stride never compares queries */
    opt.fixed_stride = c->restride > 0 ? c->restride : c->S + 1;
    float *probs = xmalloc(sizeof(float) * (size_t)(Hq * T));
    int32_t *keybuf = xmalloc(sizeof(int32_t) * (size_t)(Hkv * T)), **keys = xmalloc(sizeof(int32_t *) * (size_t)Hkv);
    int32_t *tmp = xmalloc(sizeof(int32_t) * (size_t)(T + 1));
    int64_t *n = xmalloc(sizeof(int64_t) * (size_t)Hkv), bad = 0, full = 0, cut = 0, counted_wrong = 0;
    for (int64_t g = 0; g < Hkv; g++) keys[g] = keybuf + g * T;
    char why[512] = "";
    for (int64_t b = 0; b < B; b++) {
        Policy pol;
        PartialCache pc;
        for (int64_t h = 0; h < Hq; h++) probs_row(probs + h * L, q, k, b, L - 1, h, L, T, Hq, Hkv, D);
        if (c->evict) {
            policy_create(&pol, "refreshkv", &shape, &opt);
            PrefillLayer pre = {.last_probs = probs, .q_last = q + (b * T + L - 1) * Hq * D};
            pol.init(&pol, 0, &pre);
        } else {
            pol = (Policy){.shape = shape, .opt = opt};
            partial_cache_init(&pc, &shape, T);
            partial_cache_select(&pc, &pol, 0, probs, L, L, c->K);
        }
        int64_t since = L; /* the epoch's first local key, for the coverage count */
        for (int64_t pos = L; pos < T; pos++) {
            const float *qrow = q + (b * T + pos) * Hq * D;
            int is_full;
            if (c->evict) {
                pol.choose(&pol, 0, pos, qrow, keys, n);
                is_full = n[0] == POLICY_EVERY_KEY;
            } else {
                is_full = c->restride > 0 && (pos - L + 1) % c->restride == 0;
                if (!is_full) partial_cache_keys(&pc, &pol, 0, pos, 1, keys, n);
            }
            full += is_full;
            cut += !is_full && pos - since > c->K;
            for (int64_t g = 0; g < Hkv; g++) {
                const int32_t *rec = row_record(&m, sel, b * Hkv + g, T, pos, tmp);
                int64_t count = rec[0] ? rec[0] : pos + 1;
                counted_wrong += count != refresh_row_count(&m, pos);
                if (same_row(rec, is_full, keys[g], is_full ? 0 : n[g], pos)) continue;
                if (!bad++)
                    snprintf(why, sizeof why,
                             "first difference: batch %lld, KV head %lld, position %lld: mask %d keys "
                             "(first %d), eval %s %lld keys",
                             (long long)b, (long long)g, (long long)pos, rec[0], rec[0] ? rec[1] : -1,
                             is_full ? "full step," : "", is_full ? (long long)pos + 1 : (long long)n[g] + 1);
            }
            if (!is_full) continue;
            since = pos + 1;
            probs_all_heads(probs, q, k, b, pos, T, Hq, Hkv, D);
            if (c->evict) pol.update(&pol, 0, pos, keys, n, probs, pos + 1);
            else partial_cache_select(&pc, &pol, 0, probs, pos + 1, pos + 1, c->K);
        }
        if (c->evict) policy_destroy(&pol);
        else partial_cache_free(&pc);
    }
    int64_t want_full = c->restride > 0 ? B * (c->S / c->restride) : 0;
    tl_result(bad == 0 && full == want_full, c->name, "%lld of %lld rows differ; %lld full steps (want %lld); %s",
              (long long)bad, (long long)(B * Hkv * c->S), (long long)full, (long long)want_full, why);
    char name[256];
    snprintf(name, sizeof name, "%s: refresh_row_count gives every row's key count", c->name);
    tl_result(counted_wrong == 0, name, "%lld rows miscounted", (long long)counted_wrong);
    if (c->expect_cut) {
        snprintf(name, sizeof name, "%s: reaches rows with more new keys than K (the oldest dropped)", c->name);
        tl_result(cut > 0, name, "no such row: the case does not test what it claims");
    }
    free(q), free(k), free(sel), free(probs), free(keybuf), free(keys), free(tmp), free(n);
}

static void eval_keys_cases(void) {
    const EvalKeysCase cases[] = {
        {"paper's mask (no evict, no restride) = partial cache growing from L", 2, 24, 12, 4, 2, 8, 6, 7, GROUP_AGG_MAX,
         0, 0, 0, 0},
        {"evict, no full step (stride above S): rows = refreshkv's keys, K 6 of L 24, S 20", 2, 24, 20, 4, 2, 8, 6, 7,
         GROUP_AGG_MAX, 1, 0, 0, 1},
        {"evict + restride 1 = refreshkv fixed stride 1 (every row full)", 2, 24, 12, 4, 2, 8, 6, 7, GROUP_AGG_MAX, 1,
         1, 0, 0},
        {"evict + restride 3 = refreshkv fixed stride 3", 2, 24, 20, 4, 2, 8, 6, 7, GROUP_AGG_MAX, 1, 3, 0, 0},
        {"evict + restride 10 = refreshkv fixed stride 10, K 4 (more new keys than K), mean", 2, 24, 25, 4, 2, 8, 4, 7,
         GROUP_AGG_MEAN, 1, 10, 0, 1},
        {"evict + restride 10 with tied scores (uniform query, repeated keys), no pooling, first head", 2, 24, 25, 4, 2,
         8, 5, 1, GROUP_AGG_FIRST, 1, 10, 1, 1},
        {"evict, tied scores, pooled (kernel 7), no full step", 1, 24, 16, 2, 1, 8, 3, 7, GROUP_AGG_MAX, 1, 0, 1, 1},
        {"restride 3 without evict = partial cache growing, re-selected at the full steps", 2, 24, 20, 4, 2, 8, 6, 7,
         GROUP_AGG_MAX, 0, 3, 0, 0},
        {"restride 10 without evict, K 4, tied scores", 2, 24, 25, 4, 2, 8, 4, 1, GROUP_AGG_MAX, 0, 10, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) eval_keys_case(&cases[i]);
}

/* Forward, backward (and the selection) of one mask on the same inputs. */
static void run_attention(float *o, float *lse, float *dq, float *dk, float *dv, const float *q, const float *k,
                          const float *v, const float *dout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                          const RefreshMask *m) {
    int32_t *sel = NULL;
    if (refresh_active(m, T)) {
        sel = xmalloc(sizeof(int32_t) * (size_t)(B * Hkv * refresh_sel_len(m, T)));
        attention_refresh_select_cpu(sel, q, k, B, T, Hq, Hkv, D, m);
    }
    attention_forward_cpu(o, lse, q, k, v, sel, B, T, Hq, Hkv, D, m);
    attention_backward_cpu(dq, dk, dv, dout, q, k, v, o, lse, sel, B, T, Hq, Hkv, D, m);
    free(sel);
}

/* Rows that keep every key (K >= T: nothing evicted, every selection is all
 * the keys; restride 1: every row full) repeat causal attention's
 * arithmetic: listed keys are visited in ascending order. K > L is refused by
 * refresh_mask_validate; the kernels take it, which isolates the listing. */
static void nothing_evicted_is_causal(void) {
    Rng r;
    rng_seed(&r, 13);
    int64_t B = 2, T = 37, L = 29, Hq = 4, Hkv = 2, D = 8, nq = B * T * Hq * D, nk = B * T * Hkv * D, nl = B * Hq * T;
    float *q = xmalloc(4 * nq), *k = xmalloc(4 * nk), *v = xmalloc(4 * nk), *dout = xmalloc(4 * nq);
    fill_normal(q, nq, &r);
    fill_normal(k, nk, &r);
    fill_normal(v, nk, &r);
    fill_normal(dout, nq, &r);
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
    for (int i = 0; i < 2; i++) {
        o[i] = xmalloc(4 * nq), lse[i] = xmalloc(4 * nl), dq[i] = xmalloc(4 * nq);
        dk[i] = xmalloc(4 * nk), dv[i] = xmalloc(4 * nk);
    }
    RefreshMask causal = {.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX};
    run_attention(o[0], lse[0], dq[0], dk[0], dv[0], q, k, v, dout, B, T, Hq, Hkv, D, &causal);
    const struct {
        const char *name;
        RefreshMask m;
    } cases[] = {
        {"evict, K = T", {.enabled = 1, .L = L, .K = T, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1}},
        {"evict + restride 3, K = T",
         {.enabled = 1, .L = L, .K = T, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 3}},
        {"restride 4 without evict, K = T",
         {.enabled = 1, .L = L, .K = T, .pool_kernel = 7, .agg = GROUP_AGG_MEAN, .restride = 4}},
        {"evict + restride 1 (every row full), K 3",
         {.enabled = 1, .L = L, .K = 3, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_attention(o[1], lse[1], dq[1], dk[1], dv[1], q, k, v, dout, B, T, Hq, Hkv, D, &cases[c].m);
        int same = memcmp(o[0], o[1], 4 * nq) == 0 && memcmp(lse[0], lse[1], 4 * nl) == 0 &&
                   memcmp(dq[0], dq[1], 4 * nq) == 0 && memcmp(dk[0], dk[1], 4 * nk) == 0 &&
                   memcmp(dv[0], dv[1], 4 * nk) == 0;
        char name[160];
        snprintf(name, sizeof name, "%s: out, lse, dq, dk, dv bit-identical to causal", cases[c].name);
        tl_result(same, name, "some bits differ");
    }
    /* and the check above can see a difference: K 3 with evict, no full row */
    RefreshMask small = {.enabled = 1, .L = L, .K = 3, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1};
    run_attention(o[1], lse[1], dq[1], dk[1], dv[1], q, k, v, dout, B, T, Hq, Hkv, D, &small);
    tl_result(memcmp(o[0], o[1], 4 * nq) != 0, "evict with K 3 < L differs from causal (the comparison can fail)",
              "identical");
    free(q), free(k), free(v), free(dout);
    for (int i = 0; i < 2; i++) free(o[i]), free(lse[i]), free(dq[i]), free(dk[i]), free(dv[i]);
}

/* evict + restride forward and backward against the dense reference
 * (kernels/attention_ref.h), which reads the records' keys itself (full
 * rows: every key up to p). */
static void listed_dense_case(void) {
    Rng r;
    rng_seed(&r, 17);
    int64_t T = 40, L = 28, Hq = 4, Hkv = 2, D = 8, nq = T * Hq * D, nk = T * Hkv * D, nl = T * Hq;
    float *in = xmalloc(4 * (size_t)(2 * nq + 2 * nk)), *q = in, *dout = q + nq, *k = dout + nq, *v = k + nk;
    fill_normal(in, 2 * nq + 2 * nk, &r);
    /* [0]: the fast path, [1]: the reference; o, lse, dq, dk, dv each */
    float *res[2];
    for (int i = 0; i < 2; i++) res[i] = xmalloc(4 * (size_t)(2 * nq + nl + 2 * nk));
    RefreshMask m = {.enabled = 1, .L = L, .K = 5, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 5};
    int32_t *sel = xmalloc(sizeof(int32_t) * (size_t)(Hkv * refresh_sel_len(&m, T)));
    attention_refresh_select_cpu(sel, q, k, 1, T, Hq, Hkv, D, &m);
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
    for (int i = 0; i < 2; i++)
        o[i] = res[i], lse[i] = o[i] + nq, dq[i] = lse[i] + nl, dk[i] = dq[i] + nq, dv[i] = dk[i] + nk;
    attention_forward_cpu(o[0], lse[0], q, k, v, sel, 1, T, Hq, Hkv, D, &m);
    attention_backward_cpu(dq[0], dk[0], dv[0], dout, q, k, v, o[0], lse[0], sel, 1, T, Hq, Hkv, D, &m);
    attention_forward_ref(o[1], lse[1], q, k, v, sel, 1, T, Hq, Hkv, D, &m);
    attention_backward_ref(dq[1], dk[1], dv[1], dout, q, k, v, sel, 1, T, Hq, Hkv, D, &m);
    tl_close("evict + restride 5: forward equals the dense reference over the listed keys", o[0], o[1], nq, 1e-5, 1e-4);
    tl_close("evict + restride 5: log-sum-exp equals the dense reference", lse[0], lse[1], nl, 1e-5, 1e-4);
    tl_close("evict + restride 5: dq equals the dense reference", dq[0], dq[1], nq, 1e-5, 1e-4);
    tl_close("evict + restride 5: dk equals the dense reference", dk[0], dk[1], nk, 1e-5, 1e-4);
    tl_close("evict + restride 5: dv equals the dense reference", dv[0], dv[1], nk, 1e-5, 1e-4);
    free(in), free(res[0]), free(res[1]), free(sel);
}

/* Death-test body: validates the mask it is given. */
static void validate_mask(void *arg) { refresh_mask_validate(arg, "test"); }

int main(void) {
    hand_cases();
    dense_mask_case();
    k_equals_l_is_causal();
    RefreshMask k_above_l = {.enabled = 1, .L = 16, .K = 17, .pool_kernel = 7, .agg = GROUP_AGG_MAX},
                even_kernel = {.enabled = 1, .L = 16, .K = 4, .pool_kernel = 6, .agg = GROUP_AGG_MAX};
    RefreshMask evict_2 = {.enabled = 1, .L = 16, .K = 4, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 2},
                restride_neg = {
                    .enabled = 1, .L = 16, .K = 4, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = -3};
    tl_expect_death("K > L is rejected naming 'K'", validate_mask, &k_above_l, "'K' (17) cannot exceed");
    tl_expect_death("even pooling kernel is rejected", validate_mask, &even_kernel, "'pool_kernel' must be odd");
    eval_keys_cases();
    nothing_evicted_is_causal();
    listed_dense_case();
    tl_expect_death("evict 2 is rejected naming 'evict'", validate_mask, &evict_2, "mask field 'evict' must be 0 or 1");
    tl_expect_death("negative restride is rejected naming 'restride'", validate_mask, &restride_neg,
                    "mask field 'restride' must be >= 0");
    return tl_finish();
}
