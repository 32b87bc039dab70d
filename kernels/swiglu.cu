/* SwiGLU on the GPU, elementwise with grid-stride loops. The fp32 path keeps
 * the CPU's expression order (__fmul_rn: no FMA contraction); only expf's
 * last-ulp rounding differs from glibc. */
#include "act_io.cuh"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "swiglu.h"

static const int kThreads = 256;

__device__ __forceinline__ float silu_gate(float g) { return 1.0f / (1.0f + expf(-g)); }

__device__ __forceinline__ void swiglu_fwd(float &h, float g, float u) { h = __fmul_rn(__fmul_rn(g, silu_gate(g)), u); }

__device__ __forceinline__ void swiglu_bwd(float &dg, float &du, float dh, float g, float u) {
    const float s = silu_gate(g);
    du = __fmul_rn(dh, __fmul_rn(g, s));
    const float slope = __fadd_rn(1.0f, __fmul_rn(g, 1.0f - s));
    dg = __fmul_rn(__fmul_rn(__fmul_rn(dh, u), s), slope);
}

/* gu rows [gate | up] (swiglu_fused_forward_cpu). */
template <typename E> __global__ void swiglu_fused_forward_kernel(E *h, const E *gu, int64_t N, int64_t F) {
    GRID_STRIDE(i, N * F) {
        const int64_t r = i / F, j = i % F;
        float hf;
        swiglu_fwd(hf, act_f32(gu[r * 2 * F + j]), act_f32(gu[r * 2 * F + F + j]));
        h[i] = act_from_f32<E>(hf);
    }
}

template <typename E>
__global__ void swiglu_fused_backward_kernel(E *dgu, const E *dh, const E *gu, int64_t N, int64_t F) {
    GRID_STRIDE(i, N * F) {
        const int64_t r = i / F, j = i % F;
        float dg, du;
        swiglu_bwd(dg, du, act_f32(dh[i]), act_f32(gu[r * 2 * F + j]), act_f32(gu[r * 2 * F + F + j]));
        dgu[r * 2 * F + j] = act_from_f32<E>(dg);
        dgu[r * 2 * F + F + j] = act_from_f32<E>(du);
    }
}

template <typename E> static void fused_forward(E *h, const E *gu, int64_t N, int64_t F) {
    if (N * F <= 0) return;
    swiglu_fused_forward_kernel<E><<<grid_for(N * F, kThreads), kThreads>>>(h, gu, N, F);
    CUDA_CHECK_LAUNCH();
}

template <typename E> static void fused_backward(E *dgu, const E *dh, const E *gu, int64_t N, int64_t F) {
    if (N * F <= 0) return;
    swiglu_fused_backward_kernel<E><<<grid_for(N * F, kThreads), kThreads>>>(dgu, dh, gu, N, F);
    CUDA_CHECK_LAUNCH();
}

extern "C" void swiglu_fused_forward_cuda(float *h, const float *gu, int64_t N, int64_t F) {
    fused_forward(h, gu, N, F);
}

extern "C" void swiglu_fused_backward_cuda(float *dgu, const float *dh, const float *gu, int64_t N, int64_t F) {
    fused_backward(dgu, dh, gu, N, F);
}

extern "C" void swiglu_fused_forward_bf16_cuda(bf16 *h, const bf16 *gu, int64_t N, int64_t F) {
    fused_forward(h, gu, N, F);
}

extern "C" void swiglu_fused_backward_bf16_cuda(bf16 *dgu, const bf16 *dh, const bf16 *gu, int64_t N, int64_t F) {
    fused_backward(dgu, dh, gu, N, F);
}
