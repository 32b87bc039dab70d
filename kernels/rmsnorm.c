#include "rmsnorm.h"

#include <math.h>

#include "parallel_min.h"

/* Columns per task of the weight gradient: a few cache lines of each row. */
#define RMSNORM_DW_COLS 32

void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                         float eps) {
#pragma omp parallel for schedule(static) if (N * C >= KERNEL_PARALLEL_MIN_FLOATS)
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
     * (and the result) does not depend on the thread count; a block of
     * columns at a time, so that each row's slice is read contiguously and
     * the columns' sums (each still in row order) vectorise */
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < C; c0 += RMSNORM_DW_COLS) {
        int64_t nc = C - c0 < RMSNORM_DW_COLS ? C - c0 : RMSNORM_DW_COLS;
        float acc[RMSNORM_DW_COLS] = {0};
        for (int64_t i = 0; i < N; i++) {
            const float *dy = dout + i * C + c0, *x = inp + i * C + c0;
            float r = rstd[i];
#pragma omp simd
            for (int64_t j = 0; j < nc; j++) acc[j] += dy[j] * x[j] * r;
        }
        for (int64_t j = 0; j < nc; j++) dweight[c0 + j] += acc[j];
    }
}
