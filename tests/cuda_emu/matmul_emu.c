/* The emulator's stand-in for kernels/matmul.cu. cuBLASLt cannot run on the
 * CPU, so under tests/cuda_emu the CUDA matmul launchers call their CPU
 * oracles (device memory is host memory there). The emulated whole-model
 * tests therefore check everything around the matmuls (the engine's
 * wiring, every other kernel); cuBLASLt itself is only checked on a GPU. */
#include <stdlib.h>

#include "../../common/util.h"
#include "../../kernels/matmul.h"

void matmul_forward_cuda(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_forward_cpu(out, inp, weight, N, IC, OC);
}

void matmul_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          int64_t N, int64_t IC, int64_t OC) {
    matmul_backward_cpu(dinp, dweight, dout, inp, weight, N, IC, OC);
}

static float *widen(const bf16 *x, int64_t n) {
    float *f = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) f[i] = float_from_bf16_bits(x[i]);
    return f;
}

void matmul_forward_bf16_cuda(bf16 *out, const bf16 *inp, const bf16 *weight, int64_t N, int64_t IC, int64_t OC) {
    float *fi = widen(inp, N * IC), *fw = widen(weight, OC * IC), *fo = xmalloc(sizeof(float) * (size_t)(N * OC + 1));
    matmul_forward_cpu(fo, fi, fw, N, IC, OC);
    for (int64_t i = 0; i < N * OC; i++) out[i] = bf16_bits_from_float(fo[i]);
    free(fi), free(fw), free(fo);
}

void matmul_backward_bf16_cuda(bf16 *dinp, float *dweight, const bf16 *dout, const bf16 *inp, const bf16 *weight,
                               int64_t N, int64_t IC, int64_t OC) {
    float *fd = widen(dout, N * OC), *fi = widen(inp, N * IC), *fw = widen(weight, OC * IC);
    float *prod = dinp ? xmalloc(sizeof(float) * (size_t)(N * IC + 1)) : NULL;
    matmul_backward_cpu(prod, dweight, fd, fi, fw, N, IC, OC);
    if (dinp)
        for (int64_t i = 0; i < N * IC; i++) dinp[i] = bf16_bits_from_float(prod[i]);
    free(fd), free(fi), free(fw), free(prod);
}

void matmul_forward_bf16_f32out_cuda(float *out, const bf16 *inp, const bf16 *weight, int64_t N, int64_t IC,
                                     int64_t OC) {
    float *fi = widen(inp, N * IC), *fw = widen(weight, OC * IC);
    matmul_forward_cpu(out, fi, fw, N, IC, OC);
    free(fi), free(fw);
}

/* cuBLASLt's epilogue: add joins the fp32 accumulator (the oracle's fp32
 * product) before the store, one rounding; out may be add. */
void matmul_forward_bf16_f32out_add_cuda(float *out, const float *add, const bf16 *inp, const bf16 *weight, int64_t N,
                                         int64_t IC, int64_t OC) {
    float *fi = widen(inp, N * IC), *fw = widen(weight, OC * IC), *acc = xmalloc(sizeof(float) * (size_t)(N * OC + 1));
    matmul_forward_cpu(acc, fi, fw, N, IC, OC);
    for (int64_t i = 0; i < N * OC; i++) out[i] = acc[i] + add[i];
    free(fi), free(fw), free(acc);
}

void matmul_backward_bf16_f32dinp_cuda(float *dinp, float *dweight, const bf16 *dout, const bf16 *inp,
                                       const bf16 *weight, int64_t N, int64_t IC, int64_t OC) {
    float *fd = widen(dout, N * OC), *fi = widen(inp, N * IC), *fw = widen(weight, OC * IC);
    matmul_backward_cpu(dinp, dweight, fd, fi, fw, N, IC, OC);
    free(fd), free(fi), free(fw);
}

void matmul_backward_f32dout_cuda(bf16 *dinp, float *dweight, const float *dout, const bf16 *inp, const bf16 *weight,
                                  int64_t N, int64_t IC, int64_t OC) {
    float *fi = widen(inp, N * IC), *fw = widen(weight, OC * IC);
    float *prod = dinp ? xmalloc(sizeof(float) * (size_t)(N * IC + 1)) : NULL;
    matmul_backward_bf16r_cpu(prod, dweight, dout, fi, fw, N, IC, OC);
    if (dinp)
        for (int64_t i = 0; i < N * IC; i++) dinp[i] = bf16_bits_from_float(prod[i]);
    free(fi), free(fw), free(prod);
}

/* bf16 operands, fp32 output: the weight widened exactly, the activations
 * rounded by the CPU oracle itself (same RNE as the device cast). */
void matmul_forward_bf16r_cuda(float *out, const float *inp, const float *weight, int64_t N, int64_t IC, int64_t OC) {
    matmul_forward_bf16r_cpu(out, inp, weight, N, IC, OC);
}

void matmul_backward_bf16r_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                                int64_t N, int64_t IC, int64_t OC) {
    matmul_backward_bf16r_cpu(dinp, dweight, dout, inp, weight, N, IC, OC);
}

void matmul_forward_bf16w_cuda(float *out, const float *inp, const bf16 *weight, int64_t N, int64_t IC, int64_t OC) {
    float *fw = widen(weight, OC * IC);
    matmul_forward_bf16r_cpu(out, inp, fw, N, IC, OC);
    free(fw);
}

void matmul_backward_bf16w_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const bf16 *weight,
                                int64_t N, int64_t IC, int64_t OC) {
    float *fw = dinp ? widen(weight, OC * IC) : NULL;
    matmul_backward_bf16r_cpu(dinp, dweight, dout, inp, fw, N, IC, OC);
    free(fw);
}

void matmul_cuda_release(void) {}
