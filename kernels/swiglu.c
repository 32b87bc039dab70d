#include "swiglu.h"

#include "parallel_min.h"
#include "vector_math.h"

/* One element each; exp_poly keeps the row loops vectorised. */
static inline __attribute__((always_inline)) float swiglu_value(float g, float u) {
    float s = 1.0f / (1.0f + exp_poly(-g));
    return g * s * u;
}

static inline __attribute__((always_inline)) void swiglu_grads(float *dg, float *du, float dh, float g, float u) {
    float s = 1.0f / (1.0f + exp_poly(-g));
    float silu = g * s;
    *du = dh * silu;
    *dg = dh * u * s * (1.0f + g * (1.0f - s));
}

VECTOR_CLONES static void forward_span(float *h, const float *g, const float *u, int64_t n) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) h[j] = swiglu_value(g[j], u[j]);
}

VECTOR_CLONES static void backward_span(float *dg, float *du, const float *dh, const float *g, const float *u,
                                        int64_t n) {
#pragma omp simd
    for (int64_t j = 0; j < n; j++) swiglu_grads(&dg[j], &du[j], dh[j], g[j], u[j]);
}

void swiglu_fused_forward_cpu(float *h, const float *gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static) if (N * F >= KERNEL_PARALLEL_MIN_FLOATS)
    for (int64_t r = 0; r < N; r++) forward_span(h + r * F, gu + r * 2 * F, gu + r * 2 * F + F, F);
}

void swiglu_fused_backward_cpu(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++) {
        const float *row = gu + r * 2 * F;
        float *drow = dgu + r * 2 * F;
        backward_span(drow, drow + F, dh + r * F, row, row + F, F);
    }
}
