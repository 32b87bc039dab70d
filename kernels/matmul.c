#include "matmul.h"

#include <stdlib.h>

#include "../common/util.h"
#include "blas.h"

void matmul_forward_cpu(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    blas_sgemm(0, 1, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

void matmul_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         int64_t N, int64_t IC, int64_t OC) {
    if (dinp) blas_sgemm(0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    if (dweight) blas_sgemm(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}

/* A bf16-rounded copy of x (as fp32 values), for the bf16r oracle. */
static float *rounded_copy(const float *x, int64_t n) {
    float *r = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) r[i] = float_from_bf16_bits(bf16_bits_from_float(x[i]));
    return r;
}

void matmul_forward_bf16r_cpu(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    float *ri = rounded_copy(inp, N * IC), *rw = rounded_copy(weight, OC * IC);
    matmul_forward_cpu(out, ri, rw, N, IC, OC);
    free(ri), free(rw);
}

void matmul_backward_bf16r_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                               int64_t N, int64_t IC, int64_t OC) {
    float *rd = rounded_copy(dout, N * OC);
    float *rw = dinp ? rounded_copy(weight, OC * IC) : NULL, *ri = dweight ? rounded_copy(inp, N * IC) : NULL;
    matmul_backward_cpu(dinp, dweight, rd, ri, rw, N, IC, OC);
    free(rd), free(rw), free(ri);
}
