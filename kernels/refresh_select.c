#include "refresh_select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

const char *group_agg_name(GroupAgg a) { return a == GROUP_AGG_MEAN ? "mean" : a == GROUP_AGG_FIRST ? "first" : "max"; }

GroupAgg group_agg_parse(const char *s, const char *origin) {
    if (strcmp(s, "max") == 0) return GROUP_AGG_MAX;
    if (strcmp(s, "mean") == 0) return GROUP_AGG_MEAN;
    if (strcmp(s, "first") == 0) return GROUP_AGG_FIRST;
    die("%s: group aggregation must be max, mean or first (got '%s')", origin, s);
}

/* A plain left-to-right dot product: the selection's scores are not the
 * attention kernel's (which sums in lanes), and must not change with it. */
static inline float dot(const float *a, const float *b, int64_t D) {
    float s = 0.0f;
    for (int64_t d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

void select_softmax_row(float *p, const float *qrow, const float *kbase, int64_t kstride, int64_t n, int64_t D,
                        float scale) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        p[j] = dot(qrow, kbase + j * kstride, D) * scale;
        mx = p[j] > mx ? p[j] : mx;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) sum += (p[j] = expf(p[j] - mx));
    for (int64_t j = 0; j < n; j++) p[j] /= sum;
}

int64_t select_group_heads(int agg_kind, int64_t group) { return agg_kind == GROUP_AGG_FIRST ? 1 : group; }

void select_group_fold(float *agg, const float *head, int64_t n, int64_t hh, int agg_kind) {
    if (hh == 0) {
        for (int64_t j = 0; j < n; j++) agg[j] = head[j];
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        float v = head[j];
        agg[j] = agg_kind == GROUP_AGG_MAX ? (v > agg[j] ? v : agg[j]) : agg[j] + v;
    }
}

void select_group_finish(float *agg, int64_t n, int64_t group, int agg_kind) {
    if (agg_kind == GROUP_AGG_MEAN)
        for (int64_t j = 0; j < n; j++) agg[j] /= (float)group;
}

void select_group_scores(float *out, const float *per_head, int64_t head_stride, int64_t group, int64_t n,
                         int agg_kind) {
    int64_t nh = select_group_heads(agg_kind, group);
    for (int64_t h = 0; h < nh; h++) select_group_fold(out, per_head + h * head_stride, n, h, agg_kind);
    select_group_finish(out, n, group, agg_kind);
}

void select_max_pool(float *out, const float *in, int64_t n, int64_t kernel) {
    int64_t r = kernel / 2;
    for (int64_t j = 0; j < n; j++) {
        int64_t lo = j - r < 0 ? 0 : j - r, hi = j + r > n - 1 ? n - 1 : j + r;
        float mx = in[lo];
        for (int64_t i = lo + 1; i <= hi; i++) mx = in[i] > mx ? in[i] : mx;
        out[j] = mx;
    }
}

void select_avg_pool(float *out, const float *in, int64_t n, int64_t kernel) {
    int64_t r = kernel / 2;
    for (int64_t j = 0; j < n; j++) {
        int64_t lo = j - r < 0 ? 0 : j - r, hi = j + r > n - 1 ? n - 1 : j + r;
        float sum = 0.0f;
        for (int64_t i = lo; i <= hi; i++) sum += in[i];
        out[j] = sum / (float)kernel;
    }
}

/* Higher score first; equal scores keep the lower position first. */
static int by_score_then_pos(const void *a, const void *b) {
    const SelectRanked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

int64_t select_top_k(SelectRanked *order, const float *scores, int64_t n, int64_t k) {
    for (int64_t j = 0; j < n; j++) order[j] = (SelectRanked){scores[j], (int32_t)j};
    qsort(order, (size_t)n, sizeof(SelectRanked), by_score_then_pos);
    return k < n ? k : n;
}

/* Higher score first; equal scores keep the higher position first. */
static int by_retention(const void *a, const void *b) {
    const SelectRanked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return (x->pos < y->pos) - (x->pos > y->pos);
}

void select_sort_retention(SelectRanked *r, int64_t n) { qsort(r, (size_t)n, sizeof(SelectRanked), by_retention); }
