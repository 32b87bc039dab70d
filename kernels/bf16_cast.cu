/* fp32 -> bf16 on the GPU, round to nearest even as bf16_bits_from_float
 * does on the host; a grid-stride loop (bandwidth-bound). */
#include "bf16.h"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

__global__ static void cast_bf16_kernel(bf16 *out, const float *in, int64_t n) {
    GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(in[i]);
}

extern "C" void cast_bf16_cuda(bf16 *out, const float *in, int64_t n) {
    if (n <= 0) return;
    cast_bf16_kernel<<<grid_for(n, 256), 256>>>(out, in, n);
    CUDA_CHECK_LAUNCH();
}
