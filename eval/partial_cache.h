#ifndef KVCPT_PARTIAL_CACHE_H
#define KVCPT_PARTIAL_CACHE_H
/* The partial cache SnapKV and RefreshKV share: per (layer, KV head) a
 * scored set C_p selected from an attention distribution, plus every
 * position from `since` on (tokens added after the last selection, never
 * evicted). While |C_p| + new tokens exceeds the budget, the lowest-scored
 * C_p entry is evicted. SnapKV selects once (since = L); RefreshKV
 * re-selects at each full step (since = that step's position + 1). */
#include <stdint.h>

#include "policy.h"

typedef struct {
    KeptSet *sets;   /* n_layers * Hkv */
    int64_t *since;  /* per layer */
    float *work;     /* scratch: 3 * cap floats */
    int64_t n_layers, Hkv, cap;
} PartialCache;

void partial_cache_init(PartialCache *c, const PolicyShape *s, int64_t cap);
void partial_cache_free(PartialCache *c);
/* Selects C_p of layer `layer` from per-head scores over positions
 * 0..n-1 (head h at per_head + h*stride): group-aggregated, pooled
 * (opt.pool, opt.pool_kernel), the top k. New tokens start at position n. */
void partial_cache_select(PartialCache *c, const Policy *p, int64_t layer, const float *per_head, int64_t stride,
                          int64_t n, int64_t k);
/* Keys for position pos: C_p ∪ [since, pos), after evictions to the budget
 * (no eviction when grow is set). */
void partial_cache_keys(PartialCache *c, const Policy *p, int64_t layer, int64_t pos, int grow, int32_t **keys,
                        int64_t *n);
#endif
