#ifndef KVCPT_NORM_FIXED_H
#define KVCPT_NORM_FIXED_H
/* The clipping norm's sum of squares over a sharded gradient, the same bits
 * for every rank count, with 16 bytes per rank crossing the network.
 *
 * Each rank holds different 256-element blocks of the gradient (its
 * ShardSegments), so a float sum in any fixed order would depend on where
 * the cuts fall, and shipping every block sum to every rank to add them in
 * global order costs one double per block (31M doubles per step at 8B).
 * Instead every block sum is turned into an integer multiple of a common
 * unit, and integers add exactly in any order:
 *
 *   1. shard_block_sums_*: each segment is cut into SHARD_ALIGN blocks from
 *      its start (a segment starts on a block boundary of its tensor, so the
 *      blocks are the same whatever the rank count); a block's sum is
 *          double acc = 0; for i in order: acc += (double)g[i] * (double)g[i];
 *      and the pass returns the largest block sum on this rank.
 *   2. The caller takes the max M over ranks (one double). M == 0: the sum
 *      is 0. M not finite: the sum is M (the step is skipped). Reduce the
 *      bits, not the double: nf_max_key (optim/norm_fixed_math.h) as a
 *      uint64 max, then nf_key_value. An integer max keeps a NaN from any
 *      rank (it orders above +inf), where a floating max (fmax, or
 *      ncclMax on doubles) may drop it.
 *      E = norm_fixed_exponent(M), the exponent with M < 2^E.
 *   3. shard_fixed_sum_*: q = floor(b * 2^(NORM_FIXED_BITS - E)) per block
 *      (< 2^100, exact), added in 128-bit integers: a Fixed128 per rank.
 *   4. The caller adds the ranks' Fixed128 (fixed128_add; any order, the
 *      same bits) and converts once: fixed128_to_double(s, E).
 *
 * Accuracy: floor drops less than one unit 2^(E - 100) per block, and the
 * sum is at least M >= 2^(E - 1), so the relative error of the Fixed128
 * against the exact real sum of the block sums is below
 *     nblocks * 2^-100 * 2^E / M <= nblocks * 2^-99 <= 2^-72
 * for the largest count allowed (NORM_FIXED_MAX_BLOCKS = 2^27 blocks, so
 * the sum stays below 2^127), plus half an ulp (2^-53) for the final
 * conversion to double. */
#include <stdint.h>

#include "shard_segment.h"

#define NORM_FIXED_BITS 100
#define NORM_FIXED_MAX_BLOCKS ((int64_t)1 << 27)

/* An unsigned 128-bit integer, hi * 2^64 + lo. */
typedef struct {
    uint64_t hi, lo;
} Fixed128;

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks over segs[nseg]: sum of ceil(numel / SHARD_ALIGN). */
int64_t shard_norm_block_count(const ShardSegment *segs, int nseg);

/* Pass 1 on the host: blocks[shard_norm_block_count] gets every block's
 * sum of squares, segment by segment, of g (the local shard buffer, indexed
 * by ShardSegment.local). Returns the largest block sum: a positive quiet
 * NaN if any gradient is NaN, else +inf if any is infinite. */
double shard_block_sums_cpu(double *blocks, const float *g, const ShardSegment *segs, int nseg);

/* The exponent E with M < 2^E (frexp's); M must be finite and > 0. */
int norm_fixed_exponent(double max_block);

/* Pass 2 on the host: the 128-bit sum of floor(b * 2^(100 - E)) over
 * blocks[nblocks]; every block must be finite, >= 0 and < 2^E (dies
 * naming the block otherwise), nblocks <= NORM_FIXED_MAX_BLOCKS. */
Fixed128 shard_fixed_sum_cpu(const double *blocks, int64_t nblocks, int E);

/* a + b; the sum must stay below 2^128 (dies otherwise). */
Fixed128 fixed128_add(Fixed128 a, Fixed128 b);

/* s * 2^(E - 100), rounded once to nearest even (then scaled; a result in
 * double's subnormal range rounds a second time, deterministically). */
double fixed128_to_double(Fixed128 s, int E);

/* CUDA twins (optim/norm_fixed.cu), default stream, the same results bit
 * for bit. blocks and g are DEVICE buffers; segs is a HOST array. Pass 1
 * launches one kernel per segment (one thread per block, adding in element
 * order as the CPU does) and copies back the max (8 bytes); pass 2 copies
 * back the 16-byte sum. Both synchronize. */
double shard_block_sums_cuda(double *blocks, const float *g, const ShardSegment *segs, int nseg);
Fixed128 shard_fixed_sum_cuda(const double *blocks, int64_t nblocks, int E);

#ifdef __cplusplus
}
#endif
#endif
