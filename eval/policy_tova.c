/* tova (TOVA, Oren et al. 2024): a cache of at most K positions; each time a
 * token is added, the position the current query attends to least is
 * evicted, the new token included.
 *
 * Default (TOVA's reference code, schwartz-lab-NLP/TOVA, and kvpress's
 * TOVAPress): one set per layer, shared by every KV head, ranked by the mean
 * over all query heads of the attention row (opt.head_sets shared); the
 * prompt is reduced once, by the row of its last query (opt.tova_window 1).
 *
 * opt.head_sets group keeps one set per KV head, scored by its own GQA group
 * (opt.agg). opt.tova_window N > 1 replays the rule over the last N prefill
 * queries: the shared prefill is full attention, so the query at t is the
 * one TOVA would compute, and its attention over a subset S is its full row
 * renormalised over S (per head). The cache entering that window is every
 * position before it, the first window query evicts down to K at once (the
 * one approximation: TOVA would have evicted those one by one with earlier
 * queries' rows, which are not kept), and each later window query adds
 * itself and evicts one.
 *
 * kvpress also never evicts the newest position (its score is set above
 * every other); TOVA's code does not enforce it: opt.tova_keep_last. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/util.h"
#include "../kernels/attention.h"
#include "policies.h"
#include "policy.h"

typedef struct {
    KeptSet *kept;   /* (n_layers, Hkv) */
    float *head;     /* scratch: (Hq, cap) per-head scores of the kept entries */
    float *agg;      /* scratch: cap */
} TovaState;

/* How the heads' scores combine: the mean over all heads for a shared set
 * (the reference), the GQA aggregation for a group's. */
static int tova_agg(const Policy *p) { return p->opt.head_sets == HEAD_SETS_SHARED ? GROUP_AGG_MEAN : p->opt.agg; }

/* Scores set s by prefill row r (query L-W+r), renormalised per head over s;
 * with tova_keep_last the positions from `keep` on are never the lowest. */
static void score_by_row(Policy *p, TovaState *st, KeptSet *s, int64_t g, const float *last_probs, int64_t r,
                         int64_t keep) {
    int64_t L = p->shape.L, W = p->shape.W, cap = p->shape.cap, h0, nh;
    policy_head_scope(p, g, &h0, &nh);
    for (int64_t k = 0; k < nh; k++) {
        const float *row = last_probs + ((h0 + k) * W + r) * L;
        double z = 0;
        for (int64_t i = 0; i < s->n; i++) z += row[s->pos[i]];
        for (int64_t i = 0; i < s->n; i++) st->head[k * cap + i] = z > 0 ? (float)(row[s->pos[i]] / z) : 0.0f;
    }
    policy_group_scores(s->score, st->head, cap, nh, s->n, tova_agg(p));
    if (p->opt.tova_keep_last)
        for (int64_t i = 0; i < s->n; i++)
            if (s->pos[i] >= keep) s->score[i] = FLT_MAX;
}

static void tova_init(Policy *p, int64_t layer, const PrefillLayer *pre) {
    TovaState *st = p->state;
    int64_t L = p->shape.L, W = p->shape.W, K = p->opt.budget;
    int64_t tw = p->opt.tova_window < W ? p->opt.tova_window : W; /* the replayed queries: L-tw..L-1 */
    KV_CHECK(!p->opt.tova_keep_last || K > tw, "tova --tova-keep-last: budget %lld must exceed the window %lld",
             (long long)K, (long long)tw);
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        KeptSet *s = &st->kept[layer * p->shape.Hkv + g];
        s->n = 0;
        for (int64_t j = 0; j < L - tw; j++) kept_push(s, (int32_t)j, 0.0f);
        for (int64_t r = W - tw; r < W; r++) {
            kept_push(s, (int32_t)(L - W + r), 0.0f);
            if (s->n <= K) continue;
            score_by_row(p, st, s, g, pre->last_probs, r, L - tw);
            kept_shrink_to(s, K);
        }
    }
}

static void tova_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    (void)q, (void)pos;
    TovaState *st = p->state;
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        const KeptSet *s = &st->kept[layer * p->shape.Hkv + g];
        for (int64_t i = 0; i < s->n; i++) keys[g][i] = s->pos[i];
        n[g] = s->n;
    }
}

/* The step attended to the kept positions plus itself: all of them are the
 * candidates, scored by this query's attention; the lowest goes if over K. */
static void tova_update(Policy *p, int64_t layer, int64_t pos, int32_t *const *keys, const int64_t *n,
                        const float *probs, int64_t max_n) {
    (void)pos;
    TovaState *st = p->state;
    for (int64_t g = 0; g < p->shape.Hkv; g++) {
        KeptSet *s = &st->kept[layer * p->shape.Hkv + g];
        int64_t h0, nh;
        /* shared sets: every KV head holds the same list, so each head's row is aligned with it */
        policy_head_scope(p, g, &h0, &nh);
        policy_group_scores(st->agg, probs + h0 * max_n, max_n, nh, n[g], tova_agg(p));
        if (p->opt.tova_keep_last) st->agg[n[g] - 1] = FLT_MAX; /* the current position (last) stays, as in kvpress */
        s->n = 0;
        for (int64_t i = 0; i < n[g]; i++) kept_push(s, keys[g][i], st->agg[i]);
        if (s->n > p->opt.budget) kept_evict_lowest(s);
    }
}

static void tova_destroy(Policy *p) {
    TovaState *st = p->state;
    for (int64_t i = 0; i < p->shape.n_layers * p->shape.Hkv; i++) kept_free(&st->kept[i]);
    free(st->kept), free(st->head), free(st->agg);
    free(st);
}

void policy_tova_create(Policy *p) {
    const PolicyShape *s = &p->shape;
    TovaState *st = xcalloc(1, sizeof *st);
    st->kept = xcalloc((size_t)(s->n_layers * s->Hkv), sizeof(KeptSet));
    for (int64_t i = 0; i < s->n_layers * s->Hkv; i++) kept_init(&st->kept[i], s->cap);
    KV_CHECK(p->opt.tova_window >= 1, "tova: the replayed window must be >= 1 query (got %lld)",
             (long long)p->opt.tova_window);
    st->head = xmalloc(sizeof(float) * (size_t)(s->Hq * s->cap));
    st->agg = xmalloc(sizeof(float) * (size_t)s->cap);
    p->state = st;
    const PolicyOptions *o = &p->opt;
    snprintf(p->label, sizeof p->label, "tova (%s heads, %s, window %lld%s)", policy_head_sets_names[o->head_sets],
             policy_agg_name(tova_agg(p)), (long long)o->tova_window, o->tova_keep_last ? ", last kept" : "");
    p->init = tova_init;
    p->choose = tova_choose;
    p->update = tova_update;
    p->destroy = tova_destroy;
}
