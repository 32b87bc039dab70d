#ifndef KVCPT_NORM_FIXED_MATH_H
#define KVCPT_NORM_FIXED_MATH_H
/* Per-block arithmetic of the fixed-point norm (optim/norm_fixed.h) shared
 * by the CPU oracle (optim/norm_fixed.c) and the CUDA twin
 * (optim/norm_fixed.cu), so the two give the same bits. A block sum
 * adds squares of floats in double: the product of two 24-bit significands
 * is exact in double's 53 bits (and the squares of fp32's extremes stay in
 * double's normal range), so even an FMA that nvcc contracted acc + x * x
 * into would round the same; the device path says so explicitly with
 * rounded intrinsics anyway, as the rest of the code base does. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "norm_fixed.h"

#ifdef __CUDACC__
#define NF_HD static inline __host__ __device__
#else
#define NF_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define NF_DMUL(a, b) __dmul_rn((a), (b))
#define NF_DADD(a, b) __dadd_rn((a), (b))
#else
#define NF_DMUL(a, b) ((a) * (b))
#define NF_DADD(a, b) ((a) + (b))
#endif

/* Bits of the positive quiet NaN a non-finite pass returns. */
#define NF_NAN_BITS 0x7ff8000000000000ull
#define NF_INF_BITS 0x7ff0000000000000ull

/* One block's sum of squares, n <= SHARD_ALIGN elements, in element order. */
NF_HD double nf_block_sum(const float *g, int64_t n) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc = NF_DADD(acc, NF_DMUL((double)g[i], (double)g[i]));
    return acc;
}

/* A block sum as an integer key that orders as the values do: block sums
 * are +0, positive or +inf, whose bit patterns order as unsigned integers;
 * a NaN (any sign: the sign of NaN * NaN is unspecified) keeps its payload
 * without the sign, above +inf, so an integer max finds NaN first, then
 * inf, then the largest finite sum, in any order of combination. */
NF_HD uint64_t nf_max_key(double b) {
    uint64_t u;
    memcpy(&u, &b, 8);
    return u & 0x7fffffffffffffffull;
}

/* The double a max key stands for; every NaN becomes one positive quiet NaN. */
NF_HD double nf_key_value(uint64_t key) {
    if (key > NF_INF_BITS) key = NF_NAN_BITS;
    double b;
    memcpy(&b, &key, 8);
    return b;
}

/* q = floor(b * 2^(100 - E)) as hi * 2^64 + lo, for 0 <= b < 2^E. Exact:
 * ldexp only moves the exponent, so when the result is a normal double it
 * is b * 2^(100 - E) exactly; when it falls in the subnormal range it may
 * round, but it is then far below 1 and floor gives 0 either way. floor
 * of a double is exact. q < 2^100 is an integer of at most 53 significant
 * bits: h = floor(q / 2^64) is exact as above, h * 2^64 clears q's bits
 * below 2^64, and q - h * 2^64 (those bits, < 2^64, within q's 53-bit
 * significand) is representable, so the subtraction is exact too; both
 * parts then convert to uint64 without rounding. */
NF_HD Fixed128 nf_quantize(double b, int E) {
    double q = floor(ldexp(b, NORM_FIXED_BITS - E));
    double h = floor(ldexp(q, -64));
    Fixed128 r;
    r.hi = (uint64_t)h;
    r.lo = (uint64_t)(q - ldexp(h, 64));
    return r;
}

/* a + b modulo 2^128 (the carry out of lo goes into hi). */
NF_HD Fixed128 nf_add(Fixed128 a, Fixed128 b) {
    Fixed128 r;
    r.lo = a.lo + b.lo;
    r.hi = a.hi + b.hi + (r.lo < a.lo ? 1u : 0u);
    return r;
}

/* Whether pass 2 can take block sum b: 0 <= b < 2^E (false for NaN). */
NF_HD int nf_block_ok(double b, int E) { return b >= 0.0 && b < ldexp(1.0, E); }

#endif
