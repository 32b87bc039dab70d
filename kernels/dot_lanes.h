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
#endif
