#ifndef KVCPT_SHARD_SEGMENT_H
#define KVCPT_SHARD_SEGMENT_H
/* A piece of one tensor inside a rank's shard, and the block its cuts keep
 * whole. The block is the optimizer's: 8-bit AdamW quantizes and the
 * clipping norm sums 256 elements at a time (optim/norm_fixed.h), so a cut
 * falls on a block boundary of its tensor and every rank count computes the
 * same numbers. parallel/shard_plan.h cuts the layout into these pieces. */
#include <stdint.h>

#define SHARD_ALIGN 256

typedef struct {
    int64_t local;        /* offset in the local shard buffer */
    int64_t global;       /* offset in the flat layout */
    int64_t numel;
    int64_t tensor_numel;
    int tensor;           /* index in the layout */
} ShardSegment;

#endif
