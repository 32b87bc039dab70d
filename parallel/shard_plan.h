#ifndef KVCPT_SHARD_PLAN_H
#define KVCPT_SHARD_PLAN_H
/* Who owns what (ZeRO-3). The flat parameter layout is cut into units, the
 * ranges sharding gathers at once: the embedding, each layer, and the tail
 * (final norm and, untied, lm_head). Each unit is split into one contiguous
 * piece per rank. A cut always falls on a 256-element block boundary of the
 * tensor it lands in, so no quantization block of 8-bit AdamW and no block
 * of the gradient norm is ever split: every rank count computes exactly
 * the same numbers. The last pieces of a unit absorb the rounding, and a
 * piece may be empty (a unit smaller than a block per rank). */
#include <stdint.h>

#include "../model/params.h"
#include "../optim/shard_segment.h" /* SHARD_ALIGN, ShardSegment */

typedef struct {
    int world, rank;
    int n_units;
    int64_t *unit_begin;   /* n_units + 1 offsets into the flat layout */
    int64_t *cut;          /* n_units x (world + 1): piece r of unit u is [cut[u][r], cut[u][r+1]) */
    int64_t *local_offset; /* per unit: where this rank's piece starts in its local shard buffer */
    int64_t local_numel;   /* elements this rank owns */
    int64_t max_unit;      /* largest unit (the gather buffer) */
    const ParamLayout *layout;
} ShardPlan;

void shard_plan_build(ShardPlan *p, const ParamLayout *pl, int world, int rank);
void shard_plan_free(ShardPlan *p);

static inline int64_t shard_cut(const ShardPlan *p, int u, int r) { return p->cut[(int64_t)u * (p->world + 1) + r]; }
static inline int64_t shard_piece_numel(const ShardPlan *p, int u, int r) {
    return shard_cut(p, u, r + 1) - shard_cut(p, u, r);
}
/* Elements rank r owns over all units. */
int64_t shard_rank_numel(const ShardPlan *p, int r);
/* The largest piece of rank r over all units, or of any rank when r < 0
 * (the size of an exchange or send buffer). */
int64_t shard_max_piece(const ShardPlan *p, int r);

/* Segments of rank r's shard, in local order; returns the count. */
int shard_segments(const ShardPlan *p, int r, ShardSegment **out);

/* Gradient-norm blocks: every tensor is cut into 256-element blocks from its
 * start; block sums of squares are taken one block at a time and added in
 * global block order, which no rank count changes. Those of rank r's piece
 * of unit u. */
int64_t shard_piece_blocks(const ShardPlan *p, int u, int r);

#endif
