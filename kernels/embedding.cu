/* Token embedding on the GPU. The backward pass groups rows by token with a
 * stable radix sort, so each (token, column) sum is a serial loop over that
 * token's rows in their original order: the same float additions, in the
 * same order, as the CPU oracle, hence bit-identical and deterministic. */
#include <cub/device/device_radix_sort.cuh>
#include <limits.h>

#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "embedding.h"

static const int kThreads = 128;

__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte, int64_t C) {
    const int64_t row = blockIdx.x;
    const float *src = wte + (int64_t)tokens[row] * C;
    float *dst = out + row * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

extern "C" void embedding_forward_cuda(float *out, const int32_t *tokens, const float *wte, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    if (N > INT_MAX) {
        fprintf(stderr, "kvcpt: embedding_forward_cuda: N = %lld rows exceeds the grid\n", (long long)N);
        exit(1);
    }
    embedding_forward_kernel<<<(unsigned int)N, kThreads>>>(out, tokens, wte, C);
    CUDA_CHECK_LAUNCH();
}

__global__ void iota_kernel(int32_t *v, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        v[i] = (int32_t)i;
}

/* Blocks stride over sorted positions; a position that starts a run of equal
 * tokens owns the run. blockIdx.y picks a slice of kThreads columns. */
__global__ void embedding_backward_kernel(float *dwte, const float *dout, const int32_t *sorted_tokens,
                                          const int32_t *sorted_rows, int64_t N, int64_t C) {
    const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int64_t s = blockIdx.x; s < N; s += gridDim.x) {
        const int32_t tok = sorted_tokens[s];
        if (s > 0 && sorted_tokens[s - 1] == tok) continue;
        float *dst = dwte + (int64_t)tok * C + c;
        float acc = *dst;
        for (int64_t j = s; j < N && sorted_tokens[j] == tok; j++) acc += dout[(int64_t)sorted_rows[j] * C + c];
        *dst = acc;
    }
}

extern "C" void embedding_backward_cuda(float *dwte, const float *dout, const int32_t *tokens, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    if (N > INT_MAX) {
        fprintf(stderr, "kvcpt: embedding_backward_cuda: N = %lld rows exceeds the sort's int range\n", (long long)N);
        exit(1);
    }
    cudaStream_t st = 0;
    int32_t *rows, *sorted_tokens, *sorted_rows;
    CUDA_CHECK(cudaMallocAsync((void **)&rows, sizeof(int32_t) * (size_t)N * 3, st));
    sorted_tokens = rows + N;
    sorted_rows = rows + 2 * N;
    iota_kernel<<<grid_for(N, 256), 256, 0, st>>>(rows, N);
    CUDA_CHECK_LAUNCH();
    size_t tmp_bytes = 0;
    CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, tokens, sorted_tokens, rows, sorted_rows, (int)N, 0, 32, st));
    void *tmp;
    CUDA_CHECK(cudaMallocAsync(&tmp, tmp_bytes ? tmp_bytes : 1, st));
    CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, tokens, sorted_tokens, rows, sorted_rows, (int)N, 0, 32, st));
    dim3 grid((unsigned int)(N < 4096 ? N : 4096), ceil_div_u(C, kThreads));
    embedding_backward_kernel<<<grid, kThreads, 0, st>>>(dwte, dout, sorted_tokens, sorted_rows, N, C);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(tmp, st));
    CUDA_CHECK(cudaFreeAsync(rows, st));
}
