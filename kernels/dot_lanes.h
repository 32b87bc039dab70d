#ifndef KVCPT_DOT_LANES_H
#define KVCPT_DOT_LANES_H
/* The fixed-order fp32 dot product that the CPU attention and the eval
 * engine's row matmul share: DOT_LANES interleaved partial sums (which the
 * compiler vectorises), then the lanes added in order. The result depends
 * only on n and the values, never on the vector width the caller's
 * target_clones picked, so every clone, and every batch size, gives the same
 * bits. Always inlined, so it is compiled inside each clone. */
#include <stdint.h>

#define DOT_LANES 16

static inline __attribute__((always_inline)) float dot_lanes(const float *restrict w, const float *restrict x,
                                                             int64_t n) {
    float lane[DOT_LANES] = {0};
    int64_t t = 0;
    for (; t + DOT_LANES <= n; t += DOT_LANES)
#pragma omp simd
        for (int l = 0; l < DOT_LANES; l++) lane[l] += w[t + l] * x[t + l];
    for (int l = 0; t + l < n; l++) lane[l] += w[t + l] * x[t + l];
    float s = 0.0f;
    for (int l = 0; l < DOT_LANES; l++) s += lane[l];
    return s;
}

/* s[i] = dot_lanes(w, x[i], n) for four rows x[0..3] at once: each row keeps
 * its own lanes, added in dot_lanes' order, so the bits are dot_lanes';
 * one load of w feeds four products, and four independent sums keep the
 * adder busy where one row's chain of additions would wait on itself. */
static inline __attribute__((always_inline)) void dot_lanes4(float s[4], const float *restrict w,
                                                             const float *restrict x0, const float *restrict x1,
                                                             const float *restrict x2, const float *restrict x3,
                                                             int64_t n) {
    float l0[DOT_LANES] = {0}, l1[DOT_LANES] = {0}, l2[DOT_LANES] = {0}, l3[DOT_LANES] = {0};
    int64_t t = 0;
    for (; t + DOT_LANES <= n; t += DOT_LANES)
#pragma omp simd
        for (int l = 0; l < DOT_LANES; l++) {
            float wl = w[t + l];
            l0[l] += wl * x0[t + l], l1[l] += wl * x1[t + l], l2[l] += wl * x2[t + l], l3[l] += wl * x3[t + l];
        }
    for (int l = 0; t + l < n; l++) {
        float wl = w[t + l];
        l0[l] += wl * x0[t + l], l1[l] += wl * x1[t + l], l2[l] += wl * x2[t + l], l3[l] += wl * x3[t + l];
    }
    float a = 0.0f, b = 0.0f, c = 0.0f, d = 0.0f;
    for (int l = 0; l < DOT_LANES; l++) a += l0[l], b += l1[l], c += l2[l], d += l3[l];
    s[0] = a, s[1] = b, s[2] = c, s[3] = d;
}
#endif
