/* Rotary embedding on the GPU: one thread per rotated pair. __fmul_rn and
 * __fadd_rn keep nvcc from fusing into FMAs, so the arithmetic is the CPU
 * oracle's, rounding for rounding. */
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "rope.h"

__global__ void rope_rotate_kernel(float *x, const float *cos_t, const float *sin_t, int64_t T, int64_t H,
                                   int64_t D, int64_t pairs, float sign) {
    const int64_t half = D / 2;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = p % half, vec = p / half; /* vec = (b*T + t)*H + h */
        const int64_t t = (vec / H) % T;
        float *v = x + vec * D;
        const float c = cos_t[t * half + i], sn = sign * sin_t[t * half + i];
        const float x1 = v[i], x2 = v[i + half];
        v[i] = __fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, sn));
        v[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn));
    }
}

static void rope_rotate(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H, int64_t D,
                        float sign) {
    const int64_t half = D / 2, pairs = B * T * H * half;
    if (pairs <= 0) return;
    rope_rotate_kernel<<<grid_for(pairs, 256), 256>>>(x, cos_t, sin_t, T, H, D, pairs, sign);
    CUDA_CHECK_LAUNCH();
}

extern "C" void rope_forward_cuda(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                                  int64_t D) {
    rope_rotate(x, cos_t, sin_t, B, T, H, D, 1.0f);
}

extern "C" void rope_backward_cuda(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                                   int64_t D) {
    rope_rotate(dx, cos_t, sin_t, B, T, H, D, -1.0f);
}
