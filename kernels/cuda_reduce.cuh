#ifndef KVCPT_CUDA_REDUCE_CUH
#define KVCPT_CUDA_REDUCE_CUH
/* Block-wide reductions with a fixed combination tree: the result depends
 * only on blockDim and the inputs, never on scheduling, so kernels built on
 * them are bit-reproducible run to run. blockDim.x must be a multiple of 32
 * and at most 1024. Every thread of the block must call them. */
#include <cuda_runtime.h>
#include <math.h>

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block, returned to every thread. */
template <typename T> __device__ T block_sum(T v) {
    __shared__ T partial[32];
    __shared__ T total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* an earlier call may still be reading partial/total */
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T w = lane < nwarps ? partial[lane] : (T)0;
        w = warp_sum(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}

/* Max over the block, returned to every thread (exact: order-independent). */
__device__ inline float block_max(float v) {
    __shared__ float partial[32];
    __shared__ float total;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nwarps ? partial[lane] : -INFINITY;
        w = warp_max(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    return total;
}

/* Blocks for a grid-stride loop over n items: enough to fill the GPU, never
 * more than there is work for. */
/* Elementwise loop over n items that works for any grid size. */
#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static inline unsigned int grid_for(long long n, int threads) {
    long long blocks = (n + threads - 1) / threads;
    if (blocks > 65535LL * 16) blocks = 65535LL * 16;
    return (unsigned int)(blocks > 0 ? blocks : 1);
}
#endif
