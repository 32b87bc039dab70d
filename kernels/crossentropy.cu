/* Fused softmax cross-entropy on the GPU, one block per row of logits.
 * Forward: exact block max, then sum of exp(z - max) with each thread's
 * partial and the block tree in double (V = 128256 terms). Backward rewrites
 * the row in place. 64-bit offsets throughout: rows * V overflows int32. */
#include <limits.h>
#include <math.h>

#include "crossentropy.h"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

static const int kThreads = 1024;

/* The row's log-sum-exp, returned to every thread: the exact block max, then
 * the sum of exp(z - max) with each thread's partial and the block tree in
 * double. Thread 0 writes it and the row's loss (0 for an ignored target,
 * NaN for one past the vocabulary). */
static __device__ float row_loss(float *losses, float *lse, const float *z, int32_t t, int64_t V) {
    float m = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, z[v]);
    m = block_max(m);
    double s = 0.0;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += (double)expf(z[v] - m);
    s = block_sum(s);
    const float l = m + (float)log(s);
    if (threadIdx.x == 0) {
        *lse = l;
        *losses = t < 0 ? 0.0f : t < V ? l - z[t] : NAN;
    }
    return l;
}

/* The row rewritten in place as scale * (softmax - onehot(t)), zero for an
 * ignored target. */
static __device__ void row_grad(float *z, float l, int32_t t, int64_t V, float scale) {
    if (t < 0) {
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x) z[v] = 0.0f;
        return;
    }
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        float p = __fmul_rn(scale, expf(z[v] - l));
        z[v] = v == t ? p - scale : p;
    }
}

__global__ void crossentropy_forward_kernel(float *losses, float *lse, const float *logits, const int32_t *targets,
                                            int64_t V) {
    const int64_t row = blockIdx.x;
    row_loss(losses + row, lse + row, logits + row * V, targets[row], V);
}

__global__ void crossentropy_backward_kernel(float *logits, const float *lse, const int32_t *targets, int64_t V,
                                             float scale) {
    const int64_t row = blockIdx.x;
    row_grad(logits + row * V, lse[row], targets[row], V, scale);
}

/* Both in one pass over the row's memory traffic less: the forward
 * kernel's loss, read before the row is rewritten, then the backward
 * kernel's arithmetic on the same float lse, so the results are the two
 * kernels' bits. */
__global__ void crossentropy_forward_backward_kernel(float *losses, float *lse, float *logits, const int32_t *targets,
                                                     int64_t V, float scale) {
    const int64_t row = blockIdx.x;
    float *z = logits + row * V;
    const int32_t t = targets[row];
    const float l = row_loss(losses + row, lse + row, z, t, V);
    __syncthreads(); /* thread 0 has read z[t] before any thread rewrites the row */
    row_grad(z, l, t, V, scale);
}

static void check_rows(int64_t rows, const char *fn) {
    if (rows > INT_MAX) {
        fprintf(stderr, "kvcpt: %s: %lld rows exceed the grid; pass smaller chunks\n", fn, (long long)rows);
        exit(1);
    }
}

extern "C" void crossentropy_forward_cuda(float *losses, float *lse, const float *logits, const int32_t *targets,
                                          int64_t rows, int64_t V) {
    if (rows <= 0) return;
    check_rows(rows, "crossentropy_forward_cuda");
    crossentropy_forward_kernel<<<(unsigned int)rows, kThreads>>>(losses, lse, logits, targets, V);
    CUDA_CHECK_LAUNCH();
}

extern "C" void crossentropy_backward_cuda(float *logits, const float *lse, const int32_t *targets, int64_t rows,
                                           int64_t V, float scale) {
    if (rows <= 0) return;
    check_rows(rows, "crossentropy_backward_cuda");
    crossentropy_backward_kernel<<<(unsigned int)rows, kThreads>>>(logits, lse, targets, V, scale);
    CUDA_CHECK_LAUNCH();
}

extern "C" void crossentropy_forward_backward_cuda(float *losses, float *lse, float *logits, const int32_t *targets,
                                                   int64_t rows, int64_t V, float scale) {
    if (rows <= 0) return;
    check_rows(rows, "crossentropy_forward_backward_cuda");
    crossentropy_forward_backward_kernel<<<(unsigned int)rows, kThreads>>>(losses, lse, logits, targets, V, scale);
    CUDA_CHECK_LAUNCH();
}
