#include "shard_plan.h"

#include <stdlib.h>

#include "../common/util.h"

/* Units: maximal runs of tensors with the same layer index, which the layout
 * keeps contiguous (embed | layer 0 | ... | layer N-1 | norm, lm_head). */
static void find_units(ShardPlan *p, const ParamLayout *pl) {
    p->unit_begin = xmalloc(sizeof(int64_t) * (size_t)(pl->n + 1));
    p->n_units = 0;
    for (int i = 0; i < pl->n; i++)
        if (i == 0 || pl->t[i].layer != pl->t[i - 1].layer) p->unit_begin[p->n_units++] = pl->t[i].offset;
    p->unit_begin[p->n_units] = pl->total;
}

/* The ideal even cut, moved down to a block boundary of its tensor. */
static int64_t aligned_cut(const ParamLayout *pl, int64_t begin, int64_t numel, int r, int world) {
    int64_t x = begin + (int64_t)((__int128)numel * r / world);
    if (x >= begin + numel) return begin + numel;
    const ParamTensor *t = &pl->t[param_layout_tensor_at(pl, x)];
    return t->offset + (x - t->offset) / SHARD_ALIGN * SHARD_ALIGN;
}

void shard_plan_build(ShardPlan *p, const ParamLayout *pl, int world, int rank) {
    KV_CHECK(world >= 1 && rank >= 0 && rank < world, "shard plan: rank %d is not in [0, %d)", rank, world);
    p->world = world, p->rank = rank, p->layout = pl;
    find_units(p, pl);
    p->cut = xmalloc(sizeof(int64_t) * (size_t)p->n_units * (size_t)(world + 1));
    p->local_offset = xmalloc(sizeof(int64_t) * (size_t)p->n_units);
    p->local_numel = p->max_unit = 0;
    for (int u = 0; u < p->n_units; u++) {
        int64_t b = p->unit_begin[u], n = p->unit_begin[u + 1] - b;
        int64_t *c = p->cut + (int64_t)u * (world + 1);
        for (int r = 0; r <= world; r++) {
            c[r] = r == world ? b + n : aligned_cut(pl, b, n, r, world);
            if (r > 0 && c[r] < c[r - 1]) c[r] = c[r - 1];
        }
        p->local_offset[u] = p->local_numel;
        p->local_numel += c[rank + 1] - c[rank];
        if (n > p->max_unit) p->max_unit = n;
    }
}

void shard_plan_free(ShardPlan *p) {
    free(p->unit_begin);
    free(p->cut);
    free(p->local_offset);
    p->unit_begin = p->cut = p->local_offset = NULL;
}

int64_t shard_max_piece(const ShardPlan *p, int r) {
    int64_t m = 0;
    for (int u = 0; u < p->n_units; u++)
        for (int q = r < 0 ? 0 : r; q < (r < 0 ? p->world : r + 1); q++)
            if (shard_piece_numel(p, u, q) > m) m = shard_piece_numel(p, u, q);
    return m;
}

int64_t shard_rank_numel(const ShardPlan *p, int r) {
    int64_t n = 0;
    for (int u = 0; u < p->n_units; u++) n += shard_piece_numel(p, u, r);
    return n;
}

int shard_segments(const ShardPlan *p, int r, ShardSegment **out) {
    const ParamLayout *pl = p->layout;
    ShardSegment *s = xmalloc(sizeof *s * (size_t)(pl->n + 1));
    int n = 0;
    int64_t local = 0;
    for (int u = 0; u < p->n_units; u++) {
        int64_t lo = shard_cut(p, u, r), hi = shard_cut(p, u, r + 1);
        for (int i = 0; lo < hi && i < pl->n; i++) {
            int64_t a = pl->t[i].offset > lo ? pl->t[i].offset : lo;
            int64_t e = pl->t[i].offset + pl->t[i].numel;
            int64_t b = e < hi ? e : hi;
            if (b <= a) continue;
            s[n++] = (ShardSegment){local + (a - lo), a, b - a, pl->t[i].numel, i};
        }
        local += hi - lo;
    }
    *out = s;
    return n;
}

int64_t shard_piece_blocks(const ShardPlan *p, int u, int r) {
    const ParamLayout *pl = p->layout;
    int64_t lo = shard_cut(p, u, r), hi = shard_cut(p, u, r + 1), n = 0;
    for (int i = 0; i < pl->n && lo < hi; i++) {
        int64_t a = pl->t[i].offset > lo ? pl->t[i].offset : lo, e = pl->t[i].offset + pl->t[i].numel;
        int64_t b = e < hi ? e : hi;
        if (b > a) n += (b - a + SHARD_ALIGN - 1) / SHARD_ALIGN;
    }
    return n;
}
