#ifndef KVCPT_GPU_TESTLIB_H
#define KVCPT_GPU_TESTLIB_H
/* What the GPU parity tests share, beside tests/testlib.h: a row of a
 * per-op tolerance table and the host <-> device copies. KVCPT_CUDA only. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../kernels/bf16.h"
#include "../../kernels/cuda_device.h"
#include "../testlib.h"

/* |gpu - cpu| <= atol + atol_per_k * K + rtol * |cpu|, K the terms an output sums. */
typedef struct {
    double atol, atol_per_k, rtol;
} Tol;

static inline int close_k(const char *name, const float *got, const float *ref, int64_t n, Tol t, int64_t K) {
    return tl_close_margin(name, got, ref, n, t.atol + t.atol_per_k * (double)K, t.rtol);
}

static inline void *dev_upload(const void *src, size_t bytes) {
    void *d = cuda_malloc(bytes);
    cuda_memcpy_h2d(d, src, bytes);
    return d;
}

/* Worst |got - ref| over its allowance atol + rtol |ref| (> 1: outside;
 * a NaN counts as infinitely far). */
static inline double worst_ratio(const float *got, const float *ref, int64_t n, double atol, double rtol) {
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double r = fabs((double)got[i] - (double)ref[i]) / (atol + rtol * fabs((double)ref[i]));
        if (isnan(r)) return INFINITY;
        if (r > worst) worst = r;
    }
    return worst;
}

/* n standard normal values from r, rounded to bf16 (so a test's oracle and
 * its bf16 kernels see the same inputs), in a new host array */
static inline float *host_normal_bf16(Rng *r, int64_t n) {
    float *p = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = float_from_bf16_bits(bf16_bits_from_float(rng_normal(r)));
    return p;
}

/* n floats of device memory into a new host array */
static inline float *download(const float *d, int64_t n) {
    float *p = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    cuda_memcpy_d2h(p, d, sizeof(float) * (size_t)n);
    return p;
}
#endif
