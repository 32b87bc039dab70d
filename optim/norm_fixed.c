#include "norm_fixed.h"

#include <math.h>
#include <stdlib.h>

#include "../common/util.h"
#include "norm_fixed_math.h"

/* pass 2's chunks: partial sums per chunk (any split gives the same bits;
 * a fixed one keeps the work per thread even) */
#define FIXED_CHUNK 65536

int64_t shard_norm_block_count(const ShardSegment *segs, int nseg) {
    int64_t n = 0;
    for (int s = 0; s < nseg; s++) {
        KV_CHECK(segs[s].numel >= 0, "shard norm: segment %d has %lld elements", s, (long long)segs[s].numel);
        n += (segs[s].numel + SHARD_ALIGN - 1) / SHARD_ALIGN;
    }
    return n;
}

double shard_block_sums_cpu(double *blocks, const float *g, const ShardSegment *segs, int nseg) {
    uint64_t key = 0;
    int64_t k = 0;
    for (int s = 0; s < nseg; s++) {
        const float *gs = g + segs[s].local;
        int64_t numel = segs[s].numel, nb = (numel + SHARD_ALIGN - 1) / SHARD_ALIGN;
        double *out = blocks + k;
#pragma omp parallel for schedule(static) reduction(max : key)
        for (int64_t b = 0; b < nb; b++) {
            int64_t n = numel - b * SHARD_ALIGN < SHARD_ALIGN ? numel - b * SHARD_ALIGN : SHARD_ALIGN;
            out[b] = nf_block_sum(gs + b * SHARD_ALIGN, n);
            uint64_t kb = nf_max_key(out[b]);
            if (kb > key) key = kb;
        }
        k += nb;
    }
    return nf_key_value(key);
}

int norm_fixed_exponent(double max_block) {
    KV_CHECK(isfinite(max_block) && max_block > 0, "shard norm: the largest block sum %g is not finite and positive",
             max_block);
    int E;
    frexp(max_block, &E); /* max_block = f * 2^E with 0.5 <= f < 1, so max_block < 2^E */
    return E;
}

/* The first block pass 2 cannot take, for the message. */
static void check_blocks(const double *blocks, int64_t nblocks, int E, const char *who) {
    KV_CHECK(nblocks >= 0 && nblocks <= NORM_FIXED_MAX_BLOCKS,
             "%s: %lld blocks, more than the %lld whose sum fits 128 bits", who, (long long)nblocks,
             (long long)NORM_FIXED_MAX_BLOCKS);
    for (int64_t b = 0; b < nblocks; b++)
        KV_CHECK(nf_block_ok(blocks[b], E), "%s: block %lld's sum %g is not in [0, 2^%d)", who, (long long)b, blocks[b],
                 E);
}

Fixed128 shard_fixed_sum_cpu(const double *blocks, int64_t nblocks, int E) {
    check_blocks(blocks, nblocks, E, "shard_fixed_sum_cpu");
    int64_t nchunks = (nblocks + FIXED_CHUNK - 1) / FIXED_CHUNK;
    Fixed128 *part = xcalloc((size_t)nchunks + 1, sizeof(Fixed128));
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t end = (c + 1) * FIXED_CHUNK < nblocks ? (c + 1) * FIXED_CHUNK : nblocks;
        Fixed128 acc = {0, 0};
        for (int64_t b = c * FIXED_CHUNK; b < end; b++) acc = nf_add(acc, nf_quantize(blocks[b], E));
        part[c] = acc;
    }
    Fixed128 total = {0, 0};
    for (int64_t c = 0; c < nchunks; c++) total = fixed128_add(total, part[c]);
    free(part);
    return total;
}

Fixed128 fixed128_add(Fixed128 a, Fixed128 b) {
    Fixed128 r = nf_add(a, b);
    KV_CHECK(r.hi > a.hi || (r.hi == a.hi && r.lo >= a.lo), "fixed128_add: the sum overflows 128 bits");
    return r;
}

double fixed128_to_double(Fixed128 s, int E) {
    if (s.hi == 0) return ldexp((double)s.lo, E - NORM_FIXED_BITS); /* uint64 -> double rounds once, to nearest */
    /* the top 64 bits (leading one at bit 63), the bits shifted out kept as
     * a sticky bit 0: it lies below the 53-bit significand's rounding
     * position, so converting top rounds exactly as the whole 128-bit value
     * would */
    int lz = __builtin_clzll(s.hi);
    uint64_t top = lz ? (s.hi << lz) | (s.lo >> (64 - lz)) : s.hi;
    uint64_t rest = s.lo << lz;
    top |= rest != 0;
    return ldexp((double)top, 64 - lz + E - NORM_FIXED_BITS);
}
