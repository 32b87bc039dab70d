#include "matmul.h"

#include <cblas.h>
#include <limits.h>

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
