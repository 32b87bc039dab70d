/* RMSNorm on the GPU: one block per row for the forward pass and dinp; the
 * weight gradient is a two-stage column reduction (fixed row chunks, then a
 * fixed-order sum of the chunk partials), so it is deterministic without
 * atomics. The number of chunks depends only on N, never on the device. */
#include <limits.h>

#include "act_io.cuh"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "rmsnorm.h"

static const int kRowThreads = 256;
static const int kColTile = 32, kRowLanes = 8; /* dweight stage-1 block: 32 columns x 8 row lanes */
static const int64_t kMaxChunks = 256, kMinChunkRows = 64;

static void check_rows(int64_t N, const char *fn) {
    if (N > INT_MAX) {
        fprintf(stderr, "kvcpt: %s: N = %lld rows exceeds the grid\n", fn, (long long)N);
        exit(1);
    }
}

template <typename E>
__global__ void rmsnorm_forward_kernel(E *out, float *rstd, const float *inp, const float *weight, int64_t C,
                                       float eps) {
    const int64_t row = blockIdx.x;
    const float *x = inp + row * C;
    E *y = out + row * C;
    float ss = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    ss = block_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)C + eps);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) y[c] = act_from_f32<E>(weight[c] * (x[c] * r));
    if (threadIdx.x == 0) rstd[row] = r;
}

extern "C" void rmsnorm_forward_cuda(float *out, float *rstd, const float *inp, const float *weight, int64_t N,
                                     int64_t C, float eps) {
    if (N <= 0 || C <= 0) return;
    check_rows(N, "rmsnorm_forward_cuda");
    rmsnorm_forward_kernel<float><<<(unsigned int)N, kRowThreads>>>(out, rstd, inp, weight, C, eps);
    CUDA_CHECK_LAUNCH();
}

extern "C" void rmsnorm_forward_bf16_cuda(bf16 *out, float *rstd, const float *inp, const float *weight, int64_t N,
                                          int64_t C, float eps) {
    if (N <= 0 || C <= 0) return;
    check_rows(N, "rmsnorm_forward_bf16_cuda");
    rmsnorm_forward_kernel<bf16><<<(unsigned int)N, kRowThreads>>>(out, rstd, inp, weight, C, eps);
    CUDA_CHECK_LAUNCH();
}

__global__ void rmsnorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *weight,
                                             const float *rstd, int64_t C) {
    const int64_t row = blockIdx.x;
    const float *x = inp + row * C, *dy = dout + row * C;
    float *dx = dinp + row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dot += weight[c] * dy[c] * x[c];
    dot = block_sum(dot);
    const float k = dot * r * r * r / (float)C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dx[c] += r * weight[c] * dy[c] - k * x[c];
}

/* partial[chunk][c] = sum over the chunk's rows of dy*x*r, rows visited in a
 * fixed lane/stride pattern and the lanes combined in lane order. */
__global__ void rmsnorm_dweight_partial_kernel(float *partial, const float *dout, const float *inp, const float *rstd,
                                               int64_t N, int64_t C, int64_t chunk_rows) {
    __shared__ float lanes[kRowLanes][kColTile];
    const int64_t c = (int64_t)blockIdx.x * kColTile + threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * chunk_rows;
    const int64_t r1 = r0 + chunk_rows < N ? r0 + chunk_rows : N;
    float acc = 0.0f;
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) acc += dout[r * C + c] * inp[r * C + c] * rstd[r];
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s = lanes[0][threadIdx.x];
        for (int l = 1; l < kRowLanes; l++) s += lanes[l][threadIdx.x];
        partial[(int64_t)blockIdx.y * C + c] = s;
    }
}

__global__ void rmsnorm_dweight_final_kernel(float *dweight, const float *partial, int64_t chunks, int64_t C) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int64_t k = 0; k < chunks; k++) s += partial[k * C + c];
    dweight[c] += s;
}

static void rmsnorm_dweight(float *dweight, const float *dout, const float *inp, const float *rstd, int64_t N,
                            int64_t C) {
    int64_t chunk_rows = (N + kMaxChunks - 1) / kMaxChunks;
    if (chunk_rows < kMinChunkRows) chunk_rows = kMinChunkRows;
    const int64_t chunks = (N + chunk_rows - 1) / chunk_rows;
    float *partial;
    CUDA_CHECK(cudaMallocAsync((void **)&partial, sizeof(float) * (size_t)(chunks * C), 0));
    rmsnorm_dweight_partial_kernel<<<dim3(ceil_div_u(C, kColTile), (unsigned int)chunks), dim3(kColTile, kRowLanes)>>>(
        partial, dout, inp, rstd, N, C, chunk_rows);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dweight_final_kernel<<<ceil_div_u(C, 256), 256>>>(dweight, partial, chunks, C);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(partial, 0));
}

extern "C" void rmsnorm_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp,
                                      const float *weight, const float *rstd, int64_t N, int64_t C) {
    if (N <= 0 || C <= 0) return;
    check_rows(N, "rmsnorm_backward_cuda");
    rmsnorm_backward_dinp_kernel<<<(unsigned int)N, kRowThreads>>>(dinp, dout, inp, weight, rstd, C);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dweight(dweight, dout, inp, rstd, N, C);
}
