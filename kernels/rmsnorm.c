#include "rmsnorm.h"

#include <math.h>

void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C;
        float *y = out + i * C;
        float ss = 0.0f;
        for (int64_t c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        for (int64_t c = 0; c < C; c++) y[c] = weight[c] * (x[c] * r);
        rstd[i] = r;
    }
}

void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int64_t N, int64_t C) {
    /* dx = r*(w*dy) - x * r^3/C * sum(w*dy*x); rows are independent */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *dy = dout + i * C;
        float r = rstd[i], dot = 0.0f;
        for (int64_t c = 0; c < C; c++) dot += weight[c] * dy[c] * x[c];
        float k = dot * r * r * r / (float)C;
        float *dx = dinp + i * C;
        for (int64_t c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - k * x[c];
    }
    /* dweight sums over rows: split columns across threads so the row order
     * (and the result) does not depend on the thread count */
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        float acc = 0.0f;
        for (int64_t i = 0; i < N; i++) acc += dout[i * C + c] * inp[i * C + c] * rstd[i];
        dweight[c] += acc;
    }
}
