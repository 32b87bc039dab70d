#include "residual.h"

#include "parallel_min.h"

void residual_add_cpu(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= KERNEL_PARALLEL_MIN_FLOATS)
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}
