#ifndef KVCPT_RMSNORM_H
#define KVCPT_RMSNORM_H
/* RMSNorm as Hugging Face LlamaRMSNorm: y = w * x * rsqrt(mean(x^2) + eps),
 * statistics in fp32. rstd (N) is saved for the backward pass. */
#include <stdint.h>

#include "bf16.h"

void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                         float eps);
/* dinp (N, C) += ..., dweight (C) += ... */
void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int64_t N, int64_t C);

/* CUDA twins: same arguments, DEVICE pointers, default stream; results
 * match the CPU oracle within the tolerances of tests/gpu/test_ops_cuda.c. */
#ifdef __cplusplus
extern "C" {
#endif
void rmsnorm_forward_cuda(float *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                          float eps);
/* The bf16 engine's: fp32 statistics and product, out rounded to bf16 once. */
void rmsnorm_forward_bf16_cuda(bf16 *out, float *rstd, const float *inp, const float *weight, int64_t N, int64_t C,
                               float eps);
/* dweight is reduced over rows in a fixed order (no atomics): deterministic. */
void rmsnorm_backward_cuda(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                           const float *rstd, int64_t N, int64_t C);
#ifdef __cplusplus
}
#endif
#endif
