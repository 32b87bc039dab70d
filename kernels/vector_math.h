#ifndef KVCPT_VECTOR_MATH_H
#define KVCPT_VECTOR_MATH_H
/* Elementwise fp32 math for the CPU kernels' row loops, written without
 * library calls so that the loops vectorise, and the clones those loops are
 * compiled into (AVX-512, AVX2, baseline x86-64, picked at load time).
 * Floating-point contraction is off (-std=c11), so every clone performs the
 * same IEEE operations: results depend on the values only, never on the
 * machine, the vector width or the thread count. */
#include <stdint.h>

#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/* exp(x): Cody-Waite reduction by ln 2 and the Cephes expf polynomial,
 * within 2 ulp of glibc's expf on [-87.3, 88]; 0 below -87.3 (where expf is
 * subnormal or 0), +inf above 88 (expf is finite up to 88.72: a sigmoid
 * 1 / (1 + exp(-g)) then gives 0 instead of a value below 6e-39), NaN for
 * NaN. Always inlined, so it is compiled inside each clone. */
static inline __attribute__((always_inline)) float exp_poly(float x) {
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    /* clamped on both sides, so that n stays in [-126, 127] and the exponent
     * arithmetic below is defined even for inf or NaN; the selects at the
     * end give the out-of-range results */
    float xc = x < -87.3f ? -87.3f : (x < 88.0f ? x : 88.0f);
    float n = (xc * 1.44269504088896341f + round_magic) - round_magic;
    float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float y = 1.9875691500e-4f;
    y = y * r + 1.3981999507e-3f;
    y = y * r + 8.3334519073e-3f;
    y = y * r + 4.1665795894e-2f;
    y = y * r + 1.6666665459e-1f;
    y = y * r + 5.0000001201e-1f;
    y = y * (r * r) + r + 1.0f;
    union {
        int32_t i;
        float f;
    } two_n = {.i = ((int32_t)n + 127) << 23};
    float e = x > 88.0f ? __builtin_inff() : y * two_n.f;
    return x < -87.3f ? 0.0f : (x == x ? e : x);
}

/* max_i x[i] (-inf for n = 0) in 16 lanes, so that it vectorises (GCC does
 * not vectorise an OpenMP max reduction over floats); a maximum is exact, so
 * the lane order does not change the value (NaNs are skipped either way: a
 * comparison with NaN is false). Always inlined, into each clone. */
static inline __attribute__((always_inline)) float vector_max(const float *restrict x, int64_t n) {
    float lane[16];
    for (int l = 0; l < 16; l++) lane[l] = -__builtin_inff();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
#pragma omp simd
        for (int l = 0; l < 16; l++) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    for (int l = 0; i + l < n; l++) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    float m = -__builtin_inff();
    for (int l = 0; l < 16; l++) m = lane[l] > m ? lane[l] : m;
    return m;
}
#endif
