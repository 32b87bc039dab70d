#include "swiglu.h"

#include <math.h>

void swiglu_forward_cpu(float *h, const float *g, const float *u, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-g[i]));
        h[i] = g[i] * s * u[i];
    }
}

void swiglu_backward_cpu(float *dg, float *du, const float *dh, const float *g, const float *u, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-g[i]));
        float silu = g[i] * s;
        du[i] = dh[i] * silu;
        dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
}
