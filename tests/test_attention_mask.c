/* RefreshKV training mask: hand-built cases whose selected set is known in
 * advance, a dense-mask reference for the masked rows, and K = L equal to
 * causal attention bit for bit. */
#include <math.h>
#include <string.h>

#include "../common/rng.h"
#include "../common/util.h"
#include "../kernels/attention.h"
#include "testlib.h"

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
    RefreshMask m = {1, L, K, kernel, agg};
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

/* Dense reference in double with an explicit visibility matrix. */
static void dense_reference(double *out, const float *q, const float *k, const float *v, const int32_t *sel, int64_t T,
                            int64_t Hq, int64_t Hkv, int64_t D, int64_t L, int64_t ks) {
    for (int64_t h = 0; h < Hq; h++) {
        int64_t g = h / (Hq / Hkv);
        for (int64_t p = 0; p < T; p++) {
            double s[128], mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < T; j++) {
                int vis = j <= p;
                if (p >= L && j < L) {
                    vis = 0;
                    for (int64_t i = 0; i < ks; i++) vis |= sel[g * ks + i] == j;
                }
                s[j] = -INFINITY;
                if (!vis) continue;
                double d = 0;
                for (int64_t c = 0; c < D; c++) d += (double)q[(p * Hq + h) * D + c] * k[(j * Hkv + g) * D + c];
                s[j] = d / sqrt((double)D);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int64_t j = 0; j < T; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
            for (int64_t c = 0; c < D; c++) {
                double a = 0;
                for (int64_t j = 0; j < T; j++)
                    if (s[j] != -INFINITY) a += exp(s[j] - mx) / sum * v[(j * Hkv + g) * D + c];
                out[(p * Hq + h) * D + c] = a;
            }
        }
    }
}

static void dense_mask_case(void) {
    Rng r;
    rng_seed(&r, 7);
    int64_t T = 40, L = 32, Hq = 4, Hkv = 2, D = 8, ks = 6;
    int64_t nq = T * Hq * D, nk = T * Hkv * D;
    float *q = xmalloc(4 * nq), *k = xmalloc(4 * nk), *v = xmalloc(4 * nk), *o = xmalloc(4 * nq), *lse = xmalloc(4 * T * Hq);
    for (int64_t i = 0; i < nq; i++) q[i] = rng_normal(&r);
    for (int64_t i = 0; i < nk; i++) k[i] = rng_normal(&r), v[i] = rng_normal(&r);
    RefreshMask m = {1, L, ks, 7, GROUP_AGG_MAX};
    int32_t sel[2 * 6];
    attention_refresh_select_cpu(sel, q, k, 1, T, Hq, Hkv, D, &m);
    attention_forward_cpu(o, lse, q, k, v, sel, 1, T, Hq, Hkv, D, &m);
    double *ref = xmalloc(sizeof(double) * nq);
    dense_reference(ref, q, k, v, sel, T, Hq, Hkv, D, L, ks);
    float *reff = xmalloc(4 * nq);
    for (int64_t i = 0; i < nq; i++) reff[i] = (float)ref[i];
    tl_close("masked forward equals dense-mask reference", o, reff, nq, 1e-5, 1e-4);
    int sorted = 1;
    for (int64_t g = 0; g < Hkv; g++)
        for (int64_t i = 1; i < ks; i++) sorted &= sel[g * ks + i] > sel[g * ks + i - 1] && sel[g * ks + i] < L;
    tl_result(sorted, "selection is ascending, distinct and inside the prefill", "");
}

static void k_equals_l_is_causal(void) {
    Rng r;
    rng_seed(&r, 11);
    int64_t B = 2, T = 37, L = 29, Hq = 4, Hkv = 2, D = 8, nq = B * T * Hq * D, nk = B * T * Hkv * D;
    float *q = xmalloc(4 * nq), *k = xmalloc(4 * nk), *v = xmalloc(4 * nk), *dout = xmalloc(4 * nq);
    for (int64_t i = 0; i < nq; i++) q[i] = rng_normal(&r), dout[i] = rng_normal(&r);
    for (int64_t i = 0; i < nk; i++) k[i] = rng_normal(&r), v[i] = rng_normal(&r);
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
    RefreshMask masks[2] = {{0, 0, 0, 1, GROUP_AGG_MAX}, {1, L, L, 7, GROUP_AGG_MAX}};
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

static void bad_k(void *arg) {
    (void)arg;
    RefreshMask m = {1, 16, 17, 7, GROUP_AGG_MAX};
    refresh_mask_validate(&m, "test");
}
static void bad_kernel(void *arg) {
    (void)arg;
    RefreshMask m = {1, 16, 4, 6, GROUP_AGG_MAX};
    refresh_mask_validate(&m, "test");
}

int main(void) {
    hand_cases();
    dense_mask_case();
    k_equals_l_is_causal();
    tl_expect_death("K > L is rejected naming 'K'", bad_k, NULL, "'K' (17) cannot exceed");
    tl_expect_death("even pooling kernel is rejected", bad_kernel, NULL, "'pool_kernel' must be odd");
    return tl_finish();
}
