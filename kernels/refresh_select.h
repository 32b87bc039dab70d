#ifndef KVCPT_REFRESH_SELECT_H
#define KVCPT_REFRESH_SELECT_H
/* The selection maths that RefreshKV and the score-based eval policies
 * share, written once so that the training mask (kernels/attention.c) and
 * the eval's caches (eval/policy.c, eval/partial_cache.c) rank keys with the
 * same operations in the same order:
 *   scores -> group aggregation over a KV group's query heads (GroupAgg)
 *          -> pooling along the keys (odd kernel, stride 1)
 *          -> top-K, higher score first, equal scores to the lower position.
 * The training mask also computes the selecting query's softmax here; the
 * eval takes those probabilities from its own attention rows instead.
 * Every function is plain C with a fixed loop order: no function here
 * reorders a sum, so callers keep their results bit for bit. */
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a GQA group's query heads combine their scores for one KV head: the
 * maximum, the mean, or the group's first head alone. */
typedef enum { GROUP_AGG_MAX = 0, GROUP_AGG_MEAN = 1, GROUP_AGG_FIRST = 2 } GroupAgg;

/* "max", "mean" or "first" (an out-of-range value reads "max"). */
const char *group_agg_name(GroupAgg a);
/* The GroupAgg named s ("max", "mean", "first"); dies naming `origin` (the
 * option or config field it came from) otherwise. */
GroupAgg group_agg_parse(const char *s, const char *origin);

/* A key's selection score and position. */
typedef struct {
    float score;
    int32_t pos;
} SelectRanked;

/* p[0..n) = softmax over keys 0..n-1 of scale * <qrow, key j>, key j at
 * kbase + j * kstride (D floats each): max-subtracted, expf, summed in key
 * order, divided. */
void select_softmax_row(float *p, const float *qrow, const float *kbase, int64_t kstride, int64_t n, int64_t D,
                        float scale);

/* How many of a group's `group` query heads score its keys under agg: 1 for
 * GROUP_AGG_FIRST, else all of them. */
int64_t select_group_heads(int agg, int64_t group);
/* Folds head number hh (0 first) of the group into agg[0..n): head 0 sets
 * it, later heads take the maximum (GROUP_AGG_MAX) or add (otherwise). */
void select_group_fold(float *agg, const float *head, int64_t n, int64_t hh, int agg_kind);
/* After the last fold: GROUP_AGG_MEAN divides by the group size. */
void select_group_finish(float *agg, int64_t n, int64_t group, int agg_kind);
/* out[j] = aggregate over the group's heads of per_head[h*head_stride + j]:
 * select_group_fold of heads 0..select_group_heads-1, then finish. */
void select_group_scores(float *out, const float *per_head, int64_t head_stride, int64_t group, int64_t n,
                         int agg_kind);

/* out[j] = max of in[j - kernel/2 .. j + kernel/2], the window clipped at
 * the edges (kernel odd; 1 copies). out and in must not overlap. */
void select_max_pool(float *out, const float *in, int64_t n, int64_t kernel);
/* out[j] = the sum of in over the same window divided by kernel: the zeros
 * past the edges count (torch's avg_pool1d with count_include_pad, what
 * kvpress does). out and in must not overlap. */
void select_avg_pool(float *out, const float *in, int64_t n, int64_t kernel);

/* order[0..n) = (scores[j], j) sorted best first: higher score, equal scores
 * to the lower position. Returns min(k, n): the first that many entries are
 * the top-K. */
int64_t select_top_k(SelectRanked *order, const float *scores, int64_t n, int64_t k);
/* Sorts r[0..n) in retention order: higher score first, equal scores to the
 * higher position. The eval's partial cache evicts the lowest score, the
 * lower position first (kept_evict_lowest), so a cache that only evicts
 * holds, c entries left, the first c entries of this order. */
void select_sort_retention(SelectRanked *r, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
