#include "bias.h"

void bias_add_cpu(float *out, const float *bias, int64_t N, int64_t OC) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) out[n * OC + o] += bias[o];
}

/* Columns in blocks, so that each thread reads rows contiguously while
 * every column still sums its rows in order. */
#define BIAS_COLS 64

void bias_backward_cpu(float *dbias, const float *dout, int64_t N, int64_t OC) {
    int64_t nblk = (OC + BIAS_COLS - 1) / BIAS_COLS;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t o0 = b * BIAS_COLS, w = OC - o0 < BIAS_COLS ? OC - o0 : BIAS_COLS;
        float acc[BIAS_COLS] = {0};
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < w; j++) acc[j] += dout[n * OC + o0 + j];
        for (int64_t j = 0; j < w; j++) dbias[o0 + j] += acc[j];
    }
}
