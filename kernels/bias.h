#ifndef KVCPT_BIAS_H
#define KVCPT_BIAS_H
/* A linear layer's bias, apart from its product: out (N, OC) += bias (OC)
 * on every row, and its gradient, dbias += the column sums of dout (N, OC)
 * over the rows. The q/k/v projections of the families that have biases
 * (model/arch.h) add theirs to the fused product before RoPE. Each column's
 * sum runs over the rows in order, one fp32 add each, on every backend and
 * with any thread count: the CPU and the fp32 CUDA engine agree bit for bit. */
#include <stdint.h>

#include "bf16.h"

void bias_add_cpu(float *out, const float *bias, int64_t N, int64_t OC);
void bias_backward_cpu(float *dbias, const float *dout, int64_t N, int64_t OC);

#ifdef __cplusplus
extern "C" {
#endif
/* CUDA twins, DEVICE pointers, default stream. The bias and its gradient
 * are fp32; out and dout are fp32, or bf16 (read into fp32, the sum rounded
 * once to bf16 on store). */
void bias_add_cuda(float *out, const float *bias, int64_t N, int64_t OC);
void bias_backward_cuda(float *dbias, const float *dout, int64_t N, int64_t OC);
void bias_add_bf16_cuda(bf16 *out, const float *bias, int64_t N, int64_t OC);
void bias_backward_bf16_cuda(float *dbias, const bf16 *dout, int64_t N, int64_t OC);
#ifdef __cplusplus
}
#endif
#endif
