/* Sum of squares of a gradient buffer on the GPU, the clipping norm of a
 * step whose optimizer runs on the device. Chunked as its CPU twin
 * (optim/clip.c): one thread block per GRAD_SUM_CHUNK elements, summed in
 * double over a fixed tree, then the chunk sums added in order on the
 * host (one double per 65,536 gradients crosses the bus). Deterministic
 * for any GPU; equal to the CPU's to double rounding, not bit for bit
 * (the CPU adds a chunk's elements in a line). */
#include <stdlib.h>

extern "C" {
#include "../common/util.h"
#include "clip.h"
}
#include "../kernels/cuda_common.cuh"
#include "../kernels/cuda_device.h"
#include "../kernels/cuda_reduce.cuh"

__global__ void __launch_bounds__(256) chunk_sum_squares_kernel(double *part, const float *g, int64_t n) {
    const int64_t begin = (int64_t)blockIdx.x * GRAD_SUM_CHUNK;
    const int64_t end = begin + GRAD_SUM_CHUNK < n ? begin + GRAD_SUM_CHUNK : n;
    double acc = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) acc += (double)g[i] * (double)g[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

extern "C" double grad_sum_squares_cuda(const float *g, int64_t n) {
    if (n <= 0) return 0.0;
    int64_t nchunks = (n + GRAD_SUM_CHUNK - 1) / GRAD_SUM_CHUNK;
    KV_CHECK(nchunks < ((int64_t)1 << 31), "grad_sum_squares_cuda: %lld elements is too many chunks", (long long)n);
    double *d_part = NULL, *part = (double *)xmalloc(sizeof(double) * (size_t)nchunks);
    CUDA_CHECK(cudaMalloc(&d_part, sizeof(double) * (size_t)nchunks));
    chunk_sum_squares_kernel<<<(unsigned int)nchunks, 256>>>(d_part, g, n);
    CUDA_CHECK_LAUNCH();
    cuda_memcpy_d2h(part, d_part, sizeof(double) * (size_t)nchunks);
    CUDA_CHECK(cudaFree(d_part));
    double total = 0.0;
    for (int64_t c = 0; c < nchunks; c++) total += part[c];
    free(part);
    return total;
}
