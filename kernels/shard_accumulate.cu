/* acc[i] += parts[r * n + i] for r = 0 .. world - 1 on the GPU: a grid-stride
 * loop, one thread per element holding the running sum in a register. */
extern "C" {
#include "../common/util.h"
}
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "shard_accumulate.h"

__global__ void shard_accumulate_kernel(float *acc, const float *parts, int64_t n, int world) {
    GRID_STRIDE(i, n) {
        float a = acc[i];
        /* __fadd_rn: an explicitly rounded add, as the CPU's, never fused */
        for (int r = 0; r < world; r++) a = __fadd_rn(a, parts[(int64_t)r * n + i]);
        acc[i] = a;
    }
}

extern "C" void shard_accumulate_cuda(float *acc, const float *parts, int64_t n, int world) {
    KV_CHECK(n >= 0 && world >= 1, "shard_accumulate_cuda: %lld elements from %d ranks", (long long)n, world);
    if (n == 0) return;
    shard_accumulate_kernel<<<grid_for(n, 256), 256>>>(acc, parts, n, world);
    CUDA_CHECK_LAUNCH();
}
