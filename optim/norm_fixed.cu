/* The fixed-point norm's passes on the GPU (optim/norm_fixed.h), the same
 * per-block arithmetic as the CPU oracle (optim/norm_fixed_math.h).
 * Pass 1: one thread per 256-element block adds its elements in order (so
 * the sums equal the CPU's bit for bit); a warp's largest max key goes to
 * one atomicMax (an integer max: the same result in any order). Pass 2: a
 * grid-stride 128-bit integer sum per thread, then a fixed tree in shared
 * memory per thread block, then one block adds the blocks' partials.
 * Integer addition is exact, so any tree gives the same bits; a fixed one
 * keeps the work, not only the result, reproducible. */
#include <stdint.h>

extern "C" {
#include "../common/util.h"
}
#include "../kernels/cuda_common.cuh"
#include "../kernels/cuda_device.h"
#include "norm_fixed.h"
#include "norm_fixed_math.h"

#define NF_THREADS 256
/* pass 2's thread blocks: enough to fill an H100 several times over */
#define NF_PARTIALS 1024
#define NF_NO_BAD 0xffffffffffffffffull

__global__ void __launch_bounds__(NF_THREADS)
    block_sums_kernel(double *blocks, const float *g, int64_t numel, int64_t nb, unsigned long long *max_key) {
    const int64_t b = (int64_t)blockIdx.x * NF_THREADS + threadIdx.x;
    unsigned long long key = 0;
    if (b < nb) {
        const int64_t n = numel - b * SHARD_ALIGN < SHARD_ALIGN ? numel - b * SHARD_ALIGN : SHARD_ALIGN;
        const double s = nf_block_sum(g + b * SHARD_ALIGN, n);
        blocks[b] = s;
        key = nf_max_key(s);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, key, o);
        key = other > key ? other : key;
    }
    if ((threadIdx.x & 31) == 0 && key > 0) atomicMax(max_key, key);
}

extern "C" double shard_block_sums_cuda(double *blocks, const float *g, const ShardSegment *segs, int nseg) {
    unsigned long long *d_key = NULL, key = 0;
    CUDA_CHECK(cudaMalloc(&d_key, sizeof key));
    CUDA_CHECK(cudaMemset(d_key, 0, sizeof key));
    int64_t k = 0;
    for (int s = 0; s < nseg; s++) {
        const int64_t numel = segs[s].numel, nb = (numel + SHARD_ALIGN - 1) / SHARD_ALIGN;
        KV_CHECK(numel >= 0, "shard_block_sums_cuda: segment %d has %lld elements", s, (long long)numel);
        if (nb == 0) continue;
        block_sums_kernel<<<ceil_div_u(nb, NF_THREADS), NF_THREADS>>>(blocks + k, g + segs[s].local, numel, nb, d_key);
        CUDA_CHECK_LAUNCH();
        k += nb;
    }
    cuda_memcpy_d2h(&key, d_key, sizeof key);
    CUDA_CHECK(cudaFree(d_key));
    return nf_key_value(key);
}

/* Sum over the thread block of (hi, lo) pairs, a halving tree in shared
 * memory; thread 0 gets the total. */
__device__ Fixed128 block_fixed_sum(Fixed128 v) {
    __shared__ unsigned long long s_hi[NF_THREADS], s_lo[NF_THREADS];
    const int t = threadIdx.x;
    s_hi[t] = v.hi, s_lo[t] = v.lo;
    __syncthreads();
    for (int half = NF_THREADS / 2; half > 0; half >>= 1) {
        if (t < half) {
            Fixed128 a = {s_hi[t], s_lo[t]}, b = {s_hi[t + half], s_lo[t + half]};
            Fixed128 r = nf_add(a, b);
            s_hi[t] = r.hi, s_lo[t] = r.lo;
        }
        __syncthreads();
    }
    Fixed128 r = {s_hi[0], s_lo[0]};
    return r;
}

/* Partial sums, one per thread block; bad gets the lowest block index pass
 * 2 cannot take (its caller dies naming it). */
__global__ void __launch_bounds__(NF_THREADS) fixed_partials_kernel(unsigned long long *partial, const double *blocks,
                                                                    int64_t nblocks, int E, unsigned long long *bad) {
    Fixed128 acc = {0, 0};
    for (int64_t b = (int64_t)blockIdx.x * NF_THREADS + threadIdx.x; b < nblocks;
         b += (int64_t)gridDim.x * NF_THREADS) {
        const double x = blocks[b];
        if (nf_block_ok(x, E)) acc = nf_add(acc, nf_quantize(x, E));
        else atomicMin(bad, (unsigned long long)b);
    }
    acc = block_fixed_sum(acc);
    if (threadIdx.x == 0) partial[2 * blockIdx.x] = acc.hi, partial[2 * blockIdx.x + 1] = acc.lo;
}

/* The partials' sum into out[0..1] (hi, lo); one thread block. */
__global__ void __launch_bounds__(NF_THREADS)
    fixed_total_kernel(unsigned long long *out, const unsigned long long *partial, int nparts) {
    Fixed128 acc = {0, 0};
    for (int p = threadIdx.x; p < nparts; p += NF_THREADS) {
        Fixed128 x = {partial[2 * p], partial[2 * p + 1]};
        acc = nf_add(acc, x);
    }
    acc = block_fixed_sum(acc);
    if (threadIdx.x == 0) out[0] = acc.hi, out[1] = acc.lo;
}

extern "C" Fixed128 shard_fixed_sum_cuda(const double *blocks, int64_t nblocks, int E) {
    KV_CHECK(nblocks >= 0 && nblocks <= NORM_FIXED_MAX_BLOCKS,
             "shard_fixed_sum_cuda: %lld blocks, more than the %lld whose sum fits 128 bits", (long long)nblocks,
             (long long)NORM_FIXED_MAX_BLOCKS);
    Fixed128 r = {0, 0};
    if (nblocks == 0) return r;
    const int nparts =
        (int)(nblocks < (int64_t)NF_PARTIALS * NF_THREADS ? (nblocks + NF_THREADS - 1) / NF_THREADS : NF_PARTIALS);
    /* out (hi, lo, bad), then the partials */
    unsigned long long *d = NULL, out[3];
    const size_t bytes = sizeof(unsigned long long) * (3 + 2 * (size_t)nparts);
    CUDA_CHECK(cudaMalloc(&d, bytes));
    CUDA_CHECK(cudaMemset(d + 2, 0xff, sizeof(unsigned long long)));
    fixed_partials_kernel<<<(unsigned int)nparts, NF_THREADS>>>(d + 3, blocks, nblocks, E, d + 2);
    CUDA_CHECK_LAUNCH();
    fixed_total_kernel<<<1, NF_THREADS>>>(d, d + 3, nparts);
    CUDA_CHECK_LAUNCH();
    cuda_memcpy_d2h(out, d, sizeof out);
    CUDA_CHECK(cudaFree(d));
    KV_CHECK(out[2] == NF_NO_BAD, "shard_fixed_sum_cuda: block %llu's sum is not in [0, 2^%d)", out[2], E);
    r.hi = out[0], r.lo = out[1];
    return r;
}
