#ifndef KVCPT_GPU_TESTLIB_H
#define KVCPT_GPU_TESTLIB_H
/* What the GPU parity tests share, beside tests/testlib.h: a row of a
 * per-op tolerance table and the host <-> device copies. KVCPT_CUDA only. */
#include <stddef.h>
#include <stdint.h>

#include "../../common/util.h"
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

/* n floats of device memory into a new host array */
static inline float *download(const float *d, int64_t n) {
    float *p = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    cuda_memcpy_d2h(p, d, sizeof(float) * (size_t)n);
    return p;
}
#endif
