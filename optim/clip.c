#include "clip.h"

#include <math.h>
#include <stdlib.h>

#include "../common/util.h"

double grad_sum_squares(const float *g, int64_t n) {
    int64_t nchunks = (n + GRAD_SUM_CHUNK - 1) / GRAD_SUM_CHUNK;
    double *part = xmalloc((size_t)(nchunks + 1) * sizeof(double));
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t end = (c + 1) * GRAD_SUM_CHUNK < n ? (c + 1) * GRAD_SUM_CHUNK : n;
        double acc = 0;
        for (int64_t i = c * GRAD_SUM_CHUNK; i < end; i++) acc += (double)g[i] * (double)g[i];
        part[c] = acc;
    }
    double total = 0;
    for (int64_t c = 0; c < nchunks; c++) total += part[c];
    free(part);
    return total;
}

double grad_clip_factor(double norm, double max_norm) {
    if (!(max_norm > 0)) return 1.0;
    double f = max_norm / (norm + 1e-6);
    return f < 1.0 ? f : 1.0;
}

void grad_scale(float *g, int64_t n, float s) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) g[i] *= s;
}
