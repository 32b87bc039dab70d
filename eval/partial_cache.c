#include "partial_cache.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

void partial_cache_init(PartialCache *c, const PolicyShape *s, int64_t cap) {
    c->Hkv = s->Hkv, c->cap = cap;
    c->sets = xcalloc((size_t)(s->n_layers * s->Hkv), sizeof(KeptSet));
    for (int64_t i = 0; i < s->n_layers * s->Hkv; i++) kept_init(&c->sets[i], cap);
    c->since = xcalloc((size_t)s->n_layers, sizeof(int64_t));
    c->work = xmalloc(sizeof(float) * (size_t)(3 * cap));
    c->n_layers = s->n_layers;
}

void partial_cache_free(PartialCache *c) {
    for (int64_t i = 0; i < c->n_layers * c->Hkv; i++) kept_free(&c->sets[i]);
    free(c->sets), free(c->since), free(c->work);
    memset(c, 0, sizeof *c);
}

void partial_cache_select(PartialCache *c, const Policy *p, int64_t layer, const float *per_head, int64_t stride,
                          int64_t n, int64_t k) {
    int64_t group = p->shape.Hq / p->shape.Hkv;
    float *agg = c->work, *tmp = c->work + c->cap;
    int32_t *pos = (int32_t *)(c->work + 2 * c->cap);
    float *sc = tmp; /* reused after pooling */
    for (int64_t g = 0; g < c->Hkv; g++) {
        policy_group_scores(agg, per_head + g * group * stride, stride, group, n, p->opt.agg);
        policy_pool(agg, tmp, n, p->opt.pool_kernel, p->opt.pool);
        KeptSet *s = &c->sets[layer * c->Hkv + g];
        int64_t m = policy_top_k(pos, sc, agg, n, k);
        s->n = 0;
        for (int64_t i = 0; i < m; i++) kept_push(s, pos[i], sc[i]);
    }
    c->since[layer] = n;
}

void partial_cache_keys(PartialCache *c, const Policy *p, int64_t layer, int64_t pos, int grow, int32_t **keys,
                        int64_t *n) {
    int64_t K = p->opt.budget;
    for (int64_t g = 0; g < c->Hkv; g++) {
        KeptSet *s = &c->sets[layer * c->Hkv + g];
        int64_t since = c->since[layer];
        if (!grow) {
            while (s->n > 0 && s->n + (pos - since) > K) kept_evict_lowest(s);
            if (pos - since > K) since = pos - K; /* more new tokens than the budget: the oldest go */
        }
        int64_t k = 0;
        for (int64_t i = 0; i < s->n; i++) keys[g][k++] = s->pos[i];
        for (int64_t j = since; j < pos; j++) keys[g][k++] = (int32_t)j;
        n[g] = k;
    }
}
