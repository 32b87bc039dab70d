/* Rotary embedding on the GPU: one thread per rotated pair. __fmul_rn and
 * __fadd_rn keep nvcc from fusing into FMAs, so the arithmetic is the CPU
 * oracle's, rounding for rounding. */
#include "act_io.cuh"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"
#include "rope.h"

__global__ void rope_rotate_kernel(float *x, const float *cos_t, const float *sin_t, int64_t T, int64_t H, int64_t D,
                                   int64_t pairs, float sign) {
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

/* The fused projection's split (rope_split_forward_cpu): one thread per
 * rotated pair of a q or k head, read from its row of qkv (width W), then
 * one per v element, copied. Same arithmetic as rope_rotate_kernel. */
template <typename E>
__global__ void rope_split_kernel(E *q, E *k, E *v, const E *qkv, const float *cos_t, const float *sin_t, int64_t T,
                                  int64_t Hq, int64_t Hkv, int64_t D, int64_t rows) {
    const int64_t half = D / 2, heads = Hq + Hkv, pairs = rows * heads * half, KD = Hkv * D, W = (Hq + 2 * Hkv) * D;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs + rows * KD;
         p += (int64_t)gridDim.x * blockDim.x) {
        if (p >= pairs) { /* v: copied */
            const int64_t e = p - pairs, row = e / KD;
            v[e] = qkv[row * W + (Hq + Hkv) * D + e % KD];
            continue;
        }
        const int64_t i = p % half, hh = (p / half) % heads, row = p / half / heads, t = row % T;
        const E *x = qkv + row * W + hh * D;
        E *y = hh < Hq ? q + (row * Hq + hh) * D : k + (row * Hkv + hh - Hq) * D;
        const float c = cos_t[t * half + i], sn = sin_t[t * half + i];
        const float x1 = act_f32(x[i]), x2 = act_f32(x[i + half]);
        y[i] = act_from_f32<E>(__fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, sn)));
        y[i + half] = act_from_f32<E>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn)));
    }
}

/* Its backward (rope_join_backward_cpu): dq and dk rotated back into their
 * places of the dqkv rows, dv copied. */
template <typename E>
__global__ void rope_join_kernel(E *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                                 const float *sin_t, int64_t T, int64_t Hq, int64_t Hkv, int64_t D, int64_t rows) {
    const int64_t half = D / 2, heads = Hq + Hkv, pairs = rows * heads * half, KD = Hkv * D, W = (Hq + 2 * Hkv) * D;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs + rows * KD;
         p += (int64_t)gridDim.x * blockDim.x) {
        if (p >= pairs) {
            const int64_t e = p - pairs, row = e / KD;
            dqkv[row * W + (Hq + Hkv) * D + e % KD] = act_from_f32<E>(dv[e]);
            continue;
        }
        const int64_t i = p % half, hh = (p / half) % heads, row = p / half / heads, t = row % T;
        const float *x = hh < Hq ? dq + (row * Hq + hh) * D : dk + (row * Hkv + hh - Hq) * D;
        E *y = dqkv + row * W + hh * D;
        const float c = cos_t[t * half + i], sn = -sin_t[t * half + i];
        const float x1 = x[i], x2 = x[i + half];
        y[i] = act_from_f32<E>(__fadd_rn(__fmul_rn(x1, c), -__fmul_rn(x2, sn)));
        y[i + half] = act_from_f32<E>(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, sn)));
    }
}

template <typename E>
static void rope_split(E *q, E *k, E *v, const E *qkv, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                       int64_t Hq, int64_t Hkv, int64_t D) {
    const int64_t rows = B * T, n = rows * ((Hq + Hkv) * (D / 2) + Hkv * D);
    if (n <= 0) return;
    rope_split_kernel<E><<<grid_for(n, 256), 256>>>(q, k, v, qkv, cos_t, sin_t, T, Hq, Hkv, D, rows);
    CUDA_CHECK_LAUNCH();
}

template <typename E>
static void rope_join(E *dqkv, const float *dq, const float *dk, const float *dv, const float *cos_t,
                      const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    const int64_t rows = B * T, n = rows * ((Hq + Hkv) * (D / 2) + Hkv * D);
    if (n <= 0) return;
    rope_join_kernel<E><<<grid_for(n, 256), 256>>>(dqkv, dq, dk, dv, cos_t, sin_t, T, Hq, Hkv, D, rows);
    CUDA_CHECK_LAUNCH();
}

extern "C" void rope_split_forward_cuda(float *q, float *k, float *v, const float *qkv, const float *cos_t,
                                        const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
    rope_split(q, k, v, qkv, cos_t, sin_t, B, T, Hq, Hkv, D);
}

extern "C" void rope_join_backward_cuda(float *dqkv, const float *dq, const float *dk, const float *dv,
                                        const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t Hq,
                                        int64_t Hkv, int64_t D) {
    rope_join(dqkv, dq, dk, dv, cos_t, sin_t, B, T, Hq, Hkv, D);
}

extern "C" void rope_split_forward_bf16_cuda(bf16 *q, bf16 *k, bf16 *v, const bf16 *qkv, const float *cos_t,
                                             const float *sin_t, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                             int64_t D) {
    rope_split(q, k, v, qkv, cos_t, sin_t, B, T, Hq, Hkv, D);
}

extern "C" void rope_join_backward_bf16_cuda(bf16 *dqkv, const float *dq, const float *dk, const float *dv,
                                             const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t Hq,
                                             int64_t Hkv, int64_t D) {
    rope_join(dqkv, dq, dk, dv, cos_t, sin_t, B, T, Hq, Hkv, D);
}
