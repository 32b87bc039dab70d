/* kvec (K-VEC, the paper's Alg. 1): SnapKV scores adjusted for token
 * coverage across heads and layers, selected once at prefill; decode then
 * behaves as snapkv (evicts the lowest-scored prefill entry to stay at K, or
 * keeps every new token with --snapkv-grow).
 *
 * Per layer l (Alg. 1):
 *   P[h,t]   = mean attention of the last O queries (O = opt.kvec_window), per
 *              query head; the delta heads with the lowest std of P over t
 *              recompute P with the wide window O' (cross-head coverage);
 *   I[t]     = mean over the last O queries of the max over all heads;
 *   focus[t] = I[t] * (1 - n_t / (l + 1)), n_t = earlier layers in which
 *              some KV head kept t (cross-layer coverage);
 *   P'       = P + lambda * focus; the top floor(beta K) entries by P are
 *              forced above every other score; top-K of P' is kept.
 * O is its own option (16: the paper's value after Eq. 8, below O' = 32),
 * not SnapKV's window (1).
 * Decisions (the paper leaves them open):
 * - GQA: our cache is per KV head, so P is aggregated over the group
 *   (opt.agg) before the focus is added and before the top-beta K are taken.
 * - SnapKV's max-pooling (opt.pool_kernel) is applied to P after the window
 *   means (K-VEC adapts SnapKV's scoring); the std that picks the heads is
 *   taken from the unpooled means (Alg. 1 line 3); I is not pooled.
 * - Alg. 1 sets preserved scores to 1.0, which an adjusted score can exceed
 *   (P' <= 1 + lambda); we use 2 + lambda so that they are kept, as Eq. 16's
 *   text requires.
 * - Coverage needs the layers in order: init must be called for 0..n-1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "partial_cache.h"
#include "policies.h"
#include "policy.h"

typedef struct {
    PartialCache cache;
    int64_t *covered;  /* (cap) n_t: earlier layers that kept t */
    int64_t next_layer;
    float *p;          /* (Hq, cap) per-head scores */
    float *focus;      /* (cap) */
    float *agg, *tmp;  /* (cap) */
    float *sc;         /* (cap) */
    int32_t *pos;      /* (cap) */
    int *wide;         /* (Hq) head uses O' */
    unsigned char *hit; /* (cap) kept by some KV head in this layer */
} KvecState;

/* out[t] = mean of prefill rows W-o..W-1 of head h. */
static void window_mean(const Policy *p, const PrefillLayer *pre, int64_t h, int64_t o, float *out) {
    int64_t L = p->shape.L, W = p->shape.W;
    for (int64_t t = 0; t < L; t++) out[t] = 0.0f;
    for (int64_t r = W - o; r < W; r++)
        for (int64_t t = 0; t < L; t++) out[t] += pre->last_probs[(h * W + r) * L + t];
    for (int64_t t = 0; t < L; t++) out[t] /= (float)o;
}

static double std_of(const float *x, int64_t n) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; i++) m += x[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    return sqrt(v / (double)n);
}

/* Cross-head coverage: marks the delta heads whose window-O scores have the
 * lowest std (ties: the lower head). */
static void pick_wide_heads(const Policy *p, KvecState *st, const double *sd) {
    int64_t Hq = p->shape.Hq, delta = p->opt.kvec_heads < Hq ? p->opt.kvec_heads : Hq;
    for (int64_t h = 0; h < Hq; h++) st->wide[h] = 0;
    for (int64_t k = 0; k < delta; k++) {
        int64_t best = -1;
        for (int64_t h = 0; h < Hq; h++)
            if (!st->wide[h] && (best < 0 || sd[h] < sd[best])) best = h;
        st->wide[best] = 1;
    }
}

/* focus[t] = I[t] (1 - coverage[t]) for layer `layer` (Alg. 1 lines 8-10). */
static void cross_layer_focus(const Policy *p, KvecState *st, const PrefillLayer *pre, int64_t layer, int64_t o) {
    int64_t L = p->shape.L, W = p->shape.W, Hq = p->shape.Hq;
    for (int64_t t = 0; t < L; t++) st->focus[t] = 0.0f;
    for (int64_t r = W - o; r < W; r++)
        for (int64_t t = 0; t < L; t++) {
            float mx = pre->last_probs[r * L + t];
            for (int64_t h = 1; h < Hq; h++) {
                float v = pre->last_probs[(h * W + r) * L + t];
                mx = v > mx ? v : mx;
            }
            st->focus[t] += mx;
        }
    for (int64_t t = 0; t < L; t++)
        st->focus[t] = st->focus[t] / (float)o * (1.0f - (float)st->covered[t] / (float)(layer + 1));
}

/* Scores per query head: window O, or O' for the least focused heads; pooled. */
static void head_scores(const Policy *p, KvecState *st, const PrefillLayer *pre, int64_t o, int64_t o_wide) {
    int64_t L = p->shape.L, Hq = p->shape.Hq, cap = p->shape.cap;
    double *sd = xmalloc(sizeof(double) * (size_t)Hq);
    for (int64_t h = 0; h < Hq; h++) {
        window_mean(p, pre, h, o, st->p + h * cap);
        sd[h] = std_of(st->p + h * cap, L);
    }
    pick_wide_heads(p, st, sd);
    free(sd);
    for (int64_t h = 0; h < Hq; h++) {
        if (st->wide[h]) window_mean(p, pre, h, o_wide, st->p + h * cap);
        policy_pool(st->p + h * cap, st->tmp, L, p->opt.pool_kernel, p->opt.pool);
    }
}

static void kvec_init(Policy *p, int64_t layer, const PrefillLayer *pre) {
    KvecState *st = p->state;
    int64_t L = p->shape.L, W = p->shape.W, K = p->opt.budget, Hkv = p->shape.Hkv, cap = p->shape.cap;
    int64_t group = p->shape.Hq / Hkv;
    if (layer == 0) {
        memset(st->covered, 0, sizeof(int64_t) * (size_t)cap);
        st->next_layer = 0;
    }
    KV_CHECK(layer == st->next_layer, "kvec: layers must be initialised in order (got %lld, expected %lld)",
             (long long)layer, (long long)st->next_layer);
    st->next_layer++;
    int64_t o = p->opt.kvec_window < W ? p->opt.kvec_window : W,
            o_wide = p->opt.kvec_wide_window < W ? p->opt.kvec_wide_window : W;
    head_scores(p, st, pre, o, o_wide);
    cross_layer_focus(p, st, pre, layer, o);
    int64_t keep = (int64_t)floor(p->opt.kvec_keep_frac * (double)K);
    float forced = 2.0f + (float)p->opt.kvec_lambda;
    memset(st->hit, 0, (size_t)L);
    for (int64_t g = 0; g < Hkv; g++) {
        policy_group_scores(st->agg, st->p + g * group * cap, cap, group, L, p->opt.agg);
        int64_t m = policy_top_k(st->pos, st->sc, st->agg, L, keep);
        for (int64_t t = 0; t < L; t++) st->agg[t] += (float)p->opt.kvec_lambda * st->focus[t];
        for (int64_t i = 0; i < m; i++) st->agg[st->pos[i]] = forced;
        m = policy_top_k(st->pos, st->sc, st->agg, L, K);
        KeptSet *s = &st->cache.sets[layer * Hkv + g];
        s->n = 0;
        for (int64_t i = 0; i < m; i++) kept_push(s, st->pos[i], st->sc[i]), st->hit[st->pos[i]] = 1;
    }
    for (int64_t t = 0; t < L; t++) st->covered[t] += st->hit[t];
    st->cache.since[layer] = L;
}

static void kvec_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    (void)q;
    partial_cache_keys(&((KvecState *)p->state)->cache, p, layer, pos, p->opt.snapkv_grow, keys, n);
}

static void kvec_destroy(Policy *p) {
    KvecState *st = p->state;
    partial_cache_free(&st->cache);
    free(st->covered), free(st->p), free(st->focus), free(st->agg), free(st->tmp), free(st->sc), free(st->pos);
    free(st->wide), free(st->hit);
    free(st);
}

void policy_kvec_create(Policy *p) {
    const PolicyShape *s = &p->shape;
    const PolicyOptions *o = &p->opt;
    KV_CHECK(o->kvec_window >= 1 && o->kvec_wide_window >= 1, "kvec: observation windows must be >= 1");
    KV_CHECK(o->kvec_heads >= 0, "kvec: head count must be >= 0 (got %lld)", (long long)o->kvec_heads);
    KV_CHECK(o->kvec_keep_frac >= 0 && o->kvec_keep_frac <= 1, "kvec: keep fraction must be in [0, 1] (got %g)",
             o->kvec_keep_frac);
    KV_CHECK(o->kvec_lambda >= 0, "kvec: lambda must be >= 0 (got %g)", o->kvec_lambda);
    KvecState *st = xcalloc(1, sizeof *st);
    partial_cache_init(&st->cache, s, s->cap);
    int64_t cap = s->cap;
    st->covered = xcalloc((size_t)cap, sizeof(int64_t));
    st->p = xmalloc(sizeof(float) * (size_t)(s->Hq * cap));
    st->focus = xmalloc(sizeof(float) * (size_t)cap);
    st->agg = xmalloc(sizeof(float) * (size_t)cap);
    st->tmp = xmalloc(sizeof(float) * (size_t)cap);
    st->sc = xmalloc(sizeof(float) * (size_t)cap);
    st->pos = xmalloc(sizeof(int32_t) * (size_t)cap);
    st->wide = xcalloc((size_t)s->Hq, sizeof(int));
    st->hit = xmalloc((size_t)cap);
    p->state = st;
    snprintf(p->label, sizeof p->label, "kvec (O %lld, O' %lld, delta %lld, lambda %.2g, beta %.2g%s)",
             (long long)o->kvec_window, (long long)o->kvec_wide_window, (long long)o->kvec_heads, o->kvec_lambda,
             o->kvec_keep_frac, o->snapkv_grow ? ", grow" : "");
    p->init = kvec_init;
    p->choose = kvec_choose;
    p->update =
        NULL; /* the choice comes from the prefill; decode attention never changes it: the engine skips probabilities */
    p->destroy = kvec_destroy;
}
