/* snapkv (SnapKV): at prefill, the attention of the last `window` queries,
 * averaged, aggregated over the GQA group and pooled, picks the top-K
 * prefill keys. Decode keeps the cache at K by evicting the lowest-scored
 * prefill entry as new tokens arrive (the paper's setting), or keeps every
 * new token with --snapkv-grow.
 *
 * With snapkv_keep_window (the default: SnapKV's code and kvpress's
 * SnapKVPress both concatenate the window to the selection), the window's
 * own `window` positions are always kept and only the positions before it
 * are scored and pooled (the pooling sees zeros, not the window, past the
 * prefix's end); the top K - window of those complete the set. Off, the
 * window competes with the prefix for all K slots. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/util.h"
#include "partial_cache.h"
#include "policies.h"
#include "policy.h"

typedef struct {
    PartialCache cache;
    float *window_sum;
} SnapState;

static void snapkv_init(Policy *p, int64_t layer, const PrefillLayer *pre) {
    SnapState *st = p->state;
    int64_t L = p->shape.L, W = p->shape.W, w = p->opt.window < W ? p->opt.window : W;
    for (int64_t h = 0; h < p->shape.Hq; h++) {
        float *s = st->window_sum + h * L;
        for (int64_t j = 0; j < L; j++) s[j] = 0.0f;
        for (int64_t r = W - w; r < W; r++)
            for (int64_t j = 0; j < L; j++) s[j] += pre->last_probs[(h * W + r) * L + j];
        for (int64_t j = 0; j < L; j++) s[j] /= (float)w; /* the mean: only the ranking matters, kvpress takes it */
    }
    if (!p->opt.snapkv_keep_window) {
        partial_cache_select(&st->cache, p, layer, st->window_sum, L, L, p->opt.budget);
        return;
    }
    if (p->opt.budget <= w) { /* the window alone fills the budget: its K most recent positions */
        for (int64_t g = 0; g < p->shape.Hkv; g++) {
            KeptSet *s = &st->cache.sets[layer * p->shape.Hkv + g];
            s->n = 0;
            for (int64_t j = L - p->opt.budget; j < L; j++) kept_push(s, (int32_t)j, FLT_MAX);
        }
        st->cache.since[layer] = L;
        return;
    }
    partial_cache_select(&st->cache, p, layer, st->window_sum, L, L - w, p->opt.budget - w);
    for (int64_t g = 0; g < p->shape.Hkv; g++)
        for (int64_t j = L - w; j < L; j++) kept_push(&st->cache.sets[layer * p->shape.Hkv + g], (int32_t)j, FLT_MAX);
    st->cache.since[layer] = L;
}

static void snapkv_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    (void)q;
    partial_cache_keys(&((SnapState *)p->state)->cache, p, layer, pos, p->opt.snapkv_grow, keys, n);
}

static void snapkv_destroy(Policy *p) {
    SnapState *st = p->state;
    partial_cache_free(&st->cache);
    free(st->window_sum);
    free(st);
}

void policy_snapkv_create(Policy *p) {
    KV_CHECK(p->opt.window >= 1, "snapkv: observation window must be >= 1");
    SnapState *st = xcalloc(1, sizeof *st);
    partial_cache_init(&st->cache, &p->shape, p->shape.cap);
    st->window_sum = xmalloc(sizeof(float) * (size_t)(p->shape.Hq * p->shape.L));
    p->state = st;
    /* pooling and aggregation show only when not the default */
    const PolicyOptions *o = &p->opt, d = policy_default_options(o->budget);
    char pool[48] = "", agg[16] = "";
    if (o->pool != d.pool || o->pool_kernel != d.pool_kernel)
        snprintf(pool, sizeof pool, ", %s-pool %lld", policy_pool_names[o->pool], (long long)o->pool_kernel);
    if (o->agg != d.agg) snprintf(agg, sizeof agg, ", %s", policy_agg_name(o->agg));
    snprintf(p->label, sizeof p->label, "snapkv (window %lld%s%s%s%s)", (long long)o->window,
             o->snapkv_keep_window ? " kept" : "", pool, agg, o->snapkv_grow ? ", grow" : "");
    p->init = snapkv_init;
    p->choose = snapkv_choose;
    p->update =
        NULL; /* the choice comes from the prefill; decode attention never changes it: the engine skips probabilities */
    p->destroy = snapkv_destroy;
}
