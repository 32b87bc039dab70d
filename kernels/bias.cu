/* The bias add and its gradient on the GPU (kernels/bias.h). The add is a
 * grid-stride loop; the gradient gives each column one thread, which sums
 * its rows in order as the CPU does (adjacent threads read adjacent
 * columns, so every row's load is coalesced). */
#include "act_io.cuh"
#include "bias.h"
#include "cuda_common.cuh"
#include "cuda_reduce.cuh"

static const int kThreads = 256;

template <typename E> __global__ void bias_add_kernel(E *out, const float *bias, int64_t N, int64_t OC) {
    GRID_STRIDE(i, N * OC) out[i] = act_from_f32<E>(__fadd_rn(act_f32(out[i]), bias[i % OC]));
}

template <typename E> __global__ void bias_backward_kernel(float *dbias, const E *dout, int64_t N, int64_t OC) {
    GRID_STRIDE(o, OC) {
        float acc = 0.0f;
        for (int64_t n = 0; n < N; n++) acc = __fadd_rn(acc, act_f32(dout[n * OC + o]));
        dbias[o] = __fadd_rn(dbias[o], acc);
    }
}

template <typename E> static void add(E *out, const float *bias, int64_t N, int64_t OC) {
    if (N * OC <= 0) return;
    bias_add_kernel<E><<<grid_for(N * OC, kThreads), kThreads>>>(out, bias, N, OC);
    CUDA_CHECK_LAUNCH();
}

template <typename E> static void backward(float *dbias, const E *dout, int64_t N, int64_t OC) {
    if (N <= 0 || OC <= 0) return;
    bias_backward_kernel<E><<<grid_for(OC, kThreads), kThreads>>>(dbias, dout, N, OC);
    CUDA_CHECK_LAUNCH();
}

extern "C" void bias_add_cuda(float *out, const float *bias, int64_t N, int64_t OC) { add(out, bias, N, OC); }

extern "C" void bias_backward_cuda(float *dbias, const float *dout, int64_t N, int64_t OC) {
    backward(dbias, dout, N, OC);
}

extern "C" void bias_add_bf16_cuda(bf16 *out, const float *bias, int64_t N, int64_t OC) { add(out, bias, N, OC); }

extern "C" void bias_backward_bf16_cuda(float *dbias, const bf16 *dout, int64_t N, int64_t OC) {
    backward(dbias, dout, N, OC);
}
