/* refreshkv (RefreshKV, the paper's §2.2): the partial cache C_p
 * starts as SnapKV's (last prefill query, pooled top-K). Partial steps
 * attend to C_p plus the tokens added since its last refresh, evicting the
 * lowest-scored C_p entry to stay at K. Every QC-stride steps each layer
 * compares the head-averaged query of the current token with the one of its
 * last full step; below the threshold, that layer takes a full step (every
 * key) and re-selects C_p from that step's attention.
 * --fixed-stride N instead takes a full step every N steps in every layer.
 *
 * The paper (§2.2) compares "query vectors" and argues that a similar query
 * gives a similar attention pattern. Over the same cached keys that holds
 * for the query as attention sees it, rotated to its position: the default
 * (opt.refresh_query post). The raw projection (pre) compares content only,
 * so a query that keeps its content while its position moves (a lookup at a
 * fixed offset back) never triggers a refresh. The head mean commutes with
 * the rotation (one rotation for every head), so the mean is rotated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/rope.h"
#include "partial_cache.h"
#include "policies.h"
#include "policy.h"

typedef struct {
    PartialCache cache;
    float *q_ref;     /* (n_layers, D): head-averaged query of the last full step */
    float *q_avg;     /* (D) */
    int *full_now;    /* per layer: this step is a full step */
    float *all_probs; /* (Hq, cap) scores of a full step, re-laid out per head */
} RefreshState;

static void head_mean(float *out, const float *q, int64_t Hq, int64_t D) {
    for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
    for (int64_t h = 0; h < Hq; h++)
        for (int64_t d = 0; d < D; d++) out[d] += q[h * D + d];
    for (int64_t d = 0; d < D; d++) out[d] /= (float)Hq;
}

/* The head-averaged query at position pos as the check compares it (opt.refresh_query). */
static void compared_query(const Policy *p, float *out, const float *q, int64_t pos) {
    int64_t D = p->shape.D;
    head_mean(out, q, p->shape.Hq, D);
    if (p->opt.refresh_query == QUERY_POST_ROPE)
        rope_forward_cpu(out, p->shape.rope_cos + pos * (D / 2), p->shape.rope_sin + pos * (D / 2), 1, 1, 1, D);
}

static double cosine(const float *a, const float *b, int64_t D) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t d = 0; d < D; d++) ab += (double)a[d] * b[d], aa += (double)a[d] * a[d], bb += (double)b[d] * b[d];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 1.0;
}

static void refreshkv_init(Policy *p, int64_t layer, const PrefillLayer *pre) {
    RefreshState *st = p->state;
    int64_t L = p->shape.L, W = p->shape.W, Hq = p->shape.Hq, D = p->shape.D;
    /* the last prefill query's row of each head: last_probs row W-1 */
    for (int64_t h = 0; h < Hq; h++)
        memcpy(st->all_probs + h * L, pre->last_probs + (h * W + W - 1) * L, sizeof(float) * (size_t)L);
    partial_cache_select(&st->cache, p, layer, st->all_probs, L, L, p->opt.budget);
    KV_CHECK(p->opt.refresh_query != QUERY_POST_ROPE || (p->shape.rope_cos && p->shape.rope_sin),
             "refreshkv: --refresh-query post needs the engine's RoPE tables");
    compared_query(p, st->q_ref + layer * D, pre->q_last, L - 1);
    st->full_now[layer] = 0;
    p->full_steps_per_layer[layer] = 0;
    if (layer == 0) p->decode_steps = 0;
}

static int wants_full_step(Policy *p, RefreshState *st, int64_t layer, int64_t pos, int64_t step, const float *q) {
    if (p->opt.fixed_stride > 0) return step % p->opt.fixed_stride == 0;
    if (p->opt.qc_stride <= 0 || step % p->opt.qc_stride != 0) return 0;
    compared_query(p, st->q_avg, q, pos);
    return cosine(st->q_avg, st->q_ref + layer * p->shape.D, p->shape.D) < p->opt.threshold;
}

static void refreshkv_choose(Policy *p, int64_t layer, int64_t pos, const float *q, int32_t **keys, int64_t *n) {
    RefreshState *st = p->state;
    int64_t step = pos - p->shape.L + 1; /* decode steps count from 1 */
    if (layer == 0) p->decode_steps++;
    st->full_now[layer] = wants_full_step(p, st, layer, pos, step, q);
    if (!st->full_now[layer]) {
        partial_cache_keys(&st->cache, p, layer, pos, 0, keys, n);
        return;
    }
    p->full_steps_per_layer[layer]++;
    compared_query(p, st->q_ref + layer * p->shape.D, q, pos);
    for (int64_t g = 0; g < p->shape.Hkv; g++) n[g] = POLICY_EVERY_KEY;
}

/* After a full step: re-select C_p from its attention over 0..pos. */
static void refreshkv_update(Policy *p, int64_t layer, int64_t pos, int32_t *const *keys, const int64_t *n,
                             const float *probs, int64_t max_n) {
    (void)keys, (void)n;
    RefreshState *st = p->state;
    if (!st->full_now[layer]) return;
    int64_t cnt = pos + 1; /* keys were 0..pos, in order */
    for (int64_t h = 0; h < p->shape.Hq; h++)
        memcpy(st->all_probs + h * cnt, probs + h * max_n, sizeof(float) * (size_t)cnt);
    partial_cache_select(&st->cache, p, layer, st->all_probs, cnt, cnt, p->opt.budget);
}

static void refreshkv_destroy(Policy *p) {
    RefreshState *st = p->state;
    partial_cache_free(&st->cache);
    free(st->q_ref), free(st->q_avg), free(st->full_now), free(st->all_probs);
    free(st);
}

void policy_refreshkv_create(Policy *p) {
    const PolicyShape *s = &p->shape;
    KV_CHECK(p->opt.fixed_stride >= 0 && p->opt.qc_stride >= 0, "refreshkv: strides must be >= 0");
    KV_CHECK(p->opt.threshold >= -1.0 && p->opt.threshold <= 1.0, "refreshkv: threshold must be in [-1, 1] (got %g)",
             p->opt.threshold);
    RefreshState *st = xcalloc(1, sizeof *st);
    partial_cache_init(&st->cache, s, s->cap);
    st->q_ref = xcalloc((size_t)(s->n_layers * s->D), sizeof(float));
    st->q_avg = xcalloc((size_t)s->D, sizeof(float));
    st->full_now = xcalloc((size_t)s->n_layers, sizeof(int));
    st->all_probs = xmalloc(sizeof(float) * (size_t)(s->Hq * s->cap));
    p->full_steps_per_layer = xcalloc((size_t)s->n_layers, sizeof(int64_t));
    p->state = st;
    if (p->opt.fixed_stride > 0)
        snprintf(p->label, sizeof p->label, "refreshkv (fixed stride %lld)", (long long)p->opt.fixed_stride);
    else
        snprintf(p->label, sizeof p->label, "refreshkv (QC %lld, s %.2f%s)", (long long)p->opt.qc_stride,
                 p->opt.threshold, p->opt.refresh_query == QUERY_PRE_ROPE ? ", pre-RoPE" : "");
    p->init = refreshkv_init;
    p->choose = refreshkv_choose;
    p->update = refreshkv_update;
    p->destroy = refreshkv_destroy;
}
