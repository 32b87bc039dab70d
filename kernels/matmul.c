#include "matmul.h"

#include <cblas.h>
#include <limits.h>
#include <stdlib.h>

#include "../common/util.h"

/* BLAS takes int dimensions; a bigger matrix must be split by the caller. */
static int blas_dim(int64_t d, const char *what) {
    if (d < 0 || d > INT_MAX) die("matmul: %s = %lld exceeds the BLAS int range", what, (long long)d);
    return (int)d;
}

void matmul_forward_cpu(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    int n = blas_dim(N, "N"), ic = blas_dim(IC, "IC"), oc = blas_dim(OC, "OC");
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, oc, ic, 1.0f, inp, ic, weight, ic, 0.0f, out, oc);
}

void matmul_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         int64_t N, int64_t IC, int64_t OC) {
    int n = blas_dim(N, "N"), ic = blas_dim(IC, "IC"), oc = blas_dim(OC, "OC");
    if (dinp) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, ic, oc, 1.0f, dout, oc, weight, ic, 1.0f, dinp, ic);
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, ic, n, 1.0f, dout, oc, inp, ic, 1.0f, dweight, ic);
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
