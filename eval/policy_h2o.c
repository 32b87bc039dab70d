/* h2o (H2O, Zhang et al. 2023): the K/2 most recent positions plus up to
 * K - K/2 "heavy hitters", the older positions with the largest cumulative
 * attention received from every query so far. The cumulative score starts
 * from the prefill's column sums (every prefill query) and each decode step
 * adds the attention it paid; scores are kept per query head and aggregated
 * over the GQA group (opt.agg) when ranking. When a position leaves the
 * recent window it joins the heavy set, and if that set is over its share
 * the lowest-scored entry is evicted (one per step, as in the paper).
 *
 * kvpress's ObservedAttentionPress is the heavy-hitter half alone, scored
 * by the mean attention per query that could see the key: opt.h2o_recent 0
 * (the recent share of the budget) and opt.h2o_score mean reproduce it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "policies.h"
#include "policy.h"

typedef struct {
    float *cum;     /* (n_layers, Hq, cap) attention received so far */
    KeptSet *heavy; /* (n_layers, Hkv) heavy hitters: positions older than the recent window */
    float *agg;     /* scratch: cap floats */
    int32_t *pos;   /* scratch: cap positions */
    int64_t recent, heavy_max;
} H2OState;

static float *layer_cum(Policy *p, int64_t layer) {
    H2OState *st = p->state;
    return st->cum + layer * p->shape.Hq * p->shape.cap;
}

/* Aggregated cumulative score of `pos` over the heads of KV group g, once
 * `queries` queries (positions 0..queries-1) have attended. */
static float group_score(Policy *p, const float *cum, int64_t g, int32_t pos, int64_t queries) {
    int64_t group = p->shape.Hq / p->shape.Hkv;
    float out;
    policy_group_scores(&out, cum + g * group * p->shape.cap + pos, p->shape.cap, group, 1, p->opt.agg);
    /* the mean: over the queries at positions pos.. that could see the key (a common factor of the group's heads) */
    return p->opt.h2o_score == H2O_SCORE_MEAN ? out / (float)(queries - pos) : out;
}

static void h2o_init(Policy *p, int64_t layer, const PrefillLayer *pre) {
    H2OState *st = p->state;
    int64_t L = p->shape.L, cap = p->shape.cap, Hq = p->shape.Hq, group = Hq / p->shape.Hkv;
    float *cum = layer_cum(p, layer);
    for (int64_t h = 0; h < Hq; h++) {
        memcpy(cum + h * cap, pre->colsum + h * L, sizeof(float) * (size_t)L);
        memset(cum + h * cap + L, 0, sizeof(float) * (size_t)(cap - L));
    }
    /* positions before the recent window [L - recent, L) compete for the heavy share */
    int64_t older = L - st->recent > 0 ? L - st->recent : 0;
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        KeptSet *s = &st->heavy[layer * p->shape.Hkv + g];
        policy_group_scores(st->agg, cum + g * group * cap, cap, group, older, p->opt.agg);
        if (p->opt.h2o_score == H2O_SCORE_MEAN)
            for (int64_t j = 0; j < older; j++) st->agg[j] /= (float)(L - j);
        int64_t m = policy_top_k(st->pos, st->agg + cap, st->agg, older, st->heavy_max);
        s->n = 0;
        for (int64_t i = 0; i < m; i++) kept_push(s, st->pos[i], 0.0f);
    }
}

static void h2o_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    (void)q;
    H2OState *st = p->state;
    int64_t from = pos - st->recent > 0 ? pos - st->recent : 0;
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        const KeptSet *s = &st->heavy[layer * p->shape.Hkv + g];
        int64_t c = 0;
        for (int64_t i = 0; i < s->n; i++) keys[g][c++] = s->pos[i];
        for (int64_t j = from; j < pos; j++) keys[g][c++] = (int32_t)j;
        n[g] = c;
    }
}

/* Adds this step's attention to the cumulative scores; the position that
 * leaves the recent window joins the heavy set, whose lowest entry goes if
 * the set is over its share. */
static void h2o_update(Policy *p, int64_t layer, int64_t pos, int32_t *const *keys, const int64_t *n,
                       const float *probs, int64_t max_n) {
    H2OState *st = p->state;
    int64_t cap = p->shape.cap, group = p->shape.Hq / p->shape.Hkv;
    float *cum = layer_cum(p, layer);
    for (int64_t h = 0; h < p->shape.Hq; h++) {
        const int32_t *k = keys[h / group];
        for (int64_t i = 0; i < n[h / group]; i++) cum[h * cap + k[i]] += probs[h * max_n + i];
    }
    int64_t leaving = pos - st->recent;
    if (leaving < 0) return;
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        KeptSet *s = &st->heavy[layer * p->shape.Hkv + g];
        kept_push(s, (int32_t)leaving, 0.0f);
        if (s->n <= st->heavy_max) continue;
        for (int64_t i = 0; i < s->n; i++) s->score[i] = group_score(p, cum, g, s->pos[i], pos + 1);
        kept_evict_lowest(s);
    }
}

static void h2o_destroy(Policy *p) {
    H2OState *st = p->state;
    for (int64_t i = 0; i < p->shape.n_layers * p->shape.Hkv; i++) kept_free(&st->heavy[i]);
    free(st->heavy), free(st->cum), free(st->agg), free(st->pos);
    free(st);
}

void policy_h2o_create(Policy *p) {
    const PolicyShape *s = &p->shape;
    H2OState *st = xcalloc(1, sizeof *st);
    KV_CHECK(p->opt.h2o_recent >= 0 && p->opt.h2o_recent <= 1, "h2o: the recent share must be in [0, 1] (got %g)",
             p->opt.h2o_recent);
    st->recent = (int64_t)((double)p->opt.budget * p->opt.h2o_recent); /* 0.5: K/2, the paper's split */
    st->heavy_max = p->opt.budget - st->recent;
    st->cum = xmalloc(sizeof(float) * (size_t)(s->n_layers * s->Hq * s->cap));
    st->heavy = xcalloc((size_t)(s->n_layers * s->Hkv), sizeof(KeptSet));
    /* one slot more than the share: the entry joining before the eviction */
    for (int64_t i = 0; i < s->n_layers * s->Hkv; i++) kept_init(&st->heavy[i], st->heavy_max + 1);
    st->agg = xmalloc(sizeof(float) * (size_t)(2 * s->cap));
    st->pos = xmalloc(sizeof(int32_t) * (size_t)s->cap);
    p->state = st;
    snprintf(p->label, sizeof p->label, "h2o (recent %lld, heavy %lld, %s%s)", (long long)st->recent,
             (long long)st->heavy_max, policy_agg_name(p->opt.agg),
             p->opt.h2o_score == H2O_SCORE_MEAN ? ", mean score" : "");
    p->init = h2o_init;
    p->choose = h2o_choose;
    p->update = h2o_update;
    p->destroy = h2o_destroy;
}
