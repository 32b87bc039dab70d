#ifndef KVCPT_ADAMW_MATH_H
#define KVCPT_ADAMW_MATH_H
/* Per-element AdamW arithmetic shared by the CPU step (optim/optimizer.c)
 * and the CUDA kernel (optim/adamw8bit.cu). On the device every operation
 * is an explicitly rounded intrinsic, so nvcc cannot contract a*b+c into an
 * FMA and both backends round identically (the CPU build is ISO C11, where
 * GCC does not contract either). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ADAMW_HD static inline __host__ __device__
#else
#define ADAMW_HD static inline
#endif

#ifdef __CUDA_ARCH__
#define AW_MUL(a, b) __fmul_rn((a), (b))
#define AW_ADD(a, b) __fadd_rn((a), (b))
#define AW_DIV(a, b) __fdiv_rn((a), (b))
#define AW_SQRT(a) __fsqrt_rn(a)
#else
#define AW_MUL(a, b) ((a) * (b))
#define AW_ADD(a, b) ((a) + (b))
#define AW_DIV(a, b) ((a) / (b))
#define AW_SQRT(a) sqrtf(a)
#endif

/* Everything a step needs per element, computed once per step on the host
 * in double and rounded to fp32 (so both backends see the same values). */
typedef struct {
    float beta1, beta2;
    float one_minus_beta1, one_minus_beta2;
    float step_size;  /* -lr * sqrt(1 - beta2^t) / (1 - beta1^t) */
    float eps_hat;    /* eps * sqrt(1 - beta2^t): bias correction folded in */
    float decay;      /* 1 - lr * weight_decay (decoupled, applied to p_{t-1}) */
    float grad_scale; /* clipping factor fused into the step; 1 = none */
} AdamWScalars;

/* m <- b1 m + (1-b1) g,  v <- b2 v + (1-b2) g^2  on the scaled gradient. */
ADAMW_HD void adamw_moments(const AdamWScalars *s, float g, float *m, float *v) {
    g = AW_MUL(g, s->grad_scale);
    *m = AW_ADD(AW_MUL(*m, s->beta1), AW_MUL(s->one_minus_beta1, g));
    *v = AW_ADD(AW_MUL(*v, s->beta2), AW_MUL(AW_MUL(s->one_minus_beta2, g), g));
}

/* p <- p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps), written the
 * bitsandbytes way: p + step_size * m / (sqrt(v) + eps_hat). */
ADAMW_HD float adamw_param(const AdamWScalars *s, float p, float m, float v) {
    p = AW_MUL(p, s->decay);
    return AW_ADD(p, AW_MUL(s->step_size, AW_DIV(m, AW_ADD(AW_SQRT(v), s->eps_hat))));
}

/* A gradient is usable when it and its contribution to v are finite (a
 * finite g whose square overflows would poison v's whole block). */
ADAMW_HD int adamw_grad_ok(const AdamWScalars *s, float g) {
    float gs = AW_MUL(g, s->grad_scale);
    return isfinite(gs) && isfinite(AW_MUL(AW_MUL(s->one_minus_beta2, gs), gs));
}

/* Nearest code: the number of midpoints strictly below x (255 ascending
 * midpoints), by a fixed 8-step binary search. Ties go to the lower code. */
ADAMW_HD uint8_t adamw_quantize(const float *mid, float x) {
    int lo = 0;
    for (int step = 128; step > 0; step >>= 1)
        if (lo + step <= 255 && x > mid[lo + step - 1]) lo += step;
    return (uint8_t)lo;
}

/* Stochastic rounding to bf16, for parameters that exist only in bf16 (no
 * fp32 master): x is rounded up in magnitude with probability equal to its
 * distance from the lower bf16 neighbour in units of the step, so the
 * rounding is unbiased and updates far below half a bf16 step still move
 * the weight on average. The 16 random bits come from a counter-based hash
 * of (seed, step, index): every backend, thread count and launch shape
 * draws the same bits for the same element, so a run repeats bit for bit
 * and resumes from a checkpoint as if it had never stopped. */
ADAMW_HD uint64_t adamw_mix64(uint64_t z) { /* SplitMix64's finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

ADAMW_HD uint32_t adamw_sr_bits(uint64_t seed, int64_t step, int64_t index) {
    uint64_t k = adamw_mix64(seed + (uint64_t)step * 0x9e3779b97f4a7c15ull);
    return (uint32_t)(adamw_mix64(k + (uint64_t)index * 0x9e3779b97f4a7c15ull) >> 48);
}

/* x rounded to a bf16 value (returned as the fp32 holding it) with random
 * bits r (16 used). Infinities and NaN pass unchanged. */
ADAMW_HD float adamw_round_bf16_sr(float x, uint32_t r) {
#ifdef __CUDA_ARCH__
    uint32_t u = __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
#endif
    if ((u & 0x7f800000u) == 0x7f800000u) return x;
    u = (u + (r & 0xffffu)) & 0xffff0000u; /* a carry into the exponent is the next binade's first value */
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float y;
    memcpy(&y, &u, sizeof y);
    return y;
#endif
}

#endif
