#include "residual.h"

void residual_add_cpu(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}
