#include "swiglu.h"

#include <math.h>

/* One element each, shared by the separate and the fused layouts so that
 * both give the same bits. */
static inline float swiglu_value(float g, float u) {
    float s = 1.0f / (1.0f + expf(-g));
    return g * s * u;
}

static inline void swiglu_grads(float *dg, float *du, float dh, float g, float u) {
    float s = 1.0f / (1.0f + expf(-g));
    float silu = g * s;
    *du = dh * silu;
    *dg = dh * u * s * (1.0f + g * (1.0f - s));
}

void swiglu_forward_cpu(float *h, const float *g, const float *u, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) h[i] = swiglu_value(g[i], u[i]);
}

void swiglu_backward_cpu(float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) swiglu_grads(&dg[i], &du[i], dh[i], g[i], u[i]);
}

void swiglu_fused_forward_cpu(float *h, const float *gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < F; j++) h[r * F + j] = swiglu_value(gu[r * 2 * F + j], gu[r * 2 * F + F + j]);
}

void swiglu_fused_backward_cpu(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; r++)
        for (int64_t j = 0; j < F; j++) {
            const float *row = gu + r * 2 * F;
            float *drow = dgu + r * 2 * F;
            swiglu_grads(&drow[j], &drow[F + j], dh[r * F + j], row[j], row[F + j]);
        }
}
